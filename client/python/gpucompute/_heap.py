"""The process heap made ready, at connect time, for the first large result.

glibc serves a block above its mmap threshold (128 KiB in a new process) from fresh
pages of its own, which the kernel zeroes as the result is first written into them,
and raises the threshold to a block's size only once such a block is freed. So a
process's first large result (and grpcio's message buffers under it) paid about 2 ms
more per 8 MiB than later ones on the dev VM, where later results reuse heap pages.
``warm`` brings forward what the process's first freed large block would do anyway: a
block just past ``nbytes`` is allocated and freed (the threshold rises to its size, at
most glibc's 32 MiB), then ``nbytes`` of heap are written and freed, and stay mapped
(glibc trims the heap's top only past twice the threshold). The process keeps those
pages resident, as it would after its first large result. Any of glibc's ``MALLOC_*_``
tuning variables (a Dask nanny sets ``MALLOC_TRIM_THRESHOLD_`` for its workers) switches
the dynamic threshold off, and with it this warm-up.
"""
from __future__ import annotations

import platform
import threading

import numpy as np

#: Bytes of heap warmed by default: results up to about this size come from warm pages.
DEFAULT_HEAP_WARMUP = 16 << 20
# glibc raises its mmap threshold only for freed blocks up to DEFAULT_MMAP_THRESHOLD_MAX
# (32 MiB on 64-bit), so the block that raises it stays below that.
_MAX_THRESHOLD_BLOCK = 31 << 20
_THRESHOLD_MARGIN = 1 << 20

_lock = threading.Lock()
_warmed = 0  # bytes warmed so far in this process


def warm(nbytes: int) -> None:
    """Warms ``nbytes`` of heap (at most 30 MiB) once per process; nothing off glibc."""
    global _warmed
    nbytes = min(int(nbytes), _MAX_THRESHOLD_BLOCK - _THRESHOLD_MARGIN)
    if nbytes <= 0 or platform.libc_ver()[0] != "glibc":
        return
    with _lock:
        if _warmed >= nbytes:
            return
        # Allocated and freed at once: a mapped block whose free raises the threshold.
        np.empty(nbytes + _THRESHOLD_MARGIN, np.uint8)
        block = np.empty(nbytes, np.uint8)  # now below the threshold: heap
        block.fill(0)
        del block
        _warmed = nbytes
