#!/usr/bin/env python3
"""Seed 003: streams and events: normalize a <- a / sum(a) for ten 10M-element float32
arrays.

The tutorial ran one CUDA stream per array so that the copies and kernels of different
arrays overlap, with pinned host memory for the copies and CUDA events for honest GPU
timing (a host timer measures more than the GPU). Here the ten arrays go to the server
(1) as one batched (10, 10M) Normalize request, whose rows are normalized along the
last axis, (1b) the same from and into Client.shared_array memory when the client
runs on the server's host (nothing crosses gRPC), and (2) as ten concurrent requests from ten threads, which the server's
executor runs side by side. Each result reports its own timing breakdown: queue,
transfer in, compute (device time on a GPU), transfer out, the server's total, and the
client's wall time.

Checks: every row sums to 1 (in float64, within 1e-4) and matches NumPy's
a / a.sum(dtype=float64) to float32 precision.

    python examples/seed003_normalize.py --target localhost:50051 [--size 10000000]
"""
import sys
import threading
import time

import numpy as np

from _common import Checks, connect, gb, ms, parser, rate, shared_array, timing_line


def check_rows(checks, label, out, arrays):
    sums = out.astype(np.float64).sum(axis=-1)
    print(f"  {label} row sums: " + " ".join(f"{s:.7f}" for s in np.atleast_1d(sums)))
    checks(f"{label}: every row sums to 1", bool(np.all(np.abs(sums - 1) < 1e-4)),
           f"max |sum - 1| {np.max(np.abs(sums - 1)):.2e}")
    worst = 0.0
    for row, a in zip(out.reshape(len(arrays), -1), arrays):
        ref = a / a.sum(dtype=np.float64)
        worst = max(worst, float(np.max(np.abs(row - ref) / np.abs(ref).max())))
    checks(f"{label}: matches NumPy a / a.sum()", worst < 1e-6, f"max rel. error {worst:.2e}")


def main():
    p = parser(__doc__)
    p.add_argument("--size", type=int, default=10_000_000, help="elements per array (10M)")
    p.add_argument("--count", type=int, default=10, help="arrays (10)")
    args = p.parse_args()
    client, _ = connect(args)
    checks = Checks()
    rng = np.random.default_rng(3)
    arrays = [rng.random(args.size, dtype=np.float32) for _ in range(args.count)]
    batch = np.stack(arrays)
    nbytes = batch.nbytes
    print(f"\n== {args.count} arrays of {args.size} float32 ({gb(nbytes)} in all)")

    # 1. one batched request
    out, t = client.normalize(batch, return_timing=True)
    print(f"batched ({args.count}, {args.size}) request: {timing_line(t)}")
    print(f"  end to end {rate(2 * nbytes, t.wall)} (in and out)")
    check_rows(checks, "batched", out, arrays)
    del out

    # 1b. the same from and into shared memory (same host: no bytes over gRPC)
    shared = shared_array(client, batch.shape, np.float32)
    if shared is not None:
        shared[...] = batch
        shared_out = client.shared_array(batch.shape, np.float32)
        client.normalize(shared, out=shared_out)  # the first call pins nothing new: warm
        _, t = client.normalize(shared, out=shared_out, return_timing=True)
        print(f"batched, shared memory in and out: {timing_line(t)}")
        check_rows(checks, "shared memory", shared_out, arrays)
        client.free_shared(shared)
        client.free_shared(shared_out)
        del shared, shared_out

    # 2. ten concurrent requests
    results = [None] * args.count
    errors = []

    def work(i):
        try:
            results[i] = client.normalize(arrays[i], return_timing=True)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(args.count)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    checks("concurrent requests all succeeded", not errors, "; ".join(map(str, errors)))
    if errors:
        checks.exit()
    print(f"{args.count} concurrent requests: {ms(wall)} wall for all "
          f"({rate(2 * nbytes, wall)} in and out)")
    for i, (_, ti) in enumerate(results):
        print(f"  request {i}: {timing_line(ti)}")
    compute = sum(ti.compute for _, ti in results)
    print(f"  sum of device compute {ms(compute)}; sum of server totals "
          f"{ms(sum(ti.total for _, ti in results))} vs {ms(wall)} wall: requests overlapped")
    stacked = np.stack([r for r, _ in results])
    check_rows(checks, "concurrent", stacked, arrays)
    checks.exit()


if __name__ == "__main__":
    sys.exit(main())
