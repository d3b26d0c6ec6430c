"""Seed 000's discount product and seed 003's normalize as Dask arrays through one and
through several servers, against the same work by the plain client.

    PYTHONPATH=client/python python3 bench/dask_seeds.py \
        --server build/server/gpucompute-server --gb 4 --servers 3 [-- --backend=cuda ...]

Starts --servers servers on 127.0.0.1 (shared memory allowed; arguments after "--" go to
each, e.g. --devices=i is not set: they share the GPU), builds the inputs once in this
process, then times, best of --reps:
  plain        gpucompute.Client(first server) on the whole NumPy array, one call;
  dask xN      gpucompute.dask on a dask array of --block-mb blocks, N servers, each bound
               to one worker of an in-process distributed LocalCluster (threads: blocks
               are not pickled); without distributed (--no-distributed, or not
               installed), the threaded scheduler with a part of the array per server.
Results are checked equal to the plain client's. Prints one table (GB/s counts input and
output bytes once each).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

# Debian 12's dask 2022.12 names np.round_ and numpy.compat.basestring, which NumPy 2
# removed: the aliases let this bench import it where only that Dask can travel
# (gpucompute.dask itself wants a Dask made for NumPy 2 there).
if not hasattr(np, "round_"):
    np.round_ = np.round
try:
    import numpy.compat  # noqa: F401
except ImportError:
    import types
    sys.modules["numpy.compat"] = types.SimpleNamespace(basestring=str)  # type: ignore[assignment]

import dask  # noqa: E402
import dask.array as da  # noqa: E402

import gpucompute
import gpucompute.dask as gcd
from harness import start_server  # noqa: E402

try:
    import distributed
except ImportError:  # the threaded scheduler, a part of the array per server
    distributed = None


def best_of(reps: int, run: Callable[[], np.ndarray]) -> Tuple[float, np.ndarray]:
    best, out = float("inf"), None
    for _ in range(reps):
        out = None  # the previous result's memory back before the next
        start = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - start)
    assert out is not None
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="gpucompute-server binary")
    parser.add_argument("--gb", type=float, default=4.0, help="input GB of each job")
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4, help="threads per Dask worker")
    parser.add_argument("--block-mb", type=float, default=256.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-distributed", action="store_true",
                        help="the threaded scheduler even where distributed is installed")
    parser.add_argument("server_args", nargs="*", help="after --: each server's flags")
    args = parser.parse_args()
    global distributed
    if args.no_distributed:
        distributed = None

    servers = [start_server(args.server, args.server_args) for _ in range(args.servers)]
    targets = [t for _, t in servers]
    os.environ[gcd.TARGET_ENV] = targets[0]  # the threaded scheduler's server
    try:
        with gpucompute.Client(targets[0]) as c:
            info = c.info()
        device = info.devices[0].name if info.devices else ""
        print(f"servers: {len(targets)} x {info.backend} ({device})"
              f"; dask {dask.__version__}, numpy {np.__version__}, "
              f"distributed {distributed.__version__ if distributed else 'absent'}")
        # Seed 000: multBy (M, 5) over discount (200, M, 5) float64.
        d, o = 200, 5
        m = max(int(args.gb * 1e9 / (d * o * 8)), 1)
        mult_by = np.random.default_rng(0).random((m, o))
        discount = np.random.default_rng(1).random((d, m, o))
        rows_per_block = max(int(args.block_mb * 1e6 / (m * o * 8)), 1)
        # Seed 003: rows of 10M float32, each divided by its sum.
        n = 10_000_000
        rows = max(int(args.gb * 1e9 / (n * 4)), 1)
        a = np.random.default_rng(2).random((rows, n), dtype=np.float32) + 0.1
        norm_rows = max(int(args.block_mb * 1e6 / (n * 4)), 1)
        def spread(make: Callable[[Any, str], Any], x: np.ndarray, chunks: Tuple[int, ...],
                   servers: List[str]) -> Any:
            """x's leading axis in one part per server (target=), blocks of `chunks`: the
            threaded scheduler's way to several servers; one part under distributed,
            whose workers are bound to their servers."""
            bounds = np.linspace(0, x.shape[0], len(servers) + 1).astype(int)
            return da.concatenate([make(da.from_array(x[lo:hi], chunks=chunks), t)
                                   for lo, hi, t in zip(bounds, bounds[1:], servers)])

        jobs = [
            (f"seed 000 discount_product ({d}, {m}, {o}) f64", discount.nbytes * 2,
             lambda c: c.discount_product(mult_by, discount),
             lambda ts: spread(lambda v, t: gcd.discount_product(mult_by, v, target=t),
                               discount, (rows_per_block, m, o), ts)),
            (f"seed 003 normalize ({rows}, {n}) f32", a.nbytes * 2,
             lambda c: c.normalize(a),
             lambda ts: spread(lambda v, t: gcd.normalize(v, target=t), a, (norm_rows, n), ts)),
        ]
        table: List[Tuple[str, str, float, float]] = []
        with gpucompute.Client(targets[0], timeout=3600) as client:
            plain = []
            for name, nbytes, call, _ in jobs:
                seconds, out = best_of(args.reps, lambda: np.asarray(call(client)))
                plain.append(out)
                table.append((name, "plain client, 1 server", seconds, nbytes / seconds / 1e9))
        for count in sorted({1, len(targets)}):
            cluster: Optional[Any] = None
            if distributed is not None:
                cluster = distributed.LocalCluster(n_workers=count, threads_per_worker=args.threads,
                                                   processes=False, dashboard_address=None)
                dc = distributed.Client(cluster)
                dc.register_worker_plugin(gcd.Servers({i: t for i, t in enumerate(targets)}))
                how = f"dask, {count} server(s) x {args.threads} threads"
            else:
                how = f"dask threads, {count} server(s) x {args.threads}"
            try:
                for (name, nbytes, _, make), want in zip(jobs, plain):
                    def run() -> np.ndarray:
                        if cluster is None:
                            return np.asarray(make(targets[:count]).compute(
                                scheduler="threads", num_workers=count * args.threads))
                        return np.asarray(dc.compute(make(targets[:1])).result())
                    seconds, out = best_of(args.reps, run)
                    assert np.array_equal(out, want), f"{name}: {how} differs from the plain client"
                    table.append((name, how, seconds, nbytes / seconds / 1e9))
            finally:
                if cluster is not None:
                    dc.close()
                    cluster.close()
        width = max(len(r[0]) for r in table)
        print(f"{'job'.ljust(width)}  {'how':34} {'seconds':>8} {'GB/s':>7}")
        for name, how, seconds, rate in table:
            print(f"{name.ljust(width)}  {how:34} {seconds:8.3f} {rate:7.2f}")
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
