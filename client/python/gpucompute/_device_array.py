"""DeviceArray: the handle of a buffer stored on the server (and BufferList, a list of them)."""
from __future__ import annotations

from typing import Any, List, Optional, Protocol, Tuple

import grpc
import numpy as np

from ._types import Array, PB_TO_NP
from .errors import NotFound, ProtocolError


class Owner(Protocol):
    """What a DeviceArray asks of the client that made it (either client)."""

    blocking: bool

    def download(self, buffer: "DeviceArray", *, out: Optional[Array] = ...,
                 chunk_bytes: Optional[int] = ..., return_timing: bool = ...,
                 timeout: Optional[float] = ...) -> Any: ...

    def delete(self, buffer: "DeviceArray", *, timeout: Optional[float] = ...) -> Any: ...


class DeviceArray:
    """A buffer stored on the server (on the device that computes with it).

    Pass it to any Client method as an operand; ``download()`` fetches it (so does
    ``np.asarray(device_array)``, from a blocking Client), ``delete()`` frees it; as a
    context manager (``async with`` from gpucompute.aio) it is deleted on exit. From an
    aio.Client, ``download()`` and ``delete()`` return awaitables.
    """

    __slots__ = ("_client", "id", "name", "shape", "dtype", "nbytes", "location",
                 "created_unix_ms", "_deleted")

    def __init__(self, client: Owner, id: str, shape: Tuple[int, ...], dtype: Any,
                 nbytes: int, location: str, name: str = "", created_unix_ms: int = 0):
        self._client = client
        self.id = id
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(nbytes)
        self.location = location
        self.created_unix_ms = int(created_unix_ms)
        self._deleted = False

    @classmethod
    def _from_info(cls, client: Owner, info: Any) -> "DeviceArray":
        if info.dtype not in PB_TO_NP:
            raise ProtocolError(grpc.StatusCode.DATA_LOSS,
                                f"buffer {info.id} has unknown dtype {info.dtype}")
        return cls(client, info.id, tuple(info.shape), PB_TO_NP[info.dtype], info.bytes,
                   info.location, info.name, info.created_unix_ms)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def deleted(self) -> bool:
        return self._deleted

    def download(self, *, out: Optional[Array] = None, chunk_bytes: Optional[int] = None,
                 return_timing: bool = False, timeout: Optional[float] = None) -> Any:
        """The buffer's contents as a new NumPy array (or written into ``out``)."""
        return self._client.download(self, out=out, chunk_bytes=chunk_bytes,
                                     return_timing=return_timing, timeout=timeout)

    def numpy(self) -> Any:
        return self.download()

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> Array:
        """np.asarray(device_array): downloads (always a copy of the server's data)."""
        if not self._client.blocking:
            raise TypeError("this DeviceArray belongs to a gpucompute.aio.Client: use "
                            "`await device_array.download()`")
        if copy is False:
            raise ValueError("a DeviceArray lives on the server: converting it always "
                             "copies (download)")
        array: Array = self.download()
        return array if dtype is None else array.astype(dtype, copy=False)

    def delete(self, *, timeout: Optional[float] = None) -> Any:
        """Free the buffer; returns the bytes freed (0 if this handle deleted it before)."""
        return self._client.delete(self, timeout=timeout)

    def __enter__(self) -> "DeviceArray":
        if not self._client.blocking:
            raise TypeError("use `async with` on a DeviceArray of a gpucompute.aio.Client")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.delete()
        except NotFound:
            self._deleted = True

    async def __aenter__(self) -> "DeviceArray":
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.delete()
        except NotFound:
            self._deleted = True

    def __repr__(self) -> str:
        name = f", name={self.name!r}" if self.name else ""
        state = ", deleted" if self._deleted else ""
        return (f"DeviceArray(id={self.id!r}{name}, shape={self.shape}, dtype={self.dtype.name}, "
                f"nbytes={self.nbytes}, location={self.location!r}{state})")


class BufferList(List[DeviceArray]):
    """list of DeviceArray: the caller's buffers (those stored under its credentials),
    with their used_bytes and the server's whole quota_bytes."""

    used_bytes: int = 0
    quota_bytes: int = 0
