"""The generated message module. An installed package carries it from its build
(setup.py); a source checkout used without installing generates it here, on first
import and again whenever proto/ changes. Typed Any: protoc's Python output has no types."""
import importlib
from typing import Any

from . import _build_proto

if _build_proto.in_source_checkout():
    _build_proto.ensure_generated()

pb: Any = importlib.import_module(".gpucompute_pb2", __name__.rpartition(".")[0] + "._proto")

__all__ = ["pb"]
