"""The asyncio client: ``gpucompute.aio.Client`` on grpc.aio, the same methods and
signatures as ``gpucompute.Client``, each returning an awaitable.

    async with gpucompute.aio.Client("localhost:50051") as client:
        out = await client.normalize(x)
        dev = await client.upload(a)
        back = await dev.download()
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Awaitable, List, Optional, Tuple, Union

import grpc
import grpc.aio

from ._aio_session import AioSession
from ._api import ClientApi
from ._steps import (UNARY, CallGroup, Parallel, Run, Step, Stream, Unary,
                     cancel_on_error)

if TYPE_CHECKING:  # pragma: no cover
    from ._device_array import BufferList, DeviceArray
    from ._types import ServerInfo

__all__ = ["Client"]


class Client(ClientApi):
    """A connection to a gpucompute server on grpc.aio; create it inside the event loop
    that awaits its calls. Takes the arguments of ``gpucompute.Client``."""

    if TYPE_CHECKING:  # what the service methods return here (ClientApi types them Any)
        def health(self, service: str = "", *, timeout: Optional[float] = None) -> Awaitable[str]: ...

        def info(self, *, timeout: Optional[float] = None) -> Awaitable[ServerInfo]: ...

        def upload(self, array: Any, name: str = "", *, chunk_bytes: Optional[int] = None,
                   timeout: Optional[float] = None) -> Awaitable[DeviceArray]: ...

        def delete(self, buffer: Union[DeviceArray, str], *,
                   timeout: Optional[float] = None) -> Awaitable[int]: ...

        def list_buffers(self, *, timeout: Optional[float] = None) -> Awaitable[BufferList]: ...

    blocking = False

    def _connect(self, credentials: Optional[grpc.ChannelCredentials],
                 options: List[Tuple[str, Any]]) -> Any:
        if credentials is not None:
            return grpc.aio.secure_channel(self.target, credentials, options=options)
        return grpc.aio.insecure_channel(self.target, options=options)

    async def close(self) -> None:
        """Unregisters this client's shared memory, then closes the channels."""
        try:
            await self._call("close", None, self._free_all_shared())
        finally:
            if self._session is not None:
                self._session.close()
            for channel in [self._channel] + self._stripe_channels:
                await channel.close()
            if self._workers is not None:
                self._workers.close()

    def _start(self) -> None:
        self._session: Optional[AioSession] = None  # opened by the first call that uses it

    def _open_session(self) -> Optional[AioSession]:
        """The client's session, opened anew when there is none or it broke; None from
        a break until the server answers again."""
        if self._session is not None and self._session.broken:
            self._session.close()
            self._session = None
            self._answered = False
        if self._session is None and self._answered:
            self._session = AioSession(self._stubs["Compute.Session"], self._metadata)
        return self._session

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _perform(self, run: Run[Any]) -> Any:
        while run.step is not None:
            with run.attempt():
                run.reply = await self._send(run.step, run.step_timeout())
        return run.result

    async def _send(self, step: Step, timeout: Optional[float]) -> Any:
        if isinstance(step, Parallel):
            return await self._send_parallel(step, timeout)
        stubs = self._stripe_stubs[step.channel]
        # A list of requests (an upload stripe, sent again on a retry) goes as an iterator.
        request = iter(step.request) if isinstance(step.request, list) else step.request
        unary = isinstance(step, Stream) and step.unary
        if isinstance(step, Stream) and step.session and step.channel == 0:
            session = self._open_session()
            if session is not None:
                step.sink.feed_complete(await session.run(step.rpc, request, timeout))
                return step.sink.finish()
            step.sink.feed(await stubs[step.rpc + UNARY](request, timeout=timeout,
                                                         metadata=self._metadata))
            self._answered = True
            self._open_session()
            return step.sink.finish()
        reply = stubs[step.rpc + UNARY if unary else step.rpc](request, timeout=timeout,
                                                               metadata=self._metadata)
        if not isinstance(step, Stream):
            return await reply
        if unary:
            step.sink.feed(await reply)
            return step.sink.finish()
        with cancel_on_error(reply):
            async for message in reply:
                step.sink.feed(message)
        return step.sink.finish()

    async def _send_parallel(self, step: Parallel, timeout: Optional[float]) -> List[Any]:
        """The steps at once; the first failure (or the caller's cancellation) cancels the
        others (their calls with them), then is raised."""
        if self._workers is not None and all(s.job is not None for s in step.steps):
            return await self._send_in_workers(step, timeout)
        tasks = [asyncio.ensure_future(self._send_retrying(s, timeout, step.retries))
                 for s in step.steps]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception()]
            for task in tasks:
                task.cancel()  # a no-op for those done
            await asyncio.gather(*tasks, return_exceptions=True)
        if failed:
            raise failed[0].exception()  # type: ignore[misc]
        return [task.result() for task in tasks]

    async def _send_in_workers(self, step: Parallel, timeout: Optional[float]) -> List[Any]:
        """The steps in the stripe processes, each waited for on a thread; the first
        failure (or the caller's cancellation) cancels the others, then is raised."""
        assert self._workers is not None
        group = CallGroup()
        deadline = None if timeout is None else time.monotonic() + timeout
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=self.stripes) as pool:
            futures = [loop.run_in_executor(pool, self._workers.run, s, deadline,
                                            step.retries, group) for s in step.steps]
            try:
                await asyncio.wait(futures, return_when=asyncio.FIRST_EXCEPTION)
            finally:
                failed = [f for f in futures if f.done() and not f.cancelled() and f.exception()]
                if failed or not all(f.done() for f in futures):
                    group.cancel()
                await asyncio.gather(*futures, return_exceptions=True)
        if failed:
            raise failed[0].exception()  # type: ignore[misc]
        return [f.result() for f in futures]

    async def _send_retrying(self, step: Union[Unary, Stream], timeout: Optional[float],
                             retries: int) -> Any:
        for attempt in range(retries + 1):
            try:
                return await self._send(step, timeout)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or attempt == retries:
                    raise
                if isinstance(step, Stream):
                    step.sink.reset()
