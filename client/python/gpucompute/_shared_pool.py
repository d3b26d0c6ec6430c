"""The same-host path for plain NumPy arrays: shared memory the client manages.

Where the server maps this host's shared memory (--allow_shared_memory, same boot id), a
large NumPy operand is copied into a region of this pool and sent as a slice of it, and
a large result is written by the server into another and copied out, so that no bytes
cross gRPC. The regions stay registered (and pinned by the server) and are reused by
later calls: a region is made only when none free is large enough, and the least
recently used free ones are unregistered once the pool would pass its size.
"""
from __future__ import annotations

import os
import threading
from typing import Any, List, Optional

import numpy as np

from ._shared_memory import check_usable, free, new_shared_array
from ._steps import Steps
from ._stripe_workers import copy_on_threads
from ._types import Array
from .errors import GpuComputeError

#: arrays from this size up take the pool (below it gRPC costs about what copies do)
POOL_MIN_BYTES = 1 << 20
#: the most bytes of regions the pool keeps
DEFAULT_POOL_BYTES = 4 << 30
#: regions are made in multiples of this, so that nearby sizes share them
_GRANULE = 1 << 20
#: the threads a large copy into or out of the pool runs on (NumPy drops the GIL)
COPY_THREADS = max(1, min(8, os.cpu_count() or 1))


class SharedPool:
    """Registered host regions (flat uint8 arrays), free ones reused by later calls."""

    def __init__(self, max_bytes: int = DEFAULT_POOL_BYTES):
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._free: List[Array] = []  # least recently used first
        self._bytes = 0  # all regions, free or leased

    def lease(self, client: Any, nbytes: int) -> Steps[Optional[Array]]:
        """A region of at least ``nbytes`` (at most about twice that) for one call; None
        where the server cannot map this host's memory or refuses another region."""
        why = yield from check_usable(client)
        if why:
            return None
        with self._lock:
            fits = [i for i, b in enumerate(self._free)
                    if nbytes <= b.nbytes <= 2 * nbytes + _GRANULE]
            if fits:
                # By position: list.remove would compare arrays with ==, elementwise.
                return self._free.pop(min(fits, key=lambda i: self._free[i].nbytes))
            capacity = -(-max(nbytes, 1) // _GRANULE) * _GRANULE
            evicted: List[Array] = []
            while self._free and self._bytes + capacity > self.max_bytes:
                evicted.append(self._free.pop(0))
                self._bytes -= evicted[-1].nbytes
            self._bytes += capacity
        for block in evicted:
            yield from self._unregister(client, block)
        try:
            block = yield from new_shared_array(client, capacity, np.uint8,
                                                "gpucompute-py pool")
        except GpuComputeError:  # a quota: this call goes over gRPC
            with self._lock:
                self._bytes -= capacity
            return None
        return block

    def give_back(self, blocks: List[Array]) -> None:
        """Regions a call has done with."""
        with self._lock:
            self._free.extend(blocks)

    def discard(self, client: Any, blocks: List[Array]) -> Steps[None]:
        """Regions of a call that failed: the server may still be using them for it, so
        they are unregistered (the server answers once no request uses them) rather
        than leased again."""
        for block in blocks:
            with self._lock:
                self._bytes -= block.nbytes
            yield from self._unregister(client, block)

    def _unregister(self, client: Any, block: Array) -> Steps[None]:
        try:
            yield from free(client, block)
        except GpuComputeError:
            pass  # the server drops it with the client's other regions at close


def view(block: Array, shape: Any, dtype: Any) -> Array:
    """The start of ``block`` as an array of ``shape`` and ``dtype``."""
    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return block[:count * dt.itemsize].view(dt).reshape(shape)


def copy(target: Array, source: Array) -> None:
    """source into target (same shape, C-contiguous), on COPY_THREADS threads when large."""
    copy_on_threads(target.reshape(-1), source.reshape(-1), COPY_THREADS)
