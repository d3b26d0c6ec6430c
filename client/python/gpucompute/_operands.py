"""Operand helpers: NumPy inputs checked, cast and written into request messages."""
from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple, Union

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


def as_array(value: ArrayLike, field_name: str) -> Operand:
    """A C-contiguous little-endian float32/float64 array (or the DeviceArray itself, or a
    device array through __cuda_array_interface__)."""
    if isinstance(value, DeviceArray):
        if value.deleted:
            raise ValueError(f"{field_name}: {value!r} was deleted")
        return value
    if is_cuda_array(value):
        return CudaArray(value, field_name)
    arr: Array = np.asarray(value)
    if arr.dtype.kind != "f" or arr.dtype.itemsize not in (4, 8):
        raise TypeError(f"{field_name}: dtype {arr.dtype} is not supported; "
                        "gpucompute computes in float32 or float64 (cast with .astype)")
    want = _LITTLE_ENDIAN[arr.dtype.itemsize]
    if arr.dtype != want:
        arr = arr.astype(want)
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")
    return arr


def same_dtype(named: Sequence[Tuple[str, Operand]]) -> np.dtype[Any]:
    first_name, first = named[0]
    for name, value in named[1:]:
        if value.dtype != first.dtype:
            raise TypeError(f"{first_name} is {first.dtype.name} but {name} is "
                            f"{value.dtype.name}; operands must share one dtype "
                            "(no implicit casts: cast with .astype)")
    return first.dtype


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
    dt = np.dtype(dtype)
    if dt.kind != "f" or dt.itemsize not in (4, 8):
        raise TypeError(f"dtype {dt} is not supported; use float32 or float64")
    return int(pb.FLOAT32 if dt.itemsize == 4 else pb.FLOAT64)


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
