#!/usr/bin/env python3
"""Discount product over a large input through the Python client, two ways (for
inputs larger than the GPU):

  streaming   one StreamingCompute call (stream_discount_product): input chunks in,
              result chunks out, bounded server memory; "streaming xK": a client of K
              stripes (--stripes), K calls at once over ranges of rows;
              "streaming procs xK" (--processes K): those calls in K worker processes
              (stripe_processes=True), the result in shared memory, not in one --out;
  round trip  the way without it: the input in parts of --part-bytes, each uploaded,
              multiplied (discount_product on the stored buffer, result streamed back)
              and deleted, one part after another.

Each is timed end to end from host arrays (median of --repeat) and checked on sampled
rows; GB/s counts input bytes (the same bytes go back out), and with --server-pid the
server's CPU time per GB of input.

    python3 bench/streaming_ops.py --target 127.0.0.1:50051 --bytes 8589934592 --server-pid PID \
        [--stripes 1 8] [--processes 4 8 [--stripe-array]] [--no-round-trip]

With --processes the input is an ordinary array copied into shared memory by each call
(timed) and the result a new array each time, or with --stripe-array both input and the
reused result (out=, as the thread runs have) made in Client.stripe_array; client
core-s/GB counts the workers' CPU too; the workers are started before the timed runs.
"""
import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client" / "python"))
import gpucompute  # noqa: E402
from bulk_transfer import client_cpu, cpu_seconds  # noqa: E402


def timed(fn, pid, client):
    """fn()'s (result, (seconds, server core-s, client core-s))."""
    cpu, own, t0 = cpu_seconds(pid), client_cpu(client), time.perf_counter()
    result = fn()
    return result, (time.perf_counter() - t0, cpu_seconds(pid) - cpu, client_cpu(client) - own)


def report(what, nbytes, samples):
    samples.sort()
    seconds, cpu, own = samples[len(samples) // 2]
    gb = nbytes / 1e9
    print(f"python {what:20s} {nbytes / 2**30:6.2f} GiB in+out each  median {seconds:7.3f} s "
          f"{gb / seconds:6.2f} GB/s (best {gb / samples[0][0]:.2f})  server {cpu / gb:.2f} "
          f"client {own / gb:.2f} core-s/GB", flush=True)


def check(out, factors, values, rows):
    # Sampled rows: a full check of several GiB would take longer than the run.
    sample = np.linspace(0, len(values) - 1, num=min(rows, len(values)), dtype=np.int64)
    if not np.array_equal(out[sample], factors * values[sample]):
        sys.exit("streamed result differs from factors * values")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--target", default="127.0.0.1:50051")
    p.add_argument("--bytes", type=int, default=8 << 30)
    p.add_argument("--row", type=int, default=4096, help="elements per row (factors' size)")
    p.add_argument("--part-bytes", type=int, default=1 << 30)
    p.add_argument("--input-chunk-bytes", type=int, default=2 << 20)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--server-pid", type=int, default=0)
    p.add_argument("--stripes", type=int, nargs="*", default=[1],
                   help="the streamed runs' stripe counts (the round trip: one stream)")
    p.add_argument("--processes", type=int, nargs="*", default=[],
                   help="stripe counts of streamed runs with stripes in worker processes")
    p.add_argument("--stripe-array", action="store_true",
                   help="the input made in Client.stripe_array (no copy per call)")
    p.add_argument("--no-round-trip", action="store_true", help="streamed runs only")
    args = p.parse_args()
    rows = args.bytes // 4 // args.row
    nbytes = rows * args.row * 4
    rng = np.random.default_rng(0)
    factors = rng.uniform(0.5, 1.0, args.row).astype(np.float32)
    procs = {k: gpucompute.Client(args.target, timeout=1200, stripes=k, stripe_processes=True)
             for k in args.processes}
    values = (next(iter(procs.values())).stripe_array((rows, args.row), np.float32)
              if procs and args.stripe_array else np.empty((rows, args.row), np.float32))

    def fill(begin):  # by slices on several threads, not one huge temporary
        part = np.random.default_rng(begin).standard_normal(
            (min(4096, rows - begin), args.row), dtype=np.float32)
        values[begin:begin + len(part)] = part

    with ThreadPoolExecutor(min(16, os.cpu_count() or 1)) as pool:
        list(pool.map(fill, range(0, rows, 4096)))
    out = (next(iter(procs.values())).stripe_array(values.shape, values.dtype)
           if procs and args.stripe_array else np.empty_like(values))
    client = gpucompute.Client(args.target, timeout=1200)
    client.stream_discount_product(factors, values[:64])  # warm the connection and server
    striped = {k: gpucompute.Client(args.target, timeout=1200, stripes=k) for k in args.stripes}

    def streaming(stripes):
        return striped[stripes].stream_discount_product(
            factors, values, out=out, input_chunk_bytes=args.input_chunk_bytes)

    def in_processes(stripes):
        return procs[stripes].stream_discount_product(
            factors, values, out=out if args.stripe_array else None,
            input_chunk_bytes=args.input_chunk_bytes)

    for c in procs.values():  # start the workers: what the first striped call pays
        t0 = time.perf_counter()
        c._workers.start()
        print(f"python streaming procs x{c.stripes}: workers started in "
              f"{time.perf_counter() - t0:.2f} s", flush=True)

    part_rows = max(1, args.part_bytes // 4 // args.row)

    def round_trip():
        for begin in range(0, rows, part_rows):
            buf = client.upload(values[begin:begin + part_rows], "part")
            client.discount_product(factors, buf, out=out[begin:begin + part_rows])
            client.delete(buf)
        return out

    runs = [(f"streaming x{k}" if k > 1 else "streaming", lambda k=k: streaming(k), client)
            for k in args.stripes]
    runs += [(f"streaming procs x{k}", lambda k=k: in_processes(k), procs[k])
             for k in args.processes]
    if not args.no_round_trip:
        runs.append(("round trip", round_trip, client))
    for what, fn, measured in runs:
        samples = []
        for _ in range(args.repeat):
            out.fill(np.nan)
            result, sample = timed(fn, args.server_pid, measured)
            samples.append(sample)
            check(result, factors, values, 1024)
            del result
        report(what, nbytes, samples)
    for c in procs.values():
        c.close()


if __name__ == "__main__":
    main()
