"""gpucompute.aio's Compute.Session (_session.py has the blocking client's, and why).

On grpc.aio a call's writes and reads are awaited on the event loop: each request is
written by its caller's task and one reader task hands each answer to its request's
future, with no thread at all. A request whose timeout passes is cancelled on the
session and raises DEADLINE_EXCEEDED; a session whose call ended raises that error to
every request in flight on it, and the client opens a new one for the next.
"""
from __future__ import annotations

import asyncio
import itertools
from typing import Any, Dict, Optional, Set

import grpc
import grpc.aio

from ._session import (RequestFailed, cancel_message, deadline_exceeded, request_message,
                       result_of)


class AioSession:
    """One Compute.Session call on grpc.aio, shared by the client's tasks (``run``)."""

    def __init__(self, stub: Any, metadata: Any):
        self._call = stub(metadata=metadata)
        self._ids = itertools.count(1)
        #: requests sent and not answered: id -> the future of their answer
        self._pending: Dict[int, "asyncio.Future[Any]"] = {}
        self._writing = asyncio.Lock()  # one write at a time on a call
        self._cancels: Set["asyncio.Task[None]"] = set()
        self._error: Optional[grpc.RpcError] = None
        self._reader = asyncio.ensure_future(self._read())

    @property
    def broken(self) -> bool:
        """The call has ended: requests need a new session."""
        return self._error is not None or self._call.done()

    async def run(self, rpc: str, request: Any, timeout: Optional[float]) -> Any:
        """The request's pb.ResultComplete; its status raised as RequestFailed."""
        if self._error is not None:
            raise self._error
        key = next(self._ids)
        answer: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
        self._pending[key] = answer
        try:
            return result_of(await asyncio.wait_for(self._exchange(key, rpc, request, answer),
                                                    timeout))
        except asyncio.TimeoutError:
            raise deadline_exceeded() from None
        finally:
            if self._pending.pop(key, None) is not None and self._error is None:
                # Not answered (timed out or the caller cancelled): cancelled on the session.
                cancel = asyncio.ensure_future(self._cancel(key))
                self._cancels.add(cancel)
                cancel.add_done_callback(self._cancels.discard)
            if answer.done() and not answer.cancelled():
                answer.exception()  # the reader's error, raised here some other way

    def close(self) -> None:
        """Cancels the call; requests in flight raise."""
        self._call.cancel()
        self._reader.cancel()

    async def _exchange(self, key: int, rpc: str, request: Any,
                        answer: "asyncio.Future[Any]") -> Any:
        await self._write(request_message(key, rpc, request))
        return await answer

    async def _cancel(self, key: int) -> None:
        try:
            await self._write(cancel_message(key))
        except grpc.RpcError:
            pass  # the session ended: nothing runs on it any more

    async def _write(self, message: bytes) -> None:
        async with self._writing:
            try:
                await self._call.write(message)
            except asyncio.InvalidStateError:  # the call has ended
                raise self._error or RequestFailed(grpc.StatusCode.UNAVAILABLE,
                                                   "the session ended") from None

    async def _read(self) -> None:
        error: grpc.RpcError
        try:
            while True:
                answer = await self._call.read()
                if answer is grpc.aio.EOF:
                    raise RequestFailed(grpc.StatusCode.UNAVAILABLE,
                                        "the server ended the session")
                waiter = self._pending.pop(answer.id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(answer)
        except grpc.RpcError as e:
            error = e
        except asyncio.CancelledError:
            error = RequestFailed(grpc.StatusCode.CANCELLED, "the client closed")
        self._error = error
        for waiter in self._pending.values():
            if not waiter.done():
                waiter.set_exception(error)
