"""The gpucompute Python client: NumPy arrays in, NumPy arrays (or DeviceArrays) out."""
from __future__ import annotations

from typing import Any, Optional

import grpc
import grpc.experimental

from ._api import DEFAULT_UPLOAD_THRESHOLD, ClientApi
from ._device_array import DeviceArray
from ._steps import Run, Step, Stream, cancel_on_error
from ._stream import Result
from ._types import BufferList, ServerInfo

__all__ = ["Client", "DEFAULT_UPLOAD_THRESHOLD"]


class Client(ClientApi[Result, DeviceArray, str, ServerInfo, int, BufferList]):
    """A connection to a gpucompute server whose methods block until their result.

    Client(target, *, credentials=None, token=None, timeout=None,
    upload_threshold=DEFAULT_UPLOAD_THRESHOLD, options=()): see ClientApi for the
    parameters; gpucompute.aio.Client has the same methods, awaitable.
    The client is thread-safe: one Client may serve concurrent calls from threads.
    """

    def _connect(self, credentials: Optional[grpc.ChannelCredentials]) -> Any:
        # Result streams read on the calling thread: without this option grpc starts
        # a thread for every streaming call made while no other is open (about
        # 100 us of a small call's time).
        options = [(grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)]
        options += self._channel_options
        if credentials is not None:
            return grpc.secure_channel(self.target, credentials, options=options)
        return grpc.insecure_channel(self.target, options=options)

    def close(self) -> None:
        """Unregisters this client's shared memory, then closes the channel."""
        try:
            self._call("close", None, self._free_all_shared())
        finally:
            self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _perform(self, run: Run[Any]) -> Any:
        while run.step is not None:
            with run.attempt():
                run.reply = self._send(run.step, run.step_timeout())
        return run.result

    def _send(self, step: Step, timeout: Optional[float]) -> Any:
        reply = self._stubs[step.rpc](step.request, timeout=timeout, metadata=self._metadata)
        if not isinstance(step, Stream):
            return reply
        with cancel_on_error(reply):
            for message in reply:
                step.sink.feed(message)
        return step.sink.finish()
