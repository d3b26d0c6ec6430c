#!/usr/bin/env python3
"""Seed 002: why is the first call slow?

With CuPy or Numba the first call of a function pays JIT compilation and module
loading; later calls are fast. gpucompute compiles its kernels ahead of time and, before
it reports SERVING, loads and runs every kernel variant of both dtypes, plans the
common cuFFT sizes and fills its memory pools, so on a freshly started server the first
request of each operation (and dtype) should cost what the later ones do.

For every operation and dtype this sends one first request and then --repeats more,
and prints the first request's server time (accepted -> trailer, so that connection
set-up on the client side does not count), the median of the later ones, the ratio,
and where a first request's extra time went (queue, transfer in, compute, transfer out,
or streaming the result); client wall times are shown too. --cli PATH sends the same
requests through the C++ CLI (one process per request) instead of the Python client.
Run it against a freshly started server; the check fails when a first request costs
more than --max-ratio times the later median (plus --slack-ms, for timer noise on
tiny requests).

The first request and each later one it is compared with come --pause after the call
before them, so that all find a server that has idled as long: on a host whose idle
CPUs halt (a VM), any request after a pause pays for waking them, first or not (a fresh
server's first request costs what any request after the same idle time does;
bench/NOTES.md, "First requests").
The median of as many back-to-back requests is printed beside it.

    python examples/seed002_first_call.py --target localhost:50051
    python examples/seed002_first_call.py --target localhost:50051 --cli gpucompute-cli
"""
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, NamedTuple, Tuple

import numpy as np

from _common import Checks, connect, ms, parser, shared_array

PHASES = ("queue", "transfer_in", "compute", "transfer_out", "stream")


class Sample(NamedTuple):
    """One request's server times (s) by phase, its server total and client wall."""
    phases: Tuple[float, ...]
    total: float
    wall: float
    method: str


class Case(NamedTuple):
    label: str
    dtype: type
    python: Callable  # (client) -> (result, Timing)
    cli: List[str]    # CLI subcommand and flags
    valid: Callable   # (result) -> whether it is right (the first result is checked)


def sample_of(t) -> Sample:
    known = (t.queue, t.transfer_in, t.compute, t.transfer_out)
    return Sample(known + (max(0.0, t.total - sum(known)),), t.total, t.wall, t.method)


def cases(gc, scale: float, files: Path) -> List[Case]:
    """Every operation and dtype at the seeds' sizes (times --scale); inputs made once,
    saved as .npy for the CLI."""
    rng = np.random.default_rng(2)
    m = max(10, int(4000 * scale))
    n_mesh = max(10, int(1000 * scale))
    n_norm = max(10, int(1_000_000 * scale))
    n_freq = max(16, int(2 ** 16 * scale))
    n_nufft = max(64, int(2 ** 20 * scale))
    out: List[Case] = []
    for dt in (np.float32, np.float64):
        name = np.dtype(dt).name
        x = np.sort(rng.uniform(0, 10, 1024)).astype(dt)
        d = dict(factors=rng.random((m, 5)).astype(dt), values=rng.random((10, m, 5)).astype(dt),
                 rows=rng.random((10, n_norm // 10)).astype(dt), x=x, y=np.cos(x + 0.5).astype(dt))
        for key, value in d.items():
            np.save(files / f"{key}_{name}.npy", value)
        f = {key: str(files / f"{key}_{name}.npy") for key in d}
        mesh = gc.LatLonMesh(29, 31, n_mesh, 99, 101, n_mesh)
        tol = 1e-5 if dt == np.float32 else 1e-12
        # Periodogram powers of a pure cosine: finite, non-negative, the peak near 1.
        periodogram = lambda p, n: p.shape == (n,) and bool(np.all(np.isfinite(p)) and p.min() >= 0)
        out += [
            Case("DiscountProduct", dt, lambda c, d=d: c.discount_product(
                d["factors"], d["values"], return_timing=True),
                ["discount-product", f"--factors={f['factors']}", f"--values={f['values']}"],
                lambda r, d=d: np.allclose(r, d["factors"] * d["values"], rtol=tol)),
            Case("HaversineGrid", dt, lambda c, dt=dt: c.haversine_grid(
                mesh, (30, 101), dtype=dt, return_timing=True),
                ["haversine", f"--lat=29:31:{n_mesh}", f"--lon=99:101:{n_mesh}", "--ref=30,101",
                 f"--dtype={name}"],
                lambda r: r.size == n_mesh ** 2 and 0 <= r.min() and r.max() < 250),  # km
            Case("Normalize", dt, lambda c, d=d: c.normalize(d["rows"], return_timing=True),
                 ["normalize", f"--input={f['rows']}"],
                 lambda r: np.allclose(r.sum(axis=1, dtype=np.float64), 1, atol=1e-4)),
            Case("LombScargle", dt, lambda c, d=d: c.lombscargle(
                d["x"], d["y"], gc.FrequencyGrid(0.01, 10, n_freq), return_timing=True),
                ["lombscargle", f"--x={f['x']}", f"--y={f['y']}", f"--freq_grid=0.01:10:{n_freq}"],
                lambda r: periodogram(r, n_freq)),
            # The seed 004 size, where the server picks the NUFFT (cuFFT plans).
            Case("LombScargle large", dt, lambda c, d=d: c.lombscargle(
                d["x"], d["y"], gc.FrequencyGrid(0.01, 10, n_nufft), return_timing=True),
                ["lombscargle", f"--x={f['x']}", f"--y={f['y']}", f"--freq_grid=0.01:10:{n_nufft}"],
                lambda r: periodogram(r, n_nufft)),
        ]
    order = [c.label for c in out[:5]]  # each operation's two dtypes one after the other
    return sorted(out, key=lambda c: (order.index(c.label), np.dtype(c.dtype).itemsize))


# The stages after transfer out (stream write, prepare, other or overlapped) fall in
# this script's "stream" remainder, as for the Python client's Timing.
_CLI_TIMING = re.compile(r"timing \(us\) queue (\d+), transfer in (\d+), compute (\d+), "
                         r"transfer out (\d+)[^;\n]*; total (\d+)")


def cli_sample(cli: str, args, case: Case, out: Path) -> Sample:
    cmd = [cli, f"--target={args.target}", f"--timeout={args.timeout:g}s"] + case.cli + [
        f"--out={out}"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - start
    found = _CLI_TIMING.search(proc.stdout + proc.stderr)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    q, t_in, comp, t_out, total = (int(v) / 1e6 for v in found.groups())
    known = (q, t_in, comp, t_out)
    return Sample(known + (max(0.0, total - sum(known)),), total, wall, "")


def extra(first: Sample, later: List[Sample]) -> str:
    """Where the first request's time beyond the later median went (phases >= 0.1 ms)."""
    parts = []
    for i, phase in enumerate(PHASES):
        more = first.phases[i] - statistics.median(s.phases[i] for s in later)
        if more >= 1e-4:
            parts.append(f"{phase} +{more * 1e3:.2f}")
    return ", ".join(parts) or "-"


def main():
    p = parser(__doc__)
    p.add_argument("--repeats", type=int, default=10, help="later requests per op and dtype")
    p.add_argument("--scale", type=float, default=1.0, help="input size factor (tests: 0.05)")
    p.add_argument("--max-ratio", type=float, default=1.2)
    p.add_argument("--slack-ms", type=float, default=0.3)
    p.add_argument("--cli", help="send the requests through this gpucompute-cli binary")
    p.add_argument("--pause", type=float, default=0.2,
                   help="seconds slept before the first request and each later one compared "
                   "with it (0: back to back)")
    p.add_argument("--heap-warmup", type=int, default=None,
                   help="the client's heap_warmup, bytes (default its own; 0: none)")
    args = p.parse_args()
    client, info = connect(args, **({} if args.heap_warmup is None else
                                    {"heap_warmup": args.heap_warmup}))
    import gpucompute as gc
    checks = Checks()
    via = f"the CLI ({args.cli})" if args.cli else "the Python client"
    print(f"\nrequests through {via}; server time = accepted -> trailer sent; first and later "
          f"each {args.pause:g} s after the call before; later: median of {max(1, args.repeats)} "
          f"(p90 / median in brackets); b2b: median of as many back to back")
    print(f"{'operation':<24} {'dtype':<8} {'first':>9} {'later':>9} {'ratio':>6} {'(p90)':>6} "
          f"{'b2b':>9}  {'first wall':>10} {'later wall':>10}  first's extra ms by phase")
    with tempfile.TemporaryDirectory() as tmp:
        files = Path(tmp)
        for case in cases(gc, args.scale, files):
            if args.cli:
                def run(case=case):
                    sample = cli_sample(args.cli, args, case, files / "out.npy")
                    return np.load(files / "out.npy"), sample
            else:
                def run(case=case):
                    result, timing = case.python(client)
                    return result, sample_of(timing)
            def after_pause(run=run):
                time.sleep(args.pause)
                return run()

            result, first = after_pause()
            name = np.dtype(case.dtype).name
            checks(f"{case.label} {name}: the first result is right", bool(case.valid(result)))
            later = [after_pause()[1] for _ in range(max(1, args.repeats))]
            back_to_back = [run()[1] for _ in range(max(1, args.repeats))]
            med = statistics.median(s.total for s in later)
            p90 = sorted(s.total for s in later)[int(0.9 * (len(later) - 1))]
            ratio = first.total / med if med > 0 else float("inf")
            label = case.label + (f" ({first.method})" if first.method else "")
            print(f"{label:<24.24} {name:<8} {ms(first.total):>9} {ms(med):>9} {ratio:>6.2f} "
                  f"{p90 / med if med > 0 else 0:>6.2f} "
                  f"{ms(statistics.median(s.total for s in back_to_back)):>9}  {ms(first.wall):>10} "
                  f"{ms(statistics.median(s.wall for s in later)):>10}  {extra(first, later)}")
            ok = first.total <= args.max_ratio * med + args.slack_ms * 1e-3
            checks(f"{case.label} {name}: first request costs what later ones do", ok,
                   f"first {ms(first.total)}, later {ms(med)}, ratio {ratio:.2f}")
    if not args.cli:
        shared_memory_variant(client, args, checks)
    checks.exit()


def shared_memory_variant(client, args, checks) -> None:
    rows = shared_array(client, (10, max(10, int(1_000_000 * args.scale)) // 10), np.float32)
    if rows is None:
        return
    # Same host: the Normalize of the table, through shared memory.
    rows[...] = np.random.default_rng(2).random(rows.shape, dtype=np.float32)
    out = client.shared_array(rows.shape, np.float32)
    first = client.normalize(rows, out=out, return_timing=True)[1]
    later = [client.normalize(rows, out=out, return_timing=True)[1]
             for _ in range(max(1, args.repeats))]
    print(f"{'Normalize shm':<24} {'float32':<8} {ms(first.total):>9} "
          f"{ms(statistics.median(t.total for t in later)):>9}")
    checks("Normalize through shared memory: rows sum to 1",
           bool(np.allclose(out.sum(axis=1, dtype=np.float64), 1, atol=1e-4)))
    client.free_shared(rows)
    client.free_shared(out)


if __name__ == "__main__":
    sys.exit(main())
