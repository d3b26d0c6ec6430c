"""Operand helpers: inputs checked, cast as NumPy would and written into request messages."""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from ._device_array import DeviceArray
from ._pb import pb
from ._cuda_arrays import CudaArray, is_cuda_array
from ._shared_slice import SharedSlice
from ._types import Array, NP_TO_PB

ArrayLike = Any
Operand = Union[Array, DeviceArray, CudaArray, SharedSlice]

NORMS = {
    "sum": pb.NORM_SUM,
    "l1": pb.NORM_L1,
    "l2": pb.NORM_L2,
    "max_abs": pb.NORM_MAX_ABS,
    "max": pb.NORM_MAX_ABS,
    "inf": pb.NORM_MAX_ABS,
}


# float32 and float64 as the wire carries them, by item size (made once, not per call).
_LITTLE_ENDIAN: Dict[int, np.dtype[Any]] = {4: np.dtype("<f4"), 8: np.dtype("<f8")}
#: dtype kinds an operand may have: bool, integers, floats (cast as NumPy would)
_CASTABLE_KINDS = "biuf"


def _check_kind(dtype: np.dtype[Any], field_name: str) -> None:
    if dtype.kind not in _CASTABLE_KINDS or (dtype.kind == "f" and dtype.itemsize > 8):
        raise TypeError(f"{field_name}: dtype {dtype} is not supported; gpucompute computes "
                        "in float32 or float64 (from bool, integer or float operands)")


def as_array(value: ArrayLike, field_name: str) -> Operand:
    """A NumPy array of a bool, integer or float dtype (lists and scalars too), a
    DeviceArray, or a device array through __cuda_array_interface__; ``cast_operands`` then gives
    every operand of a call its computing dtype."""
    if isinstance(value, DeviceArray):
        if value.deleted:
            raise ValueError(f"{field_name}: {value!r} was deleted")
        return value
    if is_cuda_array(value):
        return CudaArray(value, field_name)
    arr: Array = np.asarray(value)
    _check_kind(arr.dtype, field_name)
    return arr


def computing_dtype(dtypes: Sequence[np.dtype[Any]], dtype: npt.DTypeLike = None) -> np.dtype[Any]:
    """float32 or float64: ``dtype`` when given, else NumPy's result type of the operands'
    as a float (bool and integers give float64, float16 float32, as NumPy's true divide)."""
    if dtype is not None:
        chosen = np.dtype(dtype)
        if chosen.kind != "f" or chosen.itemsize not in (4, 8):
            raise TypeError(f"dtype is {chosen}; use float32 or float64")
        return _LITTLE_ENDIAN[chosen.itemsize]
    common = np.result_type(*dtypes)
    if common.kind == "f" and common.itemsize <= 4:
        return _LITTLE_ENDIAN[4]
    return _LITTLE_ENDIAN[8]


def cast_operands(named: Sequence[Tuple[str, Operand]], dtype: npt.DTypeLike = None
         ) -> List[Tuple[str, Operand]]:
    """The operands in their computing dtype (``computing_dtype``), each C-contiguous
    and little-endian. Arrays on the server or a device cannot be cast here: one of
    another dtype raises TypeError."""
    target = computing_dtype([value.dtype for _, value in named], dtype)
    out: List[Tuple[str, Operand]] = []
    for name, value in named:
        if isinstance(value, np.ndarray):
            out.append((name, np.ascontiguousarray(value, dtype=target)))
        elif value.dtype != target:
            raise TypeError(f"{name} is a {value.dtype.name} array on the "
                            f"{'server' if isinstance(value, DeviceArray) else 'device'}, "
                            f"but the call computes in {target.name} (NumPy's result type "
                            "of the operands, or dtype=): it cannot be cast here; cast it "
                            "where it lies, or give dtype=")
        else:
            out.append((name, value))
    return out


def byte_view(arr: Array) -> memoryview:
    flat: Any = arr.reshape(-1)  # numpy 1.24 does not type the buffer protocol
    return memoryview(flat).cast("B")


def set_operand(operand: Any, value: Operand) -> None:
    if isinstance(value, DeviceArray):
        operand.buffer_id = value.id
        return
    if isinstance(value, SharedSlice):
        value.fill(operand.shared_memory)
        return
    assert isinstance(value, np.ndarray)
    tensor = operand.tensor
    tensor.dtype = NP_TO_PB[value.dtype]
    tensor.shape.extend(value.shape)
    tensor.data = value.tobytes()


def result_dtype(dtype: npt.DTypeLike) -> int:
    """The wire's dtype of a result generated on the server (float32 or float64)."""
    return NP_TO_PB[computing_dtype([], dtype)]


def haversine_request(refs: ArrayLike, radius: float) -> Any:
    """A HaversineGridRequest with its checked references and radius set."""
    r = np.asarray(refs, dtype=np.float64)
    if r.shape == (2,):
        r = r[None, :]
    if r.ndim != 2 or r.shape[1] != 2 or r.shape[0] == 0:
        raise ValueError(f"refs has shape {np.shape(refs)}; give a (lat, lon) pair or a "
                         "sequence of (lat, lon) pairs, in degrees")
    if not (np.isfinite(radius) and radius > 0):
        raise ValueError(f"radius is {radius}; it must be positive and finite")
    request = pb.HaversineGridRequest(radius=float(radius))
    for lat, lon in r:
        request.references.add(lat=float(lat), lon=float(lon))
    return request
