"""The generated message module, generated on first import when it is missing or stale
(a source checkout); an installed package carries it from its build."""
from . import _build_proto

_build_proto.ensure_generated()

from ._proto import gpucompute_pb2 as pb  # noqa: E402

__all__ = ["pb"]
