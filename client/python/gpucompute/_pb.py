"""The generated message module. An installed package carries it from its build
(setup.py); a source checkout used without installing generates it here, on first
import and again whenever proto/ changes."""
from . import _build_proto

if _build_proto.in_source_checkout():
    _build_proto.ensure_generated()

from ._proto import gpucompute_pb2 as pb  # noqa: E402

__all__ = ["pb"]
