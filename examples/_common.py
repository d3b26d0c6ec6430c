"""Shared plumbing of the seed walkthroughs: import the client, parse --target, report
checks and exit non-zero when one fails."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def import_gpucompute():
    """The installed gpucompute package, else the one in this checkout."""
    try:
        import gpucompute  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(REPO / "client" / "python"))
        import gpucompute  # noqa: F401
    return sys.modules["gpucompute"]


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=os.environ.get("GPUCOMPUTE_TARGET", "localhost:50051"),
                   help="server address HOST:PORT (default $GPUCOMPUTE_TARGET or "
                        "localhost:50051)")
    p.add_argument("--token", default=os.environ.get("GPUCOMPUTE_TOKEN"),
                   help="bearer token, if the server sits behind an authenticating proxy")
    p.add_argument("--tls", action="store_true", help="connect with TLS (system roots)")
    p.add_argument("--timeout", type=float, default=600.0, help="deadline of each call, s")
    p.add_argument("--stripes", type=int, default=1,
                   help="split large uploads, downloads and streamed calls over this many "
                   "connections")
    p.add_argument("--processes", action="store_true",
                   help="run those stripes in as many worker processes (stripe_processes)")
    return p


def connect(args, **options):
    """A gpucompute.Client for args, with any other Client keyword in options."""
    gc = import_gpucompute()
    import grpc
    creds = grpc.ssl_channel_credentials() if args.tls else None
    client = gc.Client(args.target, credentials=creds, token=args.token, timeout=args.timeout,
                       stripes=args.stripes, stripe_processes=args.processes, **options)
    status = client.health(timeout=min(args.timeout, 30.0))
    info = client.info()
    dev = info.devices[0] if info.devices else None
    where = f"{dev.name} ({dev.description})" if dev else "?"
    print(f"server {args.target}: gpucompute {info.version}, backend {info.backend} on {where}, "
          f"health {status}")
    return client, info


class Checks:
    """Collects PASS/FAIL lines; exit() returns 1 if any failed."""

    def __init__(self):
        self.failed = []
        self.count = 0
        self.start = time.perf_counter()

    def __call__(self, name: str, ok: bool, detail: str = "") -> bool:
        self.count += 1
        print(f"CHECK {'PASS' if ok else 'FAIL'}: {name}" + (f" ({detail})" if detail else ""))
        if not ok:
            self.failed.append(name)
        return ok

    def exit(self) -> None:
        elapsed = time.perf_counter() - self.start
        if self.failed:
            print(f"FAILED {len(self.failed)} of {self.count} checks in {elapsed:.2f} s: "
                  + ", ".join(self.failed))
            sys.exit(1)
        print(f"OK: {self.count} checks passed in {elapsed:.2f} s")
        sys.exit(0)


def shared_array(client, shape, dtype="float64"):
    """Client.shared_array, or None (printing why) when this client cannot use the server's
    shared memory: the server runs without --allow_shared_memory, or on another host."""
    gc = import_gpucompute()
    try:
        return client.shared_array(shape, dtype)
    except gc.FailedPrecondition as e:
        print(f"shared-memory variant skipped: {e.message}")
        return None


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def gb(nbytes: float) -> str:
    if nbytes >= 1e9:
        return f"{nbytes / 1e9:.2f} GB"
    if nbytes >= 1e6:
        return f"{nbytes / 1e6:.1f} MB"
    return f"{nbytes / 1e3:.1f} kB"


def rate(nbytes: float, seconds: float) -> str:
    return f"{nbytes / seconds / 1e9:.2f} GB/s" if seconds > 0 else "-"


def timing_line(t) -> str:
    """One line of a gpucompute Timing."""
    line = (f"queue {ms(t.queue)} | in {ms(t.transfer_in)} | compute {ms(t.compute)} | "
            f"out {ms(t.transfer_out)} | server total {ms(t.total)}")
    if t.upload:
        line += f" | upload {ms(t.upload)}"
    return line + f" | client wall {ms(t.wall)} [{t.device}]"


def host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def host_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return host_memory_bytes() // 2
