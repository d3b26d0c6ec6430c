"""A client call as a generator of RPC steps, so that one body serves both clients.

Each public method is written once (``_api.py``) as a generator that yields the RPCs it
needs (``Unary``, ``Stream``) and receives their replies; ``Run`` holds that generator
and the call's deadline, and a driver (``client.Client`` on grpc, ``aio.Client`` on
grpc.aio) sends each step over its channel, blocking or awaiting.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Generator, Generic, Iterator, List, Optional,
                    Sequence, TypeVar, Union)

import grpc

from . import _wire
from ._pb import pb
from ._stream import ResultStream
from .errors import DeadlineExceeded, GpuComputeError, error_for, from_rpc_error

T = TypeVar("T")


@dataclass
class Unary:
    """A unary (or client-streaming, when ``request`` is an iterator) RPC."""

    rpc: str
    request: Any
    #: runs under the client's own timeout, even after the call's deadline has passed
    #: (deleting temporary buffers)
    cleanup: bool = False
    #: the stripe channel it runs on (0: the client's own)
    channel: int = 0
    #: a stripe's _stripe_workers.StripeJob: how a worker process builds this step
    job: Any = None


@dataclass
class Stream:
    """A server-streaming RPC whose ResultChunks are assembled by ``sink``."""

    rpc: str
    request: Any
    sink: ResultStream
    cleanup: bool = False
    #: the stripe channel it runs on (0: the client's own)
    channel: int = 0
    #: read as a unary call (``rpc + UNARY``): the request asks for a single-message
    #: result (OutputOptions.single_message), so one message or a status is all there is
    unary: bool = False
    #: a stripe's _stripe_workers.StripeJob: how a worker process builds this step
    job: Any = None
    #: a unary read that may go over the client's open Compute.Session instead
    session: bool = False


#: the suffix of a compute RPC's unary stub (the same method, read as one message)
UNARY = "/unary"


@dataclass
class Parallel:
    """Steps run at once (the stripes of a transfer); the reply is the list of theirs. A
    step whose connection breaks (UNAVAILABLE) runs again from its start, at most
    ``retries`` times (an upload stripe's request must then be a list, not an iterator)."""

    steps: Sequence[Union[Unary, Stream]]
    retries: int = 2
    cleanup: bool = False

    @property
    def rpc(self) -> str:
        return self.steps[0].rpc


Step = Union[Unary, Stream, Parallel]
Steps = Generator[Step, Any, T]


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())


# rpc -> (channel factory method, path, request serializer, response deserializer)
_RPCS: Dict[str, Any] = {
    **{"Compute." + name + suffix: (kind, "/gpucompute.v1.Compute/" + name, _serialize,
                                    _wire.decode_result_chunk)
       for name in ("DiscountProduct", "HaversineGrid", "Normalize", "LombScargle")
       for suffix, kind in (("", "unary_stream"), ("/unary", "unary_unary"))},
    "Compute.Session": ("stream_stream", "/gpucompute.v1.Compute/Session", bytes,
                        pb.SessionResponse.FromString),
    "Compute.StreamingCompute": ("stream_stream", "/gpucompute.v1.Compute/StreamingCompute",
                                 _wire.encode_upload_request, _wire.decode_result_chunk),
    "Buffers.Upload": ("stream_unary", "/gpucompute.v1.Buffers/Upload",
                       _wire.encode_upload_request, pb.BufferInfo.FromString),
    "Buffers.Download": ("unary_stream", "/gpucompute.v1.Buffers/Download", _serialize,
                         _wire.decode_result_chunk),
    "Buffers.Delete": ("unary_unary", "/gpucompute.v1.Buffers/Delete", _serialize,
                       pb.DeleteResponse.FromString),
    "Buffers.List": ("unary_unary", "/gpucompute.v1.Buffers/List", _serialize,
                     pb.ListResponse.FromString),
    "Server.GetInfo": ("unary_unary", "/gpucompute.v1.Server/GetInfo", _serialize,
                       pb.ServerInfo.FromString),
    **{"SharedMemory." + name: ("unary_unary", "/gpucompute.v1.SharedMemory/" + name,
                                _serialize, reply.FromString)
       for name, reply in (("RegisterSystemSharedMemory", pb.SharedMemoryRegionInfo),
                           ("RegisterCudaSharedMemory", pb.SharedMemoryRegionInfo),
                           ("UnregisterSharedMemory", pb.UnregisterSharedMemoryResponse),
                           ("SharedMemoryStatus", pb.SharedMemoryStatusResponse))},
    "Health.Check": ("unary_unary", "/grpc.health.v1.Health/Check",
                     _wire.encode_health_request, _wire.decode_health_response),
}


def make_stubs(channel: Any) -> Dict[str, Any]:
    """The multi-callables of every RPC on a grpc.Channel or a grpc.aio.Channel (their
    factories take the same arguments)."""
    return {rpc: getattr(channel, kind)(path, request_serializer=encode,
                                        response_deserializer=decode)
            for rpc, (kind, path, encode, decode) in _RPCS.items()}


@contextmanager
def cancel_on_error(call: Any) -> Iterator[None]:
    """Cancels a response stream that the client stops reading because of an error."""
    try:
        yield
    except BaseException:
        call.cancel()
        raise


class Run(Generic[T]):
    """One public call in progress: its steps, its deadline and, at the end, its result.

    A driver loops ``while run.step is not None: with run.attempt(): run.reply = ...``;
    the reply (or the error, a GpuComputeError naming this call) goes back into the steps.
    """

    def __init__(self, name: str, timeout: Optional[float], client_timeout: Optional[float],
                 steps: Steps[T]):
        self.name = name
        self.timeout = client_timeout if timeout is None else timeout
        self.client_timeout = client_timeout
        self.deadline = None if self.timeout is None else time.monotonic() + self.timeout
        self.reply: Any = None
        self.step: Optional[Step] = None
        self._steps = steps
        self._result: Any = None
        self._advance(lambda: steps.send(None))

    @property
    def result(self) -> T:
        result: T = self._result
        return result

    def _advance(self, resume: Callable[[], Step]) -> None:
        try:
            self.step = resume()
        except StopIteration as done:
            self.step = None
            self._result = done.value

    def step_timeout(self) -> Optional[float]:
        """What is left of the call's deadline for the next step (cleanup steps: the
        client's timeout); DeadlineExceeded when nothing is left."""
        assert self.step is not None
        if self.step.cleanup or self.deadline is None:
            return self.client_timeout if self.step.cleanup else None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(grpc.StatusCode.DEADLINE_EXCEEDED,
                                   f"the call's {self.timeout:g} s timeout passed",
                                   method=self.step.rpc, call=self.name)
        return left

    @contextmanager
    def attempt(self) -> Iterator[None]:
        """Around one step: its reply, or whatever it raised, goes into the steps."""
        assert self.step is not None
        rpc = self.step.rpc
        try:
            yield
        except BaseException as e:  # KeyboardInterrupt too: the steps delete temporaries
            error = _call_error(e, rpc, self.name) if isinstance(e, grpc.RpcError) else e
            self._advance(lambda: self._steps.throw(error))
        else:
            self._advance(lambda: self._steps.send(self.reply))


#: the details of a CANCELLED status that this client caused: grpcio's for call.cancel()
#: and a closed channel, the session's for Client.close()
_CLIENT_CANCELS = frozenset({"Locally cancelled by application!", "Channel closed!",
                             "the client closed"})


def _call_error(error: grpc.RpcError, rpc: str, call: str) -> GpuComputeError:
    """The GpuComputeError of a failed RPC. A CANCELLED this client did not ask for comes
    from the server giving up on the call, above all from one that stops (its shutdown
    cancels the calls it still has, and the connection goes with it): Unavailable, as for
    any server that went away, and as worth another try."""
    converted = from_rpc_error(error, rpc, call)
    if (converted.code == grpc.StatusCode.CANCELLED
            and converted.message not in _CLIENT_CANCELS):
        return error_for(grpc.StatusCode.UNAVAILABLE,
                         f"the server cancelled the call ({converted.message}): it is "
                         "stopping or restarting, or gave up on an unread result stream",
                         rpc, call)
    return converted


class CallGroup:
    """The RPCs of one Parallel step, so that the first failure cancels the others."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: List[Any] = []
        self._cancelled = False

    def add(self, call: Any) -> None:
        """A call just started; cancelled at once when the group already is."""
        with self._lock:
            if not self._cancelled:
                self._calls.append(call)
                return
        call.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            calls, self._calls = self._calls, []
        for call in calls:
            call.cancel()
