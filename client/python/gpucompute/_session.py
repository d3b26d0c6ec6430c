"""One open Compute.Session call on which a blocking Client sends its small compute
requests: a unary call costs grpcio, and the server, a call's set-up and
teardown each time, more than a small request's work.

Each request is framed by hand around its serialized compute request and answered by
id. No thread of this module reads the answers: the calling thread whose answer is due
reads the call's response stream itself (one reader at a time, under the lock), keeps
answers for other threads' ids and wakes them; one of them reads next. A reader thread
handing answers over would cost one thread hop more per request (bench/ping_pong.py
times both). Requests go out through grpcio's request thread, as on any
client-streaming call.

A request's own failure is raised as its unary call's would be (RequestFailed is the
grpc.RpcError of its status). A request with a deadline that passes is cancelled on the
session and raises DEADLINE_EXCEEDED; when its caller is the one reading, a watcher
thread (started with the first such request) sends the cancel, the server answers it at
once, and the reader raises; should the server not answer within UNANSWERED_S, the
watcher cancels the whole call. A session whose call ended (a server restart:
UNAVAILABLE) raises that error to every request in flight on it; the client opens a new
session for the next request.
"""
from __future__ import annotations

import itertools
import queue
import threading
import time
from typing import Any, Dict, NoReturn, Optional, Tuple

import grpc

from ._wire import encode_varint

#: SessionRequest's field of each compute RPC's request (and of a cancel)
_FIELD_TAGS = {"Compute.DiscountProduct": b"\x12", "Compute.HaversineGrid": b"\x1a",
               "Compute.Normalize": b"\x22", "Compute.LombScargle": b"\x2a"}
_CANCEL_TAG = b"\x32"
#: how long past a request's deadline the watcher waits for the answer to its cancel
#: before it cancels the whole call (a server that stopped answering)
UNANSWERED_S = 1.0

_CODES = {code.value[0]: code for code in grpc.StatusCode}


class RequestFailed(grpc.RpcError):  # type: ignore[misc]  # grpc has no types
    """A session request's status: the grpc.RpcError its unary call would raise."""

    def __init__(self, code: grpc.StatusCode, details: str, status_details: bytes = b""):
        super().__init__(code, details)
        self._code = code
        self._details = details
        self._status_details = status_details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Tuple[Tuple[str, bytes], ...]:
        """The unary call's grpc-status-details-bin trailer (a serialized google.rpc.Status)."""
        return (("grpc-status-details-bin", self._status_details),) if self._status_details else ()


def deadline_exceeded() -> RequestFailed:
    # What grpcio raises for a unary call whose deadline passed.
    return RequestFailed(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")


def _framed(key: int, tag: bytes, body: bytes) -> bytes:
    """SessionRequest{id: key, <tag's field>: body}."""
    return b"".join((b"\x08", encode_varint(key), tag, encode_varint(len(body)), body))


def request_message(key: int, rpc: str, request: Any) -> bytes:
    """The SessionRequest of ``request``, the request message of ``rpc``."""
    return _framed(key, _FIELD_TAGS[rpc], request.SerializeToString())


def cancel_message(key: int) -> bytes:
    """The SessionRequest that cancels request ``key``."""
    return _framed(0, _CANCEL_TAG, b"\x08" + encode_varint(key))


def result_of(answer: Any) -> Any:
    """A pb.SessionResponse's pb.ResultComplete, or its status raised as RequestFailed."""
    if answer.HasField("error"):
        raise RequestFailed(_CODES.get(answer.error.code, grpc.StatusCode.UNKNOWN),
                            answer.error.message, answer.error.details)
    return answer.complete


class Session:
    """One Compute.Session call, shared by the client's threads (``run``)."""

    def __init__(self, stub: Any, metadata: Any):
        self._sends: "queue.SimpleQueue[Optional[bytes]]" = queue.SimpleQueue()
        self._call = stub(iter(self._sends.get, None), metadata=metadata)
        self._ids = itertools.count(1)
        self._cond = threading.Condition(threading.Lock())
        #: requests sent and not yet answered to their caller: id -> deadline (or None)
        self._pending: Dict[int, Optional[float]] = {}
        #: answers read for a caller that is not the reader
        self._answers: Dict[int, Any] = {}
        self._reading = False
        #: why the call ended (raised to every request then in flight and after)
        self._error: Optional[grpc.RpcError] = None
        self._watcher: Optional[threading.Thread] = None
        self._watch_cond = threading.Condition(threading.Lock())
        self._watch_until: Optional[float] = None  # the watcher's next wake-up

    @property
    def broken(self) -> bool:
        """The call has ended: requests need a new session."""
        return self._error is not None or self._call.done()

    def run(self, rpc: str, request: Any, timeout: Optional[float]) -> Any:
        """The request's pb.ResultComplete; its status raised as RequestFailed."""
        key = next(self._ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if self._error is not None:
                raise self._error
            self._pending[key] = deadline
        self._sends.put(request_message(key, rpc, request))
        if deadline is not None:
            self._watch(deadline)
        try:
            answer = self._await(key, deadline)
        except grpc.RpcError:
            if deadline is not None and time.monotonic() > deadline:
                raise deadline_exceeded() from None
            raise
        if deadline is not None and time.monotonic() > deadline:
            raise deadline_exceeded()
        return result_of(answer)

    def half_close(self) -> None:
        """No more requests: the server ends the call once those in flight are answered
        (a broken session's grpcio request thread ends)."""
        self._sends.put(None)

    def close(self) -> None:
        """Cancels the call; requests in flight raise."""
        with self._cond:
            if self._error is None:
                self._error = RequestFailed(grpc.StatusCode.CANCELLED, "the client closed")
            self._cond.notify_all()
        self.half_close()
        self._call.cancel()
        with self._watch_cond:
            self._watch_cond.notify()

    def _await(self, key: int, deadline: Optional[float]) -> Any:
        with self._cond:
            while True:
                answer = self._answers.pop(key, None)
                if answer is not None:
                    del self._pending[key]
                    return answer
                if self._error is not None:
                    self._pending.pop(key, None)
                    raise self._error
                if not self._reading:
                    self._reading = True
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    del self._pending[key]
                    self._sends.put(cancel_message(key))
                    raise deadline_exceeded()
                self._cond.wait(left)
        return self._read_until(key)

    def _read_until(self, key: int) -> Any:
        """As the reader: answers, until ``key``'s; then another waiter reads."""
        try:
            while True:
                try:
                    answer = next(self._call)
                except StopIteration:
                    self._fail(RequestFailed(grpc.StatusCode.UNAVAILABLE,
                                             "the server ended the session"))
                except grpc.RpcError as e:
                    self._fail(e)
                if answer.id == key:
                    with self._cond:
                        del self._pending[key]
                    return answer
                with self._cond:
                    if answer.id in self._pending:  # not given up on
                        self._answers[answer.id] = answer
                        self._cond.notify_all()
        finally:
            with self._cond:
                self._reading = False
                self._cond.notify_all()

    def _fail(self, error: grpc.RpcError) -> NoReturn:
        with self._cond:
            if self._error is None:
                self._error = error
            error = self._error
        self.half_close()
        with self._watch_cond:
            self._watch_cond.notify()  # the watcher stops
        raise error

    def _abandon(self) -> None:
        """The server stopped answering: the session ends for every request on it."""
        with self._cond:
            if self._error is None:
                self._error = RequestFailed(grpc.StatusCode.UNAVAILABLE,
                                            "the server stopped answering the session")
            self._cond.notify_all()
        self.half_close()
        self._call.cancel()

    def _watch(self, deadline: float) -> None:
        """Has the watcher look at ``deadline`` (starting it the first time)."""
        with self._watch_cond:
            if self._watch_until is not None and self._watch_until <= deadline:
                return  # it wakes before then anyway (or has yet to look)
            self._watch_until = deadline
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch_deadlines,
                                                 name="gpucompute-session-deadlines",
                                                 daemon=True)
                self._watcher.start()
            else:
                self._watch_cond.notify()

    def _watch_deadlines(self) -> None:
        """Cancels each request whose deadline passed while its caller reads; the call,
        should the server not answer that within UNANSWERED_S."""
        cancelled: Dict[int, float] = {}
        while True:
            with self._watch_cond:
                self._watch_until = None  # deadlines registered from now on are kept
            now = time.monotonic()
            with self._cond:
                if self._error is not None:
                    return
                due = {k: d for k, d in self._pending.items() if d is not None and d <= now}
                upcoming = [d for d in self._pending.values() if d is not None and d > now]
            for key, deadline in due.items():
                if key not in cancelled:
                    cancelled[key] = deadline
                    self._sends.put(cancel_message(key))
                elif now > deadline + UNANSWERED_S:
                    self._abandon()
                    return
            for key in [k for k in cancelled if k not in due]:
                del cancelled[key]  # answered
            wakes = upcoming + [d + UNANSWERED_S for d in cancelled.values()]
            with self._watch_cond:
                if self._watch_until is not None:  # registered while this looked
                    wakes.append(self._watch_until)
                self._watch_until = min(wakes) if wakes else None
                self._watch_cond.wait(None if self._watch_until is None
                                      else max(self._watch_until - time.monotonic(), 0))
