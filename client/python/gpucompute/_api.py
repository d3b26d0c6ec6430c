"""The public methods of both clients, written once as generators of RPC steps.

Each method returns what its subclass's ``_perform`` makes of the call: ``client.Client``
the result itself (it blocks), ``aio.Client`` an awaitable of it; so they are typed Any.
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from . import _heap, _shared_memory, _shared_pool, _stripe_workers
from ._heap import DEFAULT_HEAP_WARMUP
from ._cuda_arrays import CudaArray, empty_like_device, to_device_like
from ._device_array import BufferList, DeviceArray
from ._compute_methods import ComputeMethods, Named, Placed
from ._pb import pb
from ._shared_slice import SharedSlice
from ._steps import Run, Steps, Stream, Unary, make_stubs
from ._stream import ResultOptions, ResultStream
from ._streaming import StreamingMethods
from ._transfers import (_MESSAGE_MARGIN, _UNASKED_INLINE_BYTES, DEFAULT_STRIPE_BYTES,
                         TransferMethods)
from ._types import Array, ServerInfo, resolve_target
from .errors import FailedPrecondition, GpuComputeError

#: inline operands larger than this go through Buffers.Upload automatically
DEFAULT_UPLOAD_THRESHOLD = 8 << 20
#: a message size every gRPC server accepts (its default limit), assumed when the
#: server's own limit cannot be read
_SAFE_MESSAGE_BYTES = 4 << 20
# Inline inputs up to this size try the one-message (unary) read first; larger ones
# stream at once, since a result too large for one message is refused and the whole
# request sent again (an 8 MiB normalize: 28 -> 43 ms on the CPU backend).
_SMALL_INPUT_BYTES = 1 << 20


def _device_operand(named: Named, options: ResultOptions) -> Optional[CudaArray]:
    """The first device-array operand of a CuPy or PyTorch kind, when the result is to
    come back as an array of its library on its device (no out=, nothing kept)."""
    if options.out is not None or options.keep_on_device:
        return None
    return next((v for _, v in named if isinstance(v, CudaArray) and v.library), None)


def _nbytes(shape: Optional[Tuple[int, ...]], dtype: Any) -> Optional[int]:
    """The bytes of an array of ``shape`` and ``dtype``; None when either is unknown."""
    if shape is None or dtype is None:
        return None
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


LimitT = TypeVar("LimitT")



class ClientApi(ComputeMethods, StreamingMethods, TransferMethods):
    """Connection settings and every public method; a subclass runs the steps (``_perform``).

    Parameters (of both clients)
    ----------
    target: "host:port"; None (or left out): the GPUCOMPUTE_TARGET environment variable.
    credentials: grpc.ChannelCredentials for TLS (e.g. grpc.ssl_channel_credentials());
        None for a plaintext channel.
    token: sent with every call as "authorization: Bearer <token>" metadata.
    timeout: default deadline of every call, in seconds (None: none). A call's timeout
        covers the whole call: the uploads it makes first and its result stream.
    upload_threshold: inline operands larger than this many bytes are uploaded as
        temporary buffers first (and deleted after the call); also whenever the inline
        operands together would pass the server's message limit.
    options: extra grpc channel options.
    stripes: downloads and uploads larger than ``stripe_bytes`` run as ranges of that
        size, this many at once, each on its own connection: downloads are written in
        place into the result, uploads go into one upload session (a stripe whose
        connection breaks is sent or fetched again); array inputs of
        stream_discount_product and stream_normalize larger than ``stripe_bytes`` run as
        up to this many calls at once over ranges of their first axis; the first failing
        range fails the call and cancels the others; 1: one stream.
    stripe_processes: run those stripes in ``stripes`` worker processes (started at the
        first striped call, each with its own connection; not with credentials) instead
        of threads of this one, whose GIL holds them to one core's worth of grpcio's
        copying (~2 GB/s); inputs are copied once into shared memory for them (not those
        made with Client.stripe_array), results come back in shared memory.
    session: send the compute calls whose result comes as one message over one open
        Compute.Session call (opened at the first such call, again after it breaks)
        instead of a call each, where the server has sessions; results and exceptions
        are those of the calls.
    shared_memory: where the server maps this host's shared memory (it runs here, with
        --allow_shared_memory), compute calls send NumPy operands of 1 MiB and more, and
        take such results, through shared-memory regions the client keeps and reuses
        (``_shared_pool``): one copy each way on this host instead of gRPC; False: gRPC.
    heap_warmup: bytes of this process's heap (glibc only) made ready at connect time
        for results, once per process (``_heap``): a first result up to this size then
        costs what later ones do, not the kernel's zeroing of fresh pages (~2 ms more for
        8 MiB); the process keeps them resident. 0: none. At most 30 MiB.
    """

    #: False where calls return awaitables (DeviceArray.__array__ cannot download then)
    blocking = True

    def __init__(self, target: Optional[str] = None, *, credentials: Optional[Any] = None,
                 token: Optional[str] = None, timeout: Optional[float] = None,
                 upload_threshold: int = DEFAULT_UPLOAD_THRESHOLD,
                 options: Sequence[Tuple[str, Any]] = (), stripes: int = 1,
                 stripe_bytes: int = DEFAULT_STRIPE_BYTES, stripe_processes: bool = False,
                 session: bool = True, heap_warmup: int = DEFAULT_HEAP_WARMUP,
                 shared_memory: bool = True):
        self.target = target = resolve_target(target)
        self.timeout = timeout
        self.upload_threshold = int(upload_threshold)
        # HTTP/2 frames up to 16 MiB (gRPC's default is 16 KiB), as the server and
        # the C++ client advertise: of the transport settings tried, only this one helped.
        # No gRPC retries: a streaming call (the session) that fails in grpc-core's retry
        # layer before it reaches a server (connection refused) can end with its
        # receives never completed, and grpcio's next() then waits forever, even after
        # cancel(); failed steps are retried here where that is safe.
        self._channel_options = [("grpc.max_receive_message_length", -1),
                                 ("grpc.max_send_message_length", -1),
                                 ("grpc.http2.max_frame_size", (1 << 24) - 1),
                                 ("grpc.enable_retries", 0)] + list(options)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._max_message: Optional[int] = None
        #: whether the server honours OutputOptions.single_message (None: not asked yet)
        self._single_message: Optional[bool] = None
        self.session = bool(session)
        #: whether the server has Compute.Session (None: not asked yet)
        self._sessions: Optional[bool] = None
        #: the server's result chunk size when a request gives none (0: not known)
        self._default_chunk = 0
        #: the server has answered since the session last broke: a new session opens only
        #: then (a session call started while the connection is down is the one call
        #: grpcio may never end), so the first small call after a break goes alone
        self._answered = False
        self._lock = threading.Lock()
        if int(stripes) < 1 or int(stripe_bytes) < 1:
            raise ValueError(f"stripes {stripes} and stripe_bytes {stripe_bytes} must be >= 1")
        self.stripes, self.stripe_bytes = int(stripes), int(stripe_bytes)
        self._workers: Optional[_stripe_workers.StripeWorkers] = None
        if stripe_processes and self.stripes > 1:
            if credentials is not None:
                raise ValueError("stripe_processes: credentials cannot pass to other "
                                 "processes (a token can)")
            self._workers = _stripe_workers.StripeWorkers(self.stripes, dict(
                target=target, token=token, options=list(options)))
        self._channel = self._connect(credentials, self._channel_options)
        # Each stripe channel has its own connection (gRPC shares one between channels of
        # equal options otherwise); process stripes have theirs in the workers.
        self._stripe_channels = [
            self._connect(credentials, self._channel_options
                          + [("grpc.use_local_subchannel_pool", 1)])
            for _ in range(self.stripes - 1 if self._workers is None else 0)]
        self._stubs = make_stubs(self._channel)
        self._stripe_stubs = [self._stubs] + [make_stubs(c) for c in self._stripe_channels]
        self._shared = _shared_memory.SharedRegions()
        self.shared_memory = bool(shared_memory)
        self._pool = _shared_pool.SharedPool()
        _heap.warm(heap_warmup)
        self._start()

    def _start(self) -> None:
        """Begins, without waiting, what a first call would otherwise pay for."""

    def __repr__(self) -> str:
        return f"{type(self).__module__}.{type(self).__name__}({self.target!r})"

    def _empty(self, shape: Sequence[int], dtype: Any) -> Array:
        """A striped result's array: in shared memory that stripe processes write."""
        if self._workers is None:
            return np.empty(shape, dtype)
        return _stripe_workers.empty(shape, dtype)

    def _connect(self, credentials: Optional[Any], options: List[Tuple[str, Any]]) -> Any:
        """A grpc.Channel or a grpc.aio.Channel to self.target."""
        raise NotImplementedError

    def _perform(self, run: Run[Any]) -> Any:
        """Runs every step of ``run``; returns its result (or an awaitable of it)."""
        raise NotImplementedError

    def _call(self, name: str, timeout: Optional[float], steps: Steps[Any]) -> Any:
        return self._perform(Run(name, timeout, self.timeout, steps))

    # -- server --------------------------------------------------------------------

    def health(self, service: str = "", *, timeout: Optional[float] = None) -> Any:
        """grpc.health.v1 status: "SERVING", "NOT_SERVING", ... ("" = the whole server)."""
        return self._call("health", timeout, self._unary("Health.Check", service))

    def info(self, *, timeout: Optional[float] = None) -> Any:
        return self._call("info", timeout, self._info())

    def _unary(self, rpc: str, request: Any) -> Steps[Any]:
        return (yield Unary(rpc, request))

    def _info(self) -> Steps[ServerInfo]:
        raw = yield Unary("Server.GetInfo", pb.GetInfoRequest())
        self._remember_limits(raw)
        return ServerInfo._from_proto(raw)

    def _remember_limits(self, raw: Any) -> None:
        with self._lock:
            if raw.limits.max_receive_message_bytes:
                self._max_message = int(raw.limits.max_receive_message_bytes)
            self._single_message = bool(raw.limits.single_message_results)
            self._sessions = bool(raw.limits.sessions)
            self._default_chunk = int(raw.limits.default_chunk_bytes)
            self._answered = True

    def _known_max_message(self) -> Optional[int]:
        with self._lock:
            return self._max_message

    def _known_default_chunk(self) -> int:
        with self._lock:
            return self._default_chunk

    def _known_single_message(self) -> Optional[bool]:
        with self._lock:
            return self._single_message

    def _limit(self, known: Callable[[], Optional[LimitT]], fallback: LimitT) -> Steps[LimitT]:
        """A server limit, asked once per client (GetInfo); `fallback` while unknown."""
        value = known()
        if value is not None:
            return value
        try:
            yield from self._info()
        except GpuComputeError:
            return fallback  # not cached: the next call asks again
        value = known()
        return fallback if value is None else value

    def _max_message_bytes(self) -> Steps[int]:
        return (yield from self._limit(self._known_max_message, _SAFE_MESSAGE_BYTES))

    def _single_message_results(self) -> Steps[bool]:
        """Whether compute calls may be read as unary calls."""
        return (yield from self._limit(self._known_single_message, False))

    # -- buffers -------------------------------------------------------------------

    def delete(self, buffer: Union[DeviceArray, str], *,
               timeout: Optional[float] = None) -> Any:
        """Free a stored buffer; returns the bytes freed (a DeviceArray's handle: 0 when
        it deleted the buffer before)."""
        return self._call("delete", timeout, self._delete(buffer))

    def _delete(self, buffer: Union[DeviceArray, str], cleanup: bool = False) -> Steps[int]:
        if isinstance(buffer, DeviceArray) and buffer.deleted:
            return 0
        buffer_id = buffer.id if isinstance(buffer, DeviceArray) else str(buffer)
        reply = yield Unary("Buffers.Delete", pb.DeleteRequest(buffer_id=buffer_id), cleanup)
        if isinstance(buffer, DeviceArray):
            buffer._deleted = True
        return int(reply.freed_bytes)

    def list_buffers(self, *, timeout: Optional[float] = None) -> Any:
        """The buffers stored by this client's principal (its token or TLS client
        certificate; every unauthenticated client shares one): the server lists the
        caller's own only."""
        return self._call("list_buffers", timeout, self._list_buffers())

    def _list_buffers(self) -> Steps[BufferList]:
        # The server answers a page at a time; follow next_page_token to the end.
        reply = yield Unary("Buffers.List", pb.ListRequest())
        infos = list(reply.buffers)
        while reply.next_page_token:
            reply = yield Unary("Buffers.List", pb.ListRequest(page_token=reply.next_page_token))
            infos.extend(reply.buffers)
        out = BufferList(DeviceArray._from_info(self, b) for b in infos)
        out.used_bytes = int(reply.used_bytes)
        out.quota_bytes = int(reply.quota_bytes)
        return out

    # -- shared memory (same host) ---------------------------------------------------

    def shared_array(self, shape: Any, dtype: Any = np.float64, *, name: str = "",
                     timeout: Optional[float] = None) -> Any:
        """A NumPy array in POSIX shared memory that the server has mapped (the fastest
        path for a client on the server's host; the server needs --allow_shared_memory).

        Fill it and pass it (or any C-contiguous slice of it) to any method: the request
        names where it lies and no bytes cross gRPC; as ``out=`` the server writes the
        result into it. Freed by ``free_shared`` or when the client closes.
        """
        return self._call("shared_array", timeout,
                          _shared_memory.new_shared_array(self, shape, dtype, name))

    def free_shared(self, array: Any, *, timeout: Optional[float] = None) -> Any:
        """Unregisters the shared memory holding ``array`` (a shared_array, or a device
        array passed before); returns the bytes freed (0 when none was registered). The
        server answers once no request uses the memory any more."""
        return self._call("free_shared", timeout, _shared_memory.free(self, array))

    def shared_memory_status(self, *, timeout: Optional[float] = None) -> Any:
        """The caller's registered regions (pb.SharedMemoryStatusResponse)."""
        return self._call("shared_memory_status", timeout,
                          self._unary("SharedMemory.SharedMemoryStatus",
                                      pb.SharedMemoryStatusRequest()))

    def stripe_array(self, shape: Any, dtype: Any = np.float64) -> Array:
        """An empty NumPy array in memory the stripe processes share
        (``stripe_processes=True``): an input made in it reaches them without the copy
        into shared memory, a result written into it (``out=``) without a copy back (fill
        it by slices on several threads: NumPy drops the GIL). Freed with its last view.
        Without stripe processes a plain np.empty; not awaited in gpucompute.aio."""
        dims = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
        return self._empty(dims, dtype)

    def _free_all_shared(self) -> Steps[None]:
        return (yield from _shared_memory.free_all(self))

    # -- compute plumbing ------------------------------------------------------------

    def _place(self, named: Named) -> Steps[Tuple[Placed, List[DeviceArray], float]]:
        """Uploads the inline operands that are too large to send inline.

        Returns ({field: ndarray or DeviceArray}, [temporary DeviceArrays], seconds).
        """
        named = yield from _shared_memory.place_shared(self, named)
        placed: Placed = dict(named)
        inline = [(n, v) for n, v in named if isinstance(v, np.ndarray)]
        total = sum(v.nbytes for _, v in inline)
        big = [n for n, v in inline if v.nbytes > self.upload_threshold]
        known = self._known_max_message()
        if not big and total <= (_UNASKED_INLINE_BYTES if known is None
                                 else known - _MESSAGE_MARGIN):
            return placed, [], 0.0
        limit = max((yield from self._max_message_bytes()) - _MESSAGE_MARGIN, 0)
        chosen = set(big)
        remaining = sorted(((v.nbytes, n) for n, v in inline if n not in chosen), reverse=True)
        total -= sum(placed[n].nbytes for n in chosen)
        for nbytes, n in remaining:
            if total <= limit:
                break
            chosen.add(n)
            total -= nbytes
        temps: List[DeviceArray] = []
        start = time.perf_counter()
        try:
            for n, v in inline:
                if n in chosen:
                    assert isinstance(v, np.ndarray)
                    handle = yield from self._upload(v, f"gpucompute-py tmp {n}", None)
                    temps.append(handle)
                    placed[n] = handle
        except BaseException:
            yield from self._drop(temps)
            raise
        return placed, temps, time.perf_counter() - start

    def _drop(self, temps: List[DeviceArray]) -> Steps[None]:
        for handle in temps:
            try:
                yield from self._delete(handle, cleanup=True)
            except GpuComputeError:
                pass

    def _compute(self, method: str, make_request: Callable[[Placed], Any], named: Named,
                 options: ResultOptions, result_shape: Optional[Tuple[int, ...]] = None,
                 result_type: Any = None) -> Steps[Any]:
        """result_shape (and result_type, else the operands' dtype): the result's, where
        the client knows it (a device input's result
        is then made in its library on its device, for the server to write through CUDA
        IPC where it shares the input that way; a large NumPy result comes through the
        shared-memory pool)."""
        start = time.perf_counter()
        like = _device_operand(named, options)
        leases: List[Array] = []
        try:
            if self.shared_memory:
                named = yield from self._pooled_inputs(named, leases)
            placed, temps, upload_s = yield from self._place(named)
            if (like is not None and result_shape is not None
                    and any(isinstance(v, SharedSlice) for v in placed.values())):
                out = empty_like_device(like, result_shape, named[0][1].dtype)
                if out is not None:
                    options = replace(options, out=out)
            target = options.out
            pooled_out = None
            if like is None and result_shape is not None and (named or result_type):
                pooled_out = yield from self._pooled_output(
                    options, result_shape, result_type or named[0][1].dtype, leases)
                if pooled_out is not None:
                    options = replace(options, out=pooled_out)
            sink = ResultStream(options)
            try:
                out_slice = yield from _shared_memory.shared_output(self, options.out)
                request = make_request(placed)
                options.fill(request.output)
                if out_slice is not None:
                    out_slice.fill(request.output.shared_memory)
                    sink.shared_out = True
                # A refused one-message try re-sends the request: only worth it for small
                # inputs, and made only when the result fits one message.
                small = sum(a.nbytes for _, a in named
                            if isinstance(a, np.ndarray)) <= _SMALL_INPUT_BYTES
                one_message = (0 if options.keep_on_device or sink.shared_out else
                               _nbytes(result_shape, result_type or
                                       (named[0][1].dtype if named else None)))
                array = yield from self._result(method, request, sink, small, one_message)
            finally:
                yield from self._drop(temps)
            if pooled_out is not None:  # out of the pool, into the caller's array
                array = np.empty(pooled_out.shape, pooled_out.dtype) if target is None else target
                _shared_pool.copy(array, pooled_out)
        except BaseException:
            yield from self._pool.discard(self, leases)
            raise
        self._pool.give_back(leases)
        value = (DeviceArray._from_info(self, sink.trailer.stored_buffer)
                 if options.keep_on_device else array)
        result = options.deliver(value, sink.trailer, start, upload=upload_s)
        if like is None or options.out is not None:
            return result
        if isinstance(result, tuple):  # (value, Timing)
            return to_device_like(like, result[0]), result[1]
        return to_device_like(like, result)

    def _pooled_inputs(self, named: Named, leases: List[Array]) -> Steps[Named]:
        """Large plain NumPy operands copied into regions of the shared-memory pool (and
        so sent as slices of them), where the server maps this host's memory."""
        pooled: Named = []
        for name, value in named:
            if (isinstance(value, np.ndarray) and value.nbytes >= _shared_pool.POOL_MIN_BYTES
                    and self._shared.host_slice(value) is None):
                block = yield from self._pool.lease(self, value.nbytes)
                if block is not None:
                    leases.append(block)
                    region = _shared_pool.view(block, value.shape, value.dtype)
                    _shared_pool.copy(region, value)
                    value = region
            pooled.append((name, value))
        return pooled

    def _pooled_output(self, options: ResultOptions, shape: Tuple[int, ...], dtype: Any,
                       leases: List[Array]) -> Steps[Optional[Array]]:
        """A pool region for a large NumPy result the server may write itself (none for a
        kept, complex or shared/device ``out`` result)."""
        out = options.out
        if (not self.shared_memory or options.keep_on_device or options.complex_pairs
                or (out is not None and (not isinstance(out, np.ndarray)
                                         or self._shared.host_slice(out) is not None))):
            return None
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if nbytes < _shared_pool.POOL_MIN_BYTES:
            return None
        block = yield from self._pool.lease(self, nbytes)
        if block is None:
            return None
        leases.append(block)
        return _shared_pool.view(block, shape, dtype)

    def _result(self, method: str, request: Any, sink: ResultStream,
                try_single_message: bool, result_bytes: Optional[int]) -> Steps[Any]:
        """The call as one message read as a unary call (cheaper per call) where asked
        and the server promises one; as a stream when it has none or refuses (a result
        larger than one chunk is refused before it runs). result_bytes: the bytes the
        result message carries, where known (0: none); one larger than a chunk is not
        tried, so that no refusal counts as a failed request in the server's metrics."""
        if (try_single_message and (yield from self._single_message_results())
                and (result_bytes is None or result_bytes <= (
                    request.output.chunk_bytes or self._known_default_chunk()))):
            request.output.single_message = True
            with self._lock:
                session = self.session and bool(self._sessions)
            try:
                return (yield Stream("Compute." + method, request, sink, unary=True,
                                     session=session))
            except FailedPrecondition as e:
                if e.reason != "RESULT_TOO_LARGE_FOR_ONE_MESSAGE":
                    raise
            request.output.single_message = False
            sink.reset()
        return (yield Stream("Compute." + method, request, sink))

    def _run(self, name: str, method: str, make_request: Callable[[Placed], Any],
             named: Named, options: ResultOptions,
             result_shape: Optional[Tuple[int, ...]] = None, result_type: Any = None) -> Any:
        return self._call(name, options.timeout, self._compute(
            method, make_request, named, options, result_shape, result_type))
