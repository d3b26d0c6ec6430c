"""Same-host zero copy: operands and results in memory the server maps itself.

Two kinds of region, both registered with the server's SharedMemory service (which
must run with --allow_shared_memory, on this host):

* host: ``Client.shared_array(shape, dtype)`` makes a NumPy array in POSIX shared
  memory; the server maps it and pins it for the GPU, so it copies at PCIe speed and
  nothing crosses gRPC. Any array (or C-contiguous slice) lying in such a region is
  sent as a slice of it, and ``out=`` one writes the result there.
* cuda: an array with ``__cuda_array_interface__`` (CuPy, PyTorch, Numba) is shared
  through a CUDA IPC handle of its allocation, registered once per allocation: the
  server reads and writes it on the GPU, no host copy. When the server cannot use
  it (another host, shared memory off) the array is copied to the host instead.

A CUDA allocation must stay allocated while registered: ``free_shared`` (or closing
the client) unregisters it.
"""
from __future__ import annotations

import mmap
import os
import secrets
import threading
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import Any, List, Optional, Tuple

import grpc
import numpy as np

from ._cuda_arrays import CudaArray, driver, is_cuda_array
from ._pb import pb
from ._shared_slice import SharedSlice
from ._steps import Steps, Unary
from .errors import FailedPrecondition

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


@dataclass
class Region:
    id: str
    base: int  # address in this process (host) or device pointer (cuda)
    nbytes: int
    kind: str  # "host" or "cuda"
    key: str = ""  # host: the POSIX shared-memory name, unlinked when freed
    handle: bytes = b""  # cuda: the IPC handle, which tells reused addresses apart


def host_boot_id() -> str:
    try:
        with open(BOOT_ID_PATH) as f:
            return f.read().strip()
    except OSError:
        return ""


class SharedRegions:
    """The regions one client registered, found again by address."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._regions: List[Region] = []
        self.usable: Optional[str] = None  # None: not asked yet; "": usable; else why not
        self.backend = ""  # the server's: CUDA arrays are shared with a "cuda" one only

    def add(self, region: Region) -> None:
        with self._lock:
            self._regions.append(region)

    def take(self, region_id: str) -> Optional[Region]:
        with self._lock:
            for i, region in enumerate(self._regions):
                if region.id == region_id:
                    return self._regions.pop(i)
        return None

    def take_all(self) -> List[Region]:
        with self._lock:
            regions, self._regions = self._regions, []
        return regions

    def find(self, kind: str, ptr: int, nbytes: int, handle: bytes = b"") -> Optional[Region]:
        if not self._regions:  # the usual case, checked without the lock on every call
            return None
        with self._lock:
            for region in self._regions:
                if (region.kind == kind and region.base <= ptr
                        and ptr + nbytes <= region.base + region.nbytes
                        and (not handle or region.handle == handle)):
                    return region
        return None

    def host_slice(self, arr: np.ndarray) -> Optional[SharedSlice]:  # type: ignore[type-arg]
        if not self._regions or not arr.flags.c_contiguous:
            return None
        ptr = int(arr.__array_interface__["data"][0])
        region = self.find("host", ptr, arr.nbytes)
        if region is None:
            return None
        return SharedSlice(region.id, ptr - region.base, arr.dtype, tuple(arr.shape))


def why_not_usable(info: Any) -> str:
    """"" when this client may use the server's shared memory, else why not."""
    if not info.raw.limits.shared_memory:
        return ("the server runs without --allow_shared_memory; send arrays instead "
                "(plain NumPy arrays)")
    if not info.raw.host_boot_id or info.raw.host_boot_id != host_boot_id():
        return ("the server runs on another host (its boot id differs from this one's); "
                "shared memory works only on the server's host")
    return ""


def check_usable(client: Any) -> Steps[str]:
    """Why this client cannot use shared memory ("" when it can); asks the server once."""
    regions: SharedRegions = client._shared
    if regions.usable is None:
        info = yield from client._info()
        regions.backend = info.backend
        regions.usable = why_not_usable(info)
    return regions.usable


def new_shared_array(client: Any, shape: Any, dtype: Any, name: str) -> Steps[Any]:
    why = yield from check_usable(client)
    if why:
        raise FailedPrecondition(grpc.StatusCode.FAILED_PRECONDITION, why,
                                 call="shared_array")
    dt = np.dtype(dtype)
    dims = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    if any(s < 0 for s in dims):
        raise ValueError(f"shape {dims} has a negative extent")
    nbytes = max(int(np.prod(dims, dtype=np.int64)) * dt.itemsize, 1)
    key = f"/gpucompute_{os.getpid()}_{secrets.token_hex(8)}"
    memory = _create(key, nbytes)
    try:
        info = yield Unary("SharedMemory.RegisterSystemSharedMemory",
                           pb.RegisterSystemSharedMemoryRequest(
                               name=name, key=key, offset=0, byte_size=nbytes))
    except BaseException:
        _unlink(key)
        raise
    # The array owns the mapping (its base): it is unmapped with the last view of it.
    arr: np.ndarray = np.ndarray(dims, dt, buffer=memory)  # type: ignore[type-arg]
    client._shared.add(Region(info.id, int(arr.__array_interface__["data"][0]), nbytes,
                              "host", key=key))
    return arr


def _create(key: str, nbytes: int) -> mmap.mmap:
    """A new shared-memory object mapped; the resource tracker unlinks it should this
    process end without freeing it (the server then drops its registration)."""
    import _posixshmem  # type: ignore[import]  # what multiprocessing.shared_memory uses

    fd = _posixshmem.shm_open(key, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    try:
        os.ftruncate(fd, nbytes)
        memory = mmap.mmap(fd, nbytes)
    except BaseException:
        _posixshmem.shm_unlink(key)
        raise
    finally:
        os.close(fd)
    resource_tracker.register(key, "shared_memory")
    return memory


def _unlink(key: str) -> None:
    import _posixshmem

    try:
        _posixshmem.shm_unlink(key)
    except FileNotFoundError:
        pass
    resource_tracker.unregister(key, "shared_memory")


def cuda_slice(client: Any, arr: CudaArray) -> Steps[Optional[SharedSlice]]:
    """The slice of `arr`'s registered allocation (registering it the first time);
    None when the server cannot share it, so that the caller copies it instead."""
    why = yield from check_usable(client)
    if why or client._shared.backend != "cuda":
        return None
    drv = driver()
    base, size = drv.allocation(arr.ptr)
    handle = drv.ipc_handle(base)
    region = client._shared.find("cuda", arr.ptr, arr.nbytes, handle)
    if region is None:
        info = yield Unary("SharedMemory.RegisterCudaSharedMemory",
                          pb.RegisterCudaSharedMemoryRequest(
                              name="gpucompute-py cuda allocation", ipc_handle=handle,
                              pci_bus_id=drv.pci_bus_id(arr.ptr), offset=0, byte_size=size))
        region = Region(info.id, base, size, "cuda", handle=handle)
        client._shared.add(region)
    return SharedSlice(region.id, arr.ptr - region.base, arr.dtype, arr.shape)


def place_shared(client: Any, named: List[Tuple[str, Any]]) -> Steps[List[Tuple[str, Any]]]:
    """Operands in registered memory become SharedSlices; CUDA arrays the server cannot
    share are copied to the host."""
    placed: List[Tuple[str, Any]] = []
    synchronized = False
    for n, value in named:
        if isinstance(value, CudaArray):
            shared = yield from cuda_slice(client, value)
            if shared is None:
                placed.append((n, value.to_host()))
                continue
            if not synchronized:  # the array's pending writes land before the server reads
                driver().synchronize()
                synchronized = True
            placed.append((n, shared))
        elif isinstance(value, np.ndarray):
            placed.append((n, client._shared.host_slice(value) or value))
        else:
            placed.append((n, value))
    return placed


def shared_output(client: Any, out: Any) -> Steps[Optional[SharedSlice]]:
    """The slice `out` occupies when the result can be written there directly."""
    if out is None:
        return None
    if is_cuda_array(out):
        shared = yield from cuda_slice(client, CudaArray(out, "out"))
        if shared is None:
            why = client._shared.usable or "the server runs the CPU backend"
            raise FailedPrecondition(grpc.StatusCode.FAILED_PRECONDITION,
                                     f"out is a device array, which the server cannot write: "
                                     f"{why}; give a NumPy out", call="out")
        driver().synchronize()
        return shared
    regions: SharedRegions = client._shared
    return regions.host_slice(out)


def free(client: Any, array: Any) -> Steps[int]:
    """Unregisters the region holding `array` (and unlinks a shared_array's memory)."""
    if is_cuda_array(array):
        cuda = CudaArray(array, "array")
        base, _ = driver().allocation(cuda.ptr)
        found = client._shared.find("cuda", cuda.ptr, cuda.nbytes, driver().ipc_handle(base))
    else:
        arr = np.asarray(array)
        found = client._shared.find("host", int(arr.__array_interface__["data"][0]), arr.nbytes)
    if found is None:
        return 0
    return (yield from unregister(client, found))


def unregister(client: Any, region: Region) -> Steps[int]:
    client._shared.take(region.id)
    try:
        reply = yield Unary("SharedMemory.UnregisterSharedMemory",
                            pb.UnregisterSharedMemoryRequest(region_id=region.id), True)
        return int(reply.freed_bytes)
    finally:
        release_local(region)


def release_local(region: Region) -> None:
    if region.key:
        _unlink(region.key)  # the arrays keep their mapping until the last one goes


def free_all(client: Any) -> Steps[None]:
    for region in client._shared.take_all():
        try:
            yield from unregister(client, region)
        except Exception:  # noqa: BLE001 - closing: the server drops orphans itself
            pass


__all__ = ["SharedRegions", "new_shared_array", "place_shared",
           "shared_output", "free", "free_all"]
