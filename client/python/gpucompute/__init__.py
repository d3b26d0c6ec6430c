"""Python client for gpucompute, a gRPC service that keeps a GPU warm for numeric work.

    import numpy as np, gpucompute
    with gpucompute.Client("localhost:50051") as gc:
        out = gc.normalize(np.random.rand(10, 1000).astype(np.float32))
        p = gc.lombscargle(x, y, gpucompute.FrequencyGrid(0.01, 10, 2**20))

Everything is imported lazily, so ``python -m gpucompute._build_proto`` runs before the
generated protobuf module (or grpc/numpy) exists.
"""
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_CLIENT_NAMES = ("Client", "DeviceArray", "FrequencyGrid", "Timing", "ServerInfo",
                 "DeviceInfo", "Limits", "BufferList", "DEFAULT_RADIUS_KM",
                 "DEFAULT_UPLOAD_THRESHOLD")
_ERROR_NAMES = ("GpuComputeError", "Cancelled", "Unknown", "InvalidArgument",
                "DeadlineExceeded", "NotFound", "AlreadyExists", "PermissionDenied",
                "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
                "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
                "ProtocolError")

__all__ = list(_CLIENT_NAMES + _ERROR_NAMES)

if TYPE_CHECKING:  # pragma: no cover
    from .client import *  # noqa: F401,F403
    from .errors import *  # noqa: F401,F403


def __getattr__(name):
    if name in _CLIENT_NAMES:
        from . import client
        return getattr(client, name)
    if name in _ERROR_NAMES:
        from . import errors
        return getattr(errors, name)
    raise AttributeError(f"module 'gpucompute' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
