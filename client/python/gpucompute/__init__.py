"""Python client for gpucompute, a gRPC service that keeps a GPU warm for numeric work.

    import numpy as np, gpucompute
    with gpucompute.Client("localhost:50051") as gc:
        out = gc.normalize(np.random.rand(10, 1000).astype(np.float32))
        p = gc.lombscargle(x, y, gpucompute.FrequencyGrid(0.01, 10, 2**20))

    async with gpucompute.aio.Client("localhost:50051") as gc:   # asyncio, same methods
        out = await gc.normalize(x)

Modules, in tiers (each imports only from its own tier or below; tests/python/test_layers.py):
wire and types (_pb, _wire, _types, errors, _heap); operands and device arrays
(_device_array, _cuda_arrays: other libraries' device arrays, _shared_slice, _operands);
call steps and streams (_stream: result assembly, _steps: a call as RPC steps, _session and
_aio_session: Compute.Session, _stripe_workers); features (_shared_memory, _shared_pool,
_transfers, _streaming, _compute_methods); the API (_api: every public method, written
once); the clients (client: blocking, aio: asyncio, replicas: ReplicatedClient).
Everything is imported lazily, so ``python -m gpucompute._build_proto`` runs before the
generated protobuf module (or grpc/numpy) exists.
"""
import importlib
from typing import TYPE_CHECKING, Any, List

__version__ = "0.1.0"

_ERROR_NAMES = ("GpuComputeError", "Cancelled", "Unknown", "InvalidArgument",
                "DeadlineExceeded", "NotFound", "AlreadyExists", "PermissionDenied",
                "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
                "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
                "ProtocolError", "StripeWorkerDied")
# public name -> the module that defines it
_HOMES = {
    "Client": "client", "DEFAULT_UPLOAD_THRESHOLD": "_api", "ReplicatedClient": "replicas",
    "DeviceArray": "_device_array", "BufferList": "_device_array",
    **{name: "_types" for name in ("FrequencyGrid", "LatLonMesh", "Timing", "ServerInfo",
                                   "DeviceInfo", "Limits", "DEFAULT_RADIUS_KM")},
    **{name: "errors" for name in _ERROR_NAMES},
}

__all__ = list(_HOMES)

if TYPE_CHECKING:  # pragma: no cover
    from ._device_array import BufferList, DeviceArray  # noqa: F401
    from ._types import (DEFAULT_RADIUS_KM, DeviceInfo, FrequencyGrid, LatLonMesh,  # noqa: F401
                         Limits, ServerInfo, Timing)
    from . import aio  # noqa: F401
    from ._api import DEFAULT_UPLOAD_THRESHOLD  # noqa: F401
    from .client import Client  # noqa: F401
    from .replicas import ReplicatedClient  # noqa: F401
    from .errors import *  # noqa: F401,F403


def __getattr__(name: str) -> Any:
    if name == "aio":
        return importlib.import_module(".aio", __name__)
    if name in _HOMES:
        return getattr(importlib.import_module("." + _HOMES[name], __name__), name)
    raise AttributeError(f"module 'gpucompute' has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(list(globals()) + __all__ + ["aio"])
