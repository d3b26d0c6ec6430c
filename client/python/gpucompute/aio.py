"""The asyncio client: ``gpucompute.aio.Client`` on grpc.aio, the same methods and
signatures as ``gpucompute.Client``, each returning an awaitable.

    async with gpucompute.aio.Client("localhost:50051") as client:
        out = await client.normalize(x)
        dev = await client.upload(a)
        back = await dev.download()
"""
from __future__ import annotations

from typing import Any, Awaitable, Optional

import grpc
import grpc.aio

from ._api import ClientApi
from ._device_array import DeviceArray
from ._steps import Run, Step, Stream, cancel_on_error
from ._stream import Result
from ._types import BufferList, ServerInfo

__all__ = ["Client"]


class Client(ClientApi[Awaitable[Result], Awaitable[DeviceArray], Awaitable[str],
                       Awaitable[ServerInfo], Awaitable[int], Awaitable[BufferList]]):
    """A connection to a gpucompute server on grpc.aio; create it inside the event loop
    that awaits its calls. Takes the arguments of ``gpucompute.Client``."""

    blocking = False

    def _connect(self, credentials: Optional[grpc.ChannelCredentials]) -> Any:
        if credentials is not None:
            return grpc.aio.secure_channel(self.target, credentials,
                                           options=self._channel_options)
        return grpc.aio.insecure_channel(self.target, options=self._channel_options)

    async def close(self) -> None:
        """Unregisters this client's shared memory, then closes the channel."""
        try:
            await self._call("close", None, self._free_all_shared())
        finally:
            await self._channel.close()

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
        reply = self._stubs[step.rpc](step.request, timeout=timeout, metadata=self._metadata)
        if not isinstance(step, Stream):
            return await reply
        with cancel_on_error(reply):
            async for message in reply:
                step.sink.feed(message)
        return step.sink.finish()
