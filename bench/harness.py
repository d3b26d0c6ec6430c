"""What the Python benchmarks share: a fresh server on a free port, and median timing."""
from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Sequence, Tuple


def start_server(binary: str, extra: Sequence[str] = ()) -> Tuple[subprocess.Popen, str]:
    """A server with shared memory on 127.0.0.1, port 0; its process and target once it
    logs its port. Exits the benchmark, with the server's log, if it does not start."""
    log = tempfile.NamedTemporaryFile(prefix="bench-server-", suffix=".log", delete=False)
    proc = subprocess.Popen([binary, "--address=127.0.0.1:0", "--metrics_address=",
                             "--allow_shared_memory", *extra],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        m = re.search(r"\(port (\d+)\)", Path(log.name).read_text(errors="replace"))
        if m:
            return proc, f"127.0.0.1:{m.group(1)}"
        time.sleep(0.1)
    proc.kill()
    sys.exit(f"{binary} did not start:\n{Path(log.name).read_text(errors='replace')}")


def median_ms(fn: Callable[[], object], reps: int, warm: int = 3,
              sync: Optional[Callable[[], object]] = None) -> float:
    """The median of `reps` timed calls of `fn` after `warm` untimed ones, in ms; `sync`
    (a device synchronization) runs inside each timed call."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)
