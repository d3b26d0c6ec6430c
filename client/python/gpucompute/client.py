"""The gpucompute Python client: NumPy arrays in, NumPy arrays (or DeviceArrays) out."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING, Any, List, Optional, Tuple, Union

import grpc
import grpc.experimental

from ._api import DEFAULT_UPLOAD_THRESHOLD, ClientApi
from ._pb import pb
from ._session import Session
from ._steps import (UNARY, CallGroup, Parallel, Run, Step, Stream, Unary,
                     cancel_on_error)

if TYPE_CHECKING:  # pragma: no cover
    from ._device_array import BufferList, DeviceArray
    from ._types import ServerInfo

__all__ = ["Client", "DEFAULT_UPLOAD_THRESHOLD"]

_START_TIMEOUT_S = 30.0  # the server-limits request sent at construction


class Client(ClientApi):
    """A connection to a gpucompute server whose methods block until their result.

    Client(target, *, credentials=None, token=None, timeout=None,
    upload_threshold=DEFAULT_UPLOAD_THRESHOLD, options=()): see ClientApi for the
    parameters; gpucompute.aio.Client has the same methods, awaitable.
    The client is thread-safe: one Client may serve concurrent calls from threads.
    """

    if TYPE_CHECKING:  # what the service methods return here (ClientApi types them Any)
        def health(self, service: str = "", *, timeout: Optional[float] = None) -> str: ...

        def info(self, *, timeout: Optional[float] = None) -> ServerInfo: ...

        def upload(self, array: Any, name: str = "", *, chunk_bytes: Optional[int] = None,
                   timeout: Optional[float] = None) -> DeviceArray: ...

        def delete(self, buffer: Union[DeviceArray, str], *,
                   timeout: Optional[float] = None) -> int: ...

        def list_buffers(self, *, timeout: Optional[float] = None) -> BufferList: ...

    def _connect(self, credentials: Optional[grpc.ChannelCredentials],
                 options: List[Tuple[str, Any]]) -> Any:
        # Result streams read on the calling thread: without this option grpc starts
        # a thread for every streaming call made while no other is open (about
        # 100 us of a small call's time).
        options = [(grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)] + options
        if credentials is not None:
            return grpc.secure_channel(self.target, credentials, options=options)
        return grpc.insecure_channel(self.target, options=options)

    def _start(self) -> None:
        # What a first call would pay, begun here without waiting: the connections (a
        # channel connects on its first call) and the server's message limit (asked by
        # the first call with large inline arrays). A failure is left to the calls.
        self._session: Optional[Session] = None  # opened by the first call that uses it
        self._session_lock = threading.Lock()
        for channel in self._stripe_channels:
            grpc.channel_ready_future(channel)
        limits = self._stubs["Server.GetInfo"].future(
            pb.GetInfoRequest(), timeout=_START_TIMEOUT_S, metadata=self._metadata)
        limits.add_done_callback(self._limits_arrived)

    def _limits_arrived(self, done: Any) -> None:
        try:
            raw = done.result()
        except (grpc.RpcError, grpc.FutureCancelledError):
            return  # a call asks again
        self._remember_limits(raw)

    def close(self) -> None:
        """Unregisters this client's shared memory, then closes the channels and stops
        the stripe processes."""
        try:
            self._call("close", None, self._free_all_shared())
        finally:
            with self._session_lock:
                if self._session is not None:
                    self._session.close()
            for channel in [self._channel] + self._stripe_channels:
                channel.close()
            if self._workers is not None:
                self._workers.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _perform(self, run: Run[Any]) -> Any:
        while run.step is not None:
            with run.attempt():
                run.reply = self._send(run.step, run.step_timeout())
        return run.result

    def _send(self, step: Step, timeout: Optional[float],
              group: Optional[CallGroup] = None) -> Any:
        if isinstance(step, Parallel):
            return self._send_parallel(step, timeout)
        stubs = self._stripe_stubs[step.channel]
        # A list of requests (an upload stripe, sent again on a retry) goes as an iterator.
        request = iter(step.request) if isinstance(step.request, list) else step.request
        unary = isinstance(step, Stream) and step.unary
        if isinstance(step, Stream) and step.session and step.channel == 0:
            session = self._open_session()
            if session is not None:
                step.sink.feed_complete(session.run(step.rpc, request, timeout))
                return step.sink.finish()
            step.sink.feed(stubs[step.rpc + UNARY](request, timeout=timeout,
                                                   metadata=self._metadata))
            self._answered = True
            self._open_session()
            return step.sink.finish()
        stub = stubs[step.rpc + UNARY if unary else step.rpc]
        if group is not None and not isinstance(step, Stream):
            future = stub.future(request, timeout=timeout, metadata=self._metadata)
            group.add(future)  # cancellable by a sibling's failure
            return future.result()
        reply = stub(request, timeout=timeout, metadata=self._metadata)
        if not isinstance(step, Stream):
            return reply
        if group is not None:
            group.add(reply)
        if unary:
            step.sink.feed(reply)
            return step.sink.finish()
        with cancel_on_error(reply):
            for message in reply:
                step.sink.feed(message)
        return step.sink.finish()

    def _open_session(self) -> Optional[Session]:
        """The client's session, opened anew when there is none or it broke; None from
        a break until the server answers again."""
        with self._session_lock:
            if self._session is not None and self._session.broken:
                self._session.half_close()
                self._session = None
                self._answered = False
            if self._session is None and self._answered:
                self._session = Session(self._stubs["Compute.Session"], self._metadata)
            return self._session

    def _send_parallel(self, step: Parallel, timeout: Optional[float]) -> List[Any]:
        """The steps on up to ``stripes`` threads; the first failure (or the caller's
        interrupt) cancels the calls still running and the steps not started, then is
        raised once all have ended."""
        group = CallGroup()
        pool = ThreadPoolExecutor(max_workers=self.stripes)
        try:
            if self._workers is not None and all(s.job is not None for s in step.steps):
                # Each stripe in a worker process; this thread waits for its reply.
                deadline = None if timeout is None else time.monotonic() + timeout
                futures = [pool.submit(self._workers.run, s, deadline, step.retries, group)
                           for s in step.steps]
            else:
                futures = [pool.submit(self._send_retrying, s, timeout, step.retries, group)
                           for s in step.steps]
            for done in as_completed(futures):
                error = done.exception()
                if error is not None:
                    raise error
            return [done.result() for done in futures]
        except BaseException:
            group.cancel()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _send_retrying(self, step: Union[Unary, Stream], timeout: Optional[float],
                       retries: int, group: Optional[CallGroup] = None) -> Any:
        for attempt in range(retries + 1):
            try:
                return self._send(step, timeout, group)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or attempt == retries:
                    raise
                if isinstance(step, Stream):
                    step.sink.reset()
