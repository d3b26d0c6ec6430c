"""gRPC statuses as Python exceptions."""
from __future__ import annotations

from typing import Dict, Optional, Type

import grpc


class GpuComputeError(Exception):
    """A failed call: ``code`` (grpc.StatusCode), the server's ``message`` (it names the
    field at fault), ``call`` (the client method the caller made, e.g. "normalize") and
    ``method`` (the RPC that failed inside it, e.g. "Buffers.Upload"). The subclasses
    also derive from the builtin a Python caller would catch: InvalidArgument from
    ValueError, DeadlineExceeded from TimeoutError, Unavailable from ConnectionError,
    NotFound from LookupError, OutOfRange from IndexError, PermissionDenied and
    Unauthenticated from PermissionError, Unimplemented from NotImplementedError."""

    #: the status code this class stands for (None on the base class)
    default_code: Optional[grpc.StatusCode] = None

    def __init__(self, code: grpc.StatusCode, message: str, *, method: str = "",
                 call: str = ""):
        self.code = code
        self.message = message
        self.method = method
        self.call = call
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


def error_for(code: grpc.StatusCode, message: str, method: str = "",
              call: str = "") -> GpuComputeError:
    return _BY_CODE.get(code, GpuComputeError)(code, message, method=method, call=call)


def from_rpc_error(err: grpc.RpcError, method: str = "", call: str = "") -> GpuComputeError:
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    if code is None:
        code = grpc.StatusCode.UNKNOWN
    error = error_for(code, details or "", method, call)
    error.__suppress_context__ = True  # the grpc exception adds nothing to code + message
    return error
