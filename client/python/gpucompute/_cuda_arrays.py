"""Device arrays of other libraries, read without them: ``CudaArray`` takes anything with
``__cuda_array_interface__`` (CuPy, PyTorch, Numba, JAX) or a CUDA DLPack capsule
(``__dlpack__``), and the few CUDA driver calls the IPC path needs, through ctypes
(libcuda), so no CUDA Python package is needed."""
from __future__ import annotations

import ctypes
import importlib
from typing import Any, Optional, Tuple

import numpy as np

#: DLPack: kDLCUDA devices, kDLFloat dtypes
_DL_CUDA = 2
_DL_FLOAT = 2


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class NoCudaDriver(RuntimeError):
    """A device array was given on a host whose CUDA driver cannot be loaded."""


class _Driver:
    """The few CUDA driver calls the IPC path needs, through ctypes."""

    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise NoCudaDriver(
                "a device array (__cuda_array_interface__ or CUDA DLPack) was given, but "
                f"this host's CUDA driver cannot be loaded ({e}): the array's memory cannot "
                "be read here; pass a NumPy array, or run where the driver is installed"
            ) from None

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(result, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {(name.value or b'?').decode()} ({result})")

    def allocation(self, ptr: int) -> Tuple[int, int]:
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        self._check(self.lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                                     ctypes.c_uint64(ptr)),
                    "cuMemGetAddressRange")
        return int(base.value), int(size.value)

    def ipc_handle(self, base: int) -> bytes:
        handle = (ctypes.c_char * 64)()
        self._check(self.lib.cuIpcGetMemHandle(handle, ctypes.c_uint64(base)),
                    "cuIpcGetMemHandle (memory from cudaMallocAsync pools cannot be shared)")
        return bytes(handle)

    def pci_bus_id(self, ptr: int) -> str:
        ordinal, device = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.cuPointerGetAttribute(
            ctypes.byref(ordinal), self.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ctypes.c_uint64(ptr)), "cuPointerGetAttribute")
        self._check(self.lib.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
        bus = ctypes.create_string_buffer(64)
        self._check(self.lib.cuDeviceGetPCIBusId(bus, 64, device), "cuDeviceGetPCIBusId")
        return bus.value.decode()

    def synchronize(self) -> None:
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")

    def to_host(self, ptr: int, out: np.ndarray) -> None:  # type: ignore[type-arg]
        self.synchronize()
        self._check(self.lib.cuMemcpyDtoH_v2(ctypes.c_void_p(out.ctypes.data),
                                             ctypes.c_uint64(ptr), ctypes.c_size_t(out.nbytes)),
                    "cuMemcpyDtoH")


_driver: Optional[_Driver] = None


def driver() -> _Driver:
    global _driver
    if _driver is None:
        _driver = _Driver()
    return _driver


def _from_dlpack(obj: Any) -> Tuple[int, str, Tuple[int, ...], Optional[Tuple[int, ...]]]:
    """(pointer, typestr, shape, strides in bytes or None) of a CUDA DLPack capsule; the
    capsule is not consumed (its destructor gives it back), and `obj` keeps the memory."""
    capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    tensor = ctypes.cast(get(capsule, b"dltensor"), ctypes.POINTER(_DLTensor)).contents
    if tensor.dtype.code != _DL_FLOAT or tensor.dtype.lanes != 1:
        raise TypeError("the DLPack tensor is not of a float dtype")
    itemsize = tensor.dtype.bits // 8
    shape = tuple(int(tensor.shape[i]) for i in range(tensor.ndim))
    strides = (None if not tensor.strides else
               tuple(int(tensor.strides[i]) * itemsize for i in range(tensor.ndim)))
    return int(tensor.data or 0) + int(tensor.byte_offset), f"<f{itemsize}", shape, strides


class CudaArray:
    """A C-contiguous float32/float64 device array (see the module's docstring)."""

    def __init__(self, obj: Any, field_name: str):
        self.obj = obj
        #: the library whose array type results of a call on this array take, when known
        self.library = _library_of(obj)
        if hasattr(obj, "__cuda_array_interface__"):
            cai = obj.__cuda_array_interface__
            ptr, typestr, shape, strides = (int(cai["data"][0]), cai["typestr"],
                                            tuple(int(s) for s in cai["shape"]),
                                            cai.get("strides"))
        else:
            ptr, typestr, shape, strides = _from_dlpack(obj)
        self.dtype = np.dtype(typestr)
        if self.dtype.kind != "f" or self.dtype.itemsize not in (4, 8):
            raise TypeError(f"{field_name}: device dtype {self.dtype} is not supported; "
                            "use float32 or float64")
        self.shape = shape
        contiguous = self.dtype.itemsize
        expected = []
        for extent in reversed(self.shape):
            expected.append(contiguous)
            contiguous *= extent
        c_order = tuple(reversed(expected))
        if strides is not None and any(extent > 1 and stride != want for extent, stride, want
                                       in zip(self.shape, strides, c_order)):
            raise ValueError(f"{field_name}: the device array is not C-contiguous "
                             "(make a copy with .copy())")
        self.ptr = ptr
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def to_host(self) -> np.ndarray:  # type: ignore[type-arg]
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            driver().to_host(self.ptr, out)
        return out


def is_cuda_array(value: Any) -> bool:
    """An array in CUDA device memory: __cuda_array_interface__, or DLPack on a CUDA device."""
    if hasattr(value, "__cuda_array_interface__"):
        return True
    if not (hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__")):
        return False
    try:
        return int(value.__dlpack_device__()[0]) == _DL_CUDA
    except Exception:  # noqa: BLE001 - not a DLPack producer after all
        return False


#: libraries whose arrays results are returned in (the input's library, on its device)
_LIBRARIES = ("cupy", "torch")


def _library_of(obj: Any) -> str:
    library = type(obj).__module__.split(".")[0]
    return library if library in _LIBRARIES else ""


def _module(name: str) -> Any:
    # Already imported: the caller passed one of its arrays.
    return importlib.import_module(name)


def empty_like_device(like: CudaArray, shape: Tuple[int, ...], dtype: Any) -> Any:
    """An empty array of ``like``'s library on its device; None for other libraries."""
    if like.library == "cupy":
        cupy = _module("cupy")
        with cupy.cuda.Device(like.obj.device.id):
            return cupy.empty(shape, dtype=dtype)
    if like.library == "torch":
        torch = _module("torch")
        return torch.empty(shape, dtype=getattr(torch, np.dtype(dtype).name),
                           device=like.obj.device)
    return None


def to_device_like(like: CudaArray, host: Any) -> Any:
    """A NumPy result as an array of ``like``'s library on its device (a copy); the
    NumPy array itself for other libraries."""
    if like.library == "cupy":
        cupy = _module("cupy")
        with cupy.cuda.Device(like.obj.device.id):
            return cupy.asarray(host)
    if like.library == "torch":
        torch = _module("torch")
        return torch.from_numpy(np.ascontiguousarray(host)).to(like.obj.device)
    return host
