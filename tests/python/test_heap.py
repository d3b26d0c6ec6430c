"""gpucompute._heap: after the warm-up a large array lies on pages already resident.

Each case runs in a fresh interpreter (the warm-up is once per process and changes
glibc's thresholds for good); residency is read from /proc/self/pagemap's present bit,
which a process may read for itself.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from conftest import CLIENT_DIR

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not os.access("/proc/self/pagemap", os.R_OK),
    reason="glibc's heap and /proc/self/pagemap only")

_RESIDENT_SHARE = r"""
import os, struct, sys
import numpy as np
from gpucompute import _heap
_heap.warm(int(sys.argv[1]))
a = np.empty(8 << 20, np.uint8)  # a first 8 MiB result, not yet written
page = os.sysconf("SC_PAGE_SIZE")
pages = a.nbytes // page
with open("/proc/self/pagemap", "rb") as f:
    f.seek(a.ctypes.data // page * 8)
    entries = struct.iter_unpack("<Q", f.read(pages * 8))
    # Present (bit 63) or a swap-type entry (bit 62): with no swap device that is a page
    # the kernel is migrating (compaction under load), still the same written page.
    print(sum((e >> 62) != 0 for (e,) in entries) / pages)
"""


def resident_share(warmup: int) -> float:
    done = subprocess.run([sys.executable, "-c", _RESIDENT_SHARE, str(warmup)], cwd=str(CLIENT_DIR),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


def test_a_first_large_array_after_the_warmup_lies_on_resident_pages() -> None:
    assert resident_share(16 << 20) == 1.0


def test_without_the_warmup_it_lies_on_fresh_pages() -> None:
    # The check above would pass for any array otherwise.
    assert resident_share(0) < 0.1
