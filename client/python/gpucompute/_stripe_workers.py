"""Stripes in worker processes (``Client(stripe_processes=True)``).

grpcio copies every received byte two or three times and every sent byte once more, all
holding the GIL, so one process moves about what one stream does however many threads
it stripes over. Here each stripe of a Parallel step runs
in one of ``stripes`` worker processes instead, each with its own Client and connection.

The data never crosses the process boundary by pickling: array arguments of a stripe
lie in memfd blocks (anonymous shared memory, never linked in /dev/shm, so nothing can
leak there), whose fds travel with the job (SCM_RIGHTS). An input outside such a block is
copied into one first (np.copyto, without the GIL, on the stripe's dispatching thread);
a result array is made in a block (``empty``), so the workers write it in place.

A stripe step carries its ``job``: the module-level function that built it and its
arguments, so that a worker builds the same step over its mapping of the blocks.
"""
from __future__ import annotations

import mmap
import os
import pickle
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar,
                    Union)

import grpc
import numpy as np

from ._pb import pb
from ._steps import CallGroup, Stream, Unary
from .errors import STATUS_DETAILS_KEY, StripeWorkerDied, status_details_of

StepT = TypeVar("StepT", bound=Union[Unary, Stream])

#: the most fds one message carries (a stripe's arrays lie in a few blocks)
_MAX_FDS = 16
_HEAD = struct.Struct("<Q")
#: glibc malloc in the workers keeps freed blocks up to 64 MiB and 1 GiB of freed heap
#: mapped, so grpc's per-message buffers reuse pages instead of faulting fresh ones in
#: (what bench/bulk_transfer.py --keep-freed-memory does for a caller's own process)
_WORKER_MALLOC = "glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=1073741824"
#: the pieces an input is copied into shared memory by, between checks for cancellation
_COPY_PIECE = 16 << 20
#: a worker process's program: the client on top, this module's loop under it
_WORKER_MAIN = ("import sys; from gpucompute.client import Client; "
                "from gpucompute._stripe_workers import worker_main; "
                "worker_main(int(sys.argv[1]), Client)")
#: how long close() waits for a worker to stop before killing it
_STOP_TIMEOUT_S = 5.0


# -- shared blocks --------------------------------------------------------------------

class Block(mmap.mmap):
    """A memfd mapped shared; its fd (for the workers) closes with the last view of it."""

    fd: int
    base: int


_BLOCKS: "weakref.WeakValueDictionary[int, Block]" = weakref.WeakValueDictionary()
_BLOCKS_LOCK = threading.Lock()


def new_block(nbytes: int) -> Block:
    fd = os.memfd_create("gpucompute-stripe", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, max(nbytes, 1))
        block = Block(fd, max(nbytes, 1))
    except BaseException:
        os.close(fd)
        raise
    block.fd = fd
    block.base = int(np.frombuffer(block, np.uint8).__array_interface__["data"][0])
    weakref.finalize(block, os.close, fd)
    with _BLOCKS_LOCK:
        _BLOCKS[block.base] = block
    return block


def empty(shape: Sequence[int], dtype: Any) -> np.ndarray:  # type: ignore[type-arg]
    """np.empty in a new block: the workers write into it without a copy; the block is
    the array's base, freed with the array's last view."""
    dt = np.dtype(dtype)
    dims = tuple(int(s) for s in shape)
    block = new_block(int(np.prod(dims, dtype=np.int64)) * dt.itemsize)
    return np.ndarray(dims, dt, buffer=block)


def find_block(arr: np.ndarray) -> Optional[Tuple[Block, int]]:  # type: ignore[type-arg]
    """The block a C-contiguous array lies in, and its offset there; None if none."""
    if not arr.flags.c_contiguous:
        return None
    ptr = int(arr.__array_interface__["data"][0])
    with _BLOCKS_LOCK:
        blocks = list(_BLOCKS.values())
    for block in blocks:
        if block.base <= ptr and ptr + arr.nbytes <= block.base + len(block):
            return block, ptr - block.base
    return None


# -- jobs -------------------------------------------------------------------------------

@dataclass
class Out:
    """An array argument a stripe writes (a result), against the ones it reads."""

    array: np.ndarray  # type: ignore[type-arg]


@dataclass
class StripeJob:
    """How to build a stripe step anywhere: ``build(*args)`` (Out unwrapped)."""

    build: Callable[..., Any]
    args: Tuple[Any, ...]
    #: the stripe's range, named in its errors ("rows [0, 12)")
    label: str


def stripe_step(build: Callable[..., StepT], args: Tuple[Any, ...], label: str) -> StepT:
    """The step ``build(*args)`` with its job attached (thread stripes send the step
    itself; process stripes send the job)."""
    step = build(*(a.array if isinstance(a, Out) else a for a in args))
    step.job = StripeJob(build, args, label)
    return step


@dataclass
class _Ref:
    """An array argument as the worker maps it: block ``fd_index`` of the message."""

    fd_index: int
    offset: int
    shape: Tuple[int, ...]
    dtype: str


@dataclass
class _Message:
    """A protobuf message between the processes (the generated classes do not pickle)."""

    type_name: str
    data: bytes


def _portable(value: Any) -> Any:
    if hasattr(value, "SerializeToString"):
        return _Message(type(value).__name__, value.SerializeToString())
    return value


def _local(value: Any) -> Any:
    if isinstance(value, _Message):
        return getattr(pb, value.type_name).FromString(value.data)
    return value


def _cancelled_error() -> grpc.RpcError:
    return _RemoteRpcError(grpc.StatusCode.CANCELLED, "cancelled before it started")


def _copy(target: np.ndarray, source: np.ndarray,  # type: ignore[type-arg]
          cancelled: Callable[[], bool]) -> None:
    """np.copyto by pieces of about _COPY_PIECE bytes along the first axis, so that a
    sibling's failure or Ctrl-C stops it soon."""
    if target.ndim == 0 or target.nbytes <= _COPY_PIECE:
        np.copyto(target, source)
        return
    rows = max(1, _COPY_PIECE * len(target) // target.nbytes)
    for begin in range(0, len(target), rows):
        if cancelled():
            raise _cancelled_error()
        np.copyto(target[begin:begin + rows], source[begin:begin + rows])


def copy_on_threads(target: np.ndarray, source: np.ndarray,  # type: ignore[type-arg]
                    threads: int) -> None:
    """np.copyto by ranges of the first axis on up to ``threads`` threads (NumPy drops
    the GIL: the copy and the target's page faults run in parallel)."""
    rows = len(target) if target.ndim else 0
    if rows < 2 or threads < 2 or target.nbytes <= _COPY_PIECE:
        np.copyto(target, source)
        return
    bounds = [rows * k // threads for k in range(threads + 1)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda b, e: np.copyto(target[b:e], source[b:e]), bounds, bounds[1:]))


class _Placed:
    """A job's arguments with arrays turned into _Refs, and the copies around it."""

    def __init__(self, args: Tuple[Any, ...], cancelled: Callable[[], bool]):
        self._cancelled = cancelled
        self.blocks: List[Block] = []  # kept alive until the job ends
        self.copy_back: List[Tuple[np.ndarray, np.ndarray]] = []  # type: ignore[type-arg]
        self.args = tuple(self._place(a) for a in args)

    def _place(self, arg: Any) -> Any:
        if isinstance(arg, tuple):
            return tuple(self._place(a) for a in arg)
        if hasattr(arg, "SerializeToString"):
            return _portable(arg)
        out = isinstance(arg, Out)
        arr = arg.array if out else arg
        if not isinstance(arr, np.ndarray):
            return arg
        found = find_block(arr)
        if found is None:
            shared = empty(arr.shape, arr.dtype)
            if out:
                self.copy_back.append((arr, shared))
            else:
                _copy(shared, arr, self._cancelled)  # the one copy of an input (no GIL)
            arr = shared
            found = find_block(arr)
            assert found is not None
        block, offset = found
        index = next((i for i, b in enumerate(self.blocks) if b is block), None)
        if index is None:
            index = len(self.blocks)
            self.blocks.append(block)
        return _Ref(index, offset, tuple(arr.shape), arr.dtype.str)

    def finish(self) -> None:
        for target, shared in self.copy_back:
            _copy(target, shared, lambda: False)


# -- messages: a length, a pickle, and fds with the first byte ---------------------------

def _send(sock: socket.socket, message: Any, fds: Sequence[int] = ()) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    frame = _HEAD.pack(len(payload)) + payload
    sent = socket.send_fds(sock, [frame], list(fds)) if fds else 0
    sock.sendall(frame[sent:])


def _recv_exact(sock: socket.socket, n: int, into: bytearray) -> None:
    while len(into) < n:
        more = sock.recv(n - len(into))
        if not more:
            raise EOFError("the peer closed the connection")
        into += more


def _recv(sock: socket.socket) -> Tuple[Any, List[int]]:
    head, fds, _, _ = socket.recv_fds(sock, _HEAD.size, _MAX_FDS)
    if not head:
        raise EOFError("the peer closed the connection")
    buf = bytearray(head)
    _recv_exact(sock, _HEAD.size, buf)
    (n,) = _HEAD.unpack(buf)
    payload = bytearray()
    _recv_exact(sock, n, payload)
    return pickle.loads(payload), fds


# -- the parent's side ------------------------------------------------------------------

class _RemoteRpcError(grpc.RpcError):  # type: ignore[misc]  # grpc has no types
    """A worker's gRPC failure as the thread path raises it (Run turns it into the
    errors.py class of its code, with the reason its status details carry)."""

    def __init__(self, code: grpc.StatusCode, details: str, status_details: bytes = b""):
        super().__init__(details)
        self._code, self._details, self._status_details = code, details, status_details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Tuple[Tuple[str, bytes], ...]:
        return ((STATUS_DETAILS_KEY, self._status_details),) if self._status_details else ()


class _Worker:
    """One worker process and the parent's end of its socket."""

    def __init__(self, config: Dict[str, Any]):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root,
                                                          env.get("PYTHONPATH")]))
        env.setdefault("GLIBC_TUNABLES", _WORKER_MALLOC)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_MAIN, str(child.fileno())],
                pass_fds=[child.fileno()], env=env, stdin=subprocess.DEVNULL)
        finally:
            child.close()
        self.sock = parent
        self._send_lock = threading.Lock()
        self._next_job = 0
        self._ready = False
        self.send(("config", config))

    def wait_ready(self, label: str) -> None:
        """Until the worker has its Client (its first message); StripeWorkerDied if it
        ends first."""
        if self._ready:
            return
        try:
            (kind, _, _), _ = _recv(self.sock)
        except (EOFError, OSError):
            raise self.died(label) from None
        assert kind == "ready"
        self._ready = True

    def send(self, message: Any, fds: Sequence[int] = ()) -> None:
        with self._send_lock:
            _send(self.sock, message, fds)

    def died(self, label: str) -> StripeWorkerDied:
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        return StripeWorkerDied(grpc.StatusCode.ABORTED,
                                f"stripe worker process {self.proc.pid} ended (exit status "
                                f"{code}) during {label}; a new one takes its place")

    def run(self, job: StripeJob, deadline: Optional[float], retries: int,
            group: Any) -> Any:
        """Runs ``job`` in the worker; its reply (a Unary's message, a Stream's trailer)."""
        self.wait_ready(job.label)
        placed = _Placed(job.args, lambda: group is not None and group.cancelled)
        self._next_job += 1
        job_id = self._next_job
        try:
            self.send(("job", job_id, job.build, placed.args, deadline, retries),
                      [b.fd for b in placed.blocks])
        except OSError:
            raise self.died(job.label) from None
        if group is not None:
            group.add(_RemoteCall(self, job_id))
        reply_id = 0
        while reply_id != job_id:  # (an earlier job's reply cannot be pending; if it were)
            try:
                (kind, reply_id, value), _ = _recv(self.sock)
            except (EOFError, OSError):
                raise self.died(job.label) from None
        if kind == "rpc":
            code, details, status_details = value
            raise _RemoteRpcError(grpc.StatusCode[code], f"{details} (stripe {job.label})",
                                  status_details)
        if kind == "error":
            raise value
        placed.finish()
        return _local(value)

    def ask_to_stop(self) -> None:
        try:
            self.send(("stop",))
        except OSError:
            pass
        self.sock.close()

    def wait(self) -> None:
        """Until the process ends (killed if it has not within _STOP_TIMEOUT_S)."""
        try:
            self.proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self.ask_to_stop()
        self.wait()


class _RemoteCall:
    """A job in a worker, as a CallGroup cancels it."""

    def __init__(self, worker: _Worker, job_id: int):
        self._worker, self._job_id = worker, job_id

    def cancel(self) -> None:
        try:
            self._worker.send(("cancel", self._job_id))
        except OSError:
            pass  # the worker is gone: its reply says so


def _stop_all(workers: List[_Worker]) -> None:
    for worker in workers:  # all at once, then wait for each
        worker.ask_to_stop()
    for worker in workers:
        worker.wait()
    workers.clear()


class StripeWorkers:
    """``count`` worker processes, started at the first job, each running one job at a
    time; a worker that dies is replaced."""

    def __init__(self, count: int, config: Dict[str, Any]):
        self._count, self._config = count, config
        self._lock = threading.Lock()
        self._idle: "queue.SimpleQueue[Optional[_Worker]]" = queue.SimpleQueue()
        self._all: List[_Worker] = []
        self._started = False
        self._closed = False
        # Stopped at interpreter exit too (the list, not self: no cycle).
        self._finalizer = weakref.finalize(self, _stop_all, self._all)

    def _checkout(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise ValueError("the client is closed")
            if not self._started:
                for _ in range(self._count):
                    started = _Worker(self._config)
                    self._all.append(started)
                    self._idle.put(started)
                self._started = True
        worker = self._idle.get()
        if worker is None:  # a dead worker's place: a new one
            with self._lock:
                worker = _Worker(self._config)
                self._all.append(worker)
        return worker

    @contextmanager
    def _borrowed(self) -> Iterator[_Worker]:
        """A free worker for one job; back to the others after it, or replaced if it died."""
        worker = self._checkout()
        alive = True
        try:
            yield worker
        except StripeWorkerDied:
            alive = False
            raise
        finally:
            if alive:
                self._idle.put(worker)
            else:
                with self._lock:
                    self._all.remove(worker)
                worker.stop()
                self._idle.put(None)

    def start(self) -> None:
        """Starts the workers now (else the first job does) and waits until each is
        ready: what a first striped call would pay, paid before timing one."""
        with ExitStack() as stack:
            for _ in range(self._count):
                stack.enter_context(self._borrowed()).wait_ready("start-up")

    def run(self, step: Any, deadline: Optional[float], retries: int, group: Any) -> Any:
        """``step`` (which has a job) on the next free worker: a Unary's reply; a
        Stream's trailer is set on its sink, and its reply is None."""
        if group is not None and group.cancelled:
            raise _cancelled_error()
        with self._borrowed() as worker:
            reply = worker.run(step.job, deadline, retries, group)
        if hasattr(step, "sink"):
            step.sink.trailer = reply
            return None
        return reply

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._finalizer()

    def pids(self) -> List[int]:
        with self._lock:
            return [w.proc.pid for w in self._all]


# -- the worker's side ------------------------------------------------------------------

def _resolve(arg: Any, maps: List[mmap.mmap]) -> Any:
    if isinstance(arg, tuple):
        return tuple(_resolve(a, maps) for a in arg)
    if isinstance(arg, _Ref):
        return np.ndarray(arg.shape, np.dtype(arg.dtype), buffer=maps[arg.fd_index],
                          offset=arg.offset)
    return _local(arg)


def _run_job(client: Any, sock: socket.socket, send_lock: threading.Lock, group: Any,
             message: Tuple[Any, ...], fds: List[int]) -> None:
    _, job_id, build, args, deadline, retries = message
    try:
        try:
            maps = [mmap.mmap(fd, os.fstat(fd).st_size) for fd in fds]
        finally:
            for fd in fds:
                os.close(fd)
        step = build(*_resolve(args, maps))
        step.channel = 0  # the worker's one connection
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            reply: Tuple[str, int, Any] = ("rpc", job_id, ("DEADLINE_EXCEEDED",
                                                           "the call's timeout passed", b""))
        else:
            value = client._send_retrying(step, timeout, retries, group)
            reply = ("ok", job_id, _portable(step.sink.trailer if hasattr(step, "sink")
                                             else value))
    except grpc.RpcError as e:
        code = e.code() if hasattr(e, "code") and e.code() is not None else None
        # The status details go along, so that the caller's error keeps its reason.
        reply = ("rpc", job_id, ((code or grpc.StatusCode.UNKNOWN).name,
                                 e.details() if hasattr(e, "details") else str(e),
                                 status_details_of(e) or b""))
    except Exception as e:  # noqa: BLE001 - goes back to the caller as raised
        reply = ("error", job_id, e)
    with send_lock:
        try:
            _send(sock, reply)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            _send(sock, ("error", job_id, RuntimeError(f"stripe worker: {reply[2]!r} ({e})")))


def worker_main(fd: int, make_client: Callable[..., Any]) -> None:
    """A worker process: one Client (``make_client``, gpucompute.Client: this module lies
    below it); jobs run one at a time on a thread, while this thread reads cancels; ends
    when the parent says stop or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    sock = socket.socket(fileno=fd)
    (kind, config), _ = _recv(sock)
    assert kind == "config"
    client = make_client(config["target"], token=config["token"], options=config["options"])
    _send(sock, ("ready", 0, None))
    send_lock = threading.Lock()
    groups: Dict[int, Any] = {}
    try:
        while True:
            try:
                message, fds = _recv(sock)
            except (EOFError, OSError):
                break
            if message[0] == "job":
                groups = {message[1]: CallGroup()}  # one job at a time
                threading.Thread(target=_run_job, daemon=True,
                                 args=(client, sock, send_lock, groups[message[1]],
                                       message, fds)).start()
            elif message[0] == "cancel" and message[1] in groups:
                groups[message[1]].cancel()
            elif message[0] == "stop":
                break
    finally:
        client.close()
