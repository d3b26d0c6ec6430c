"""DeviceArray: the handle of a buffer stored on the server."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

import grpc
import numpy as np

from ._types import PB_TO_NP
from .errors import NotFound, ProtocolError

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client


class DeviceArray:
    """A buffer stored on the server (on the device that computes with it).

    Pass it to any Client method as an operand; ``download()`` fetches it, ``delete()``
    frees it; as a context manager it is deleted on exit.
    """

    __slots__ = ("_client", "id", "name", "shape", "dtype", "nbytes", "location",
                 "created_unix_ms", "_deleted")

    def __init__(self, client: "Client", id: str, shape: Tuple[int, ...], dtype: np.dtype,
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
    def _from_info(cls, client: "Client", info) -> "DeviceArray":
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

    def download(self, *, chunk_bytes: Optional[int] = None, return_timing: bool = False,
                 timeout: Optional[float] = None):
        """The buffer's contents as a new NumPy array."""
        return self._client.download(self, chunk_bytes=chunk_bytes, return_timing=return_timing,
                                     timeout=timeout)

    def numpy(self) -> np.ndarray:
        return self.download()

    def delete(self, *, timeout: Optional[float] = None) -> int:
        """Free the buffer; returns the bytes freed (0 if this handle deleted it before)."""
        if self._deleted:
            return 0
        freed = self._client.delete(self.id, timeout=timeout)
        self._deleted = True
        return freed

    def __enter__(self) -> "DeviceArray":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.delete()
        except NotFound:
            self._deleted = True

    def __repr__(self) -> str:
        name = f", name={self.name!r}" if self.name else ""
        state = ", deleted" if self._deleted else ""
        return (f"DeviceArray(id={self.id!r}{name}, shape={self.shape}, dtype={self.dtype.name}, "
                f"nbytes={self.nbytes}, location={self.location!r}{state})")
