"""gRPC statuses as Python exceptions."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Type

import grpc

#: The trailer in which the server sends a serialized google.rpc.Status.
STATUS_DETAILS_KEY = "grpc-status-details-bin"


class GpuComputeError(Exception):
    """A failed call: ``code`` (grpc.StatusCode), the server's ``message`` (it names the
    field at fault), ``call`` (the client method the caller made, e.g. "normalize") and
    ``method`` (the RPC that failed inside it, e.g. "Buffers.Upload"). ``reason`` is the
    server's stable machine-readable reason (google.rpc.ErrorInfo: "BUFFER_NOT_FOUND",
    "QUOTA_EXCEEDED", ..., else the code's name; "" when the error did not come from the
    server) and ``metadata`` its details ("field", "limit", "owner_instance", ...):
    decide by these, not by the message. The subclasses
    also derive from the builtin a Python caller would catch: InvalidArgument from
    ValueError, DeadlineExceeded from TimeoutError, Unavailable from ConnectionError,
    NotFound from LookupError, OutOfRange from IndexError, PermissionDenied and
    Unauthenticated from PermissionError, Unimplemented from NotImplementedError."""

    #: the status code this class stands for (None on the base class)
    default_code: Optional[grpc.StatusCode] = None

    def __init__(self, code: grpc.StatusCode, message: str, *, method: str = "",
                 call: str = "", reason: str = "", metadata: Optional[Mapping[str, str]] = None):
        self.code = code
        self.message = message
        self.method = method
        self.call = call
        self.reason = reason
        self.metadata: Dict[str, str] = dict(metadata or {})
        super().__init__(code, message)

    def __str__(self) -> str:
        name = self.code.name if isinstance(self.code, grpc.StatusCode) else str(self.code)
        if self.call:  # "normalize: INVALID_ARGUMENT: input: ... (Compute.Normalize)"
            rpc = f" ({self.method})" if self.method else ""
            return f"{self.call}: {name}: {self.message}{rpc}"
        where = f" ({self.method})" if self.method else ""
        return f"{name}{where}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.message!r})"


class Cancelled(GpuComputeError):
    default_code = grpc.StatusCode.CANCELLED


class Unknown(GpuComputeError):
    default_code = grpc.StatusCode.UNKNOWN


class InvalidArgument(GpuComputeError, ValueError):
    """The server rejected an argument; the message names the field and the limit."""
    default_code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(GpuComputeError, TimeoutError):
    default_code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(GpuComputeError, LookupError):
    default_code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(GpuComputeError):
    default_code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(GpuComputeError, PermissionError):
    default_code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(GpuComputeError):
    """Buffer quota, device memory, queue depth or message size exceeded."""
    default_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(GpuComputeError):
    default_code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(GpuComputeError):
    default_code = grpc.StatusCode.ABORTED


class OutOfRange(GpuComputeError, IndexError):
    default_code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(GpuComputeError, NotImplementedError):
    default_code = grpc.StatusCode.UNIMPLEMENTED


class Internal(GpuComputeError):
    default_code = grpc.StatusCode.INTERNAL


class Unavailable(GpuComputeError, ConnectionError):
    default_code = grpc.StatusCode.UNAVAILABLE


class DataLoss(GpuComputeError):
    default_code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(GpuComputeError, PermissionError):
    default_code = grpc.StatusCode.UNAUTHENTICATED


class StripeWorkerDied(Aborted):
    """A stripe's worker process (Client(stripe_processes=True)) ended during the stripe
    (killed, out of memory); a new one takes its place for the next call."""


class ProtocolError(DataLoss):
    """The result stream broke the API's framing (offsets, sizes, order)."""


_BY_CODE: Dict[grpc.StatusCode, Type[GpuComputeError]] = {
    cls.default_code: cls
    for cls in (Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
                PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
                Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)
}


def error_for(code: grpc.StatusCode, message: str, method: str = "", call: str = "",
              reason: str = "", metadata: Optional[Mapping[str, str]] = None) -> GpuComputeError:
    return _BY_CODE.get(code, GpuComputeError)(code, message, method=method, call=call,
                                               reason=reason, metadata=metadata)


@functools.lru_cache(maxsize=1)
def _status_classes() -> Tuple[Any, Any]:
    """google.rpc.Status and google.rpc.ErrorInfo, from the vendored protos' descriptor
    set in a pool of this module's own (not the default pool, where
    googleapis-common-protos may have them)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from . import _pb  # noqa: F401  (generates _proto in a source checkout)
    files = descriptor_pb2.FileDescriptorSet.FromString(
        (Path(__file__).resolve().parent / "_proto" / "google_rpc.binpb").read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    factory = message_factory.MessageFactory(pool)
    return tuple(factory.GetPrototype(pool.FindMessageTypeByName(name))  # type: ignore
                 for name in ("google.rpc.Status", "google.rpc.ErrorInfo"))


def status_reason(details: Optional[bytes]) -> Tuple[str, Dict[str, str]]:
    """The google.rpc.ErrorInfo's reason and metadata in a serialized google.rpc.Status
    (the grpc-status-details-bin trailer); ("", {}) when there is none."""
    if not details:
        return "", {}
    status_class, info_class = _status_classes()
    try:
        status = status_class.FromString(details)
        for any_detail in status.details:
            if any_detail.type_url.endswith("/google.rpc.ErrorInfo"):
                info = info_class.FromString(any_detail.value)
                return info.reason, dict(info.metadata)
    except Exception:  # a malformed trailer leaves the error without a reason
        pass
    return "", {}


def status_details_of(err: grpc.RpcError) -> Optional[bytes]:
    """A failed call's serialized google.rpc.Status (its grpc-status-details-bin
    trailer), or None."""
    trailing = getattr(err, "trailing_metadata", None)
    try:
        metadata = trailing() if callable(trailing) else None
    except Exception:
        return None
    for key, value in metadata or ():
        if key == STATUS_DETAILS_KEY:
            return value if isinstance(value, bytes) else None
    return None


def from_rpc_error(err: grpc.RpcError, method: str = "", call: str = "") -> GpuComputeError:
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    if code is None:
        code = grpc.StatusCode.UNKNOWN
    reason, metadata = status_reason(status_details_of(err))
    error = error_for(code, details or "", method, call, reason, metadata)
    error.__suppress_context__ = True  # the grpc exception adds nothing to code + message
    return error
