#!/usr/bin/env python3
"""Discount product over a large input through the Python client, two ways (issue #12,
inputs larger than the GPU):

  streaming   one StreamingCompute call (stream_discount_product): input chunks in,
              result chunks out, bounded server memory; "streaming xK": a client of K
              stripes (--stripes), K calls at once over ranges of rows;
  round trip  the way without it: the input in parts of --part-bytes, each uploaded,
              multiplied (discount_product on the stored buffer, result streamed back)
              and deleted, one part after another.

Each is timed end to end from host arrays (median of --repeat) and checked on sampled
rows; GB/s counts input bytes (the same bytes go back out), and with --server-pid the
server's CPU time per GB of input.

    python3 bench/streaming_ops.py --target 127.0.0.1:50051 --bytes 8589934592 --server-pid PID \
        [--stripes 1 8]
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client" / "python"))
import gpucompute  # noqa: E402
from bulk_transfer import cpu_seconds  # noqa: E402


def timed(fn, pid):
    cpu, own, t0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, cpu_seconds(pid) - cpu, time.process_time() - own


def report(what, nbytes, samples):
    samples.sort()
    seconds, cpu, own = samples[len(samples) // 2]
    gb = nbytes / 1e9
    print(f"python {what:12s} {nbytes / 2**30:6.2f} GiB in+out each  median {seconds:7.3f} s "
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
    p.add_argument("--stripes", type=int, nargs="+", default=[1],
                   help="the streamed runs' stripe counts (the round trip: one stream)")
    args = p.parse_args()
    rows = args.bytes // 4 // args.row
    nbytes = rows * args.row * 4
    rng = np.random.default_rng(0)
    factors = rng.uniform(0.5, 1.0, args.row).astype(np.float32)
    values = np.empty((rows, args.row), np.float32)
    for begin in range(0, rows, 4096):  # cheap fill, not one huge temporary
        values[begin:begin + 4096] = rng.standard_normal((min(4096, rows - begin), args.row),
                                                         dtype=np.float32)
    out = np.empty_like(values)
    client = gpucompute.Client(args.target, timeout=1200)
    client.stream_discount_product(factors, values[:64])  # warm the connection and server
    striped = {k: gpucompute.Client(args.target, timeout=1200, stripes=k) for k in args.stripes}

    def streaming(stripes):
        striped[stripes].stream_discount_product(factors, values, out=out,
                                                 input_chunk_bytes=args.input_chunk_bytes)

    part_rows = max(1, args.part_bytes // 4 // args.row)

    def round_trip():
        for begin in range(0, rows, part_rows):
            buf = client.upload(values[begin:begin + part_rows], "part")
            client.discount_product(factors, buf, out=out[begin:begin + part_rows])
            client.delete(buf)

    runs = [(f"streaming x{k}" if k > 1 else "streaming", lambda k=k: streaming(k))
            for k in args.stripes]
    for what, fn in runs + [("round trip", round_trip)]:
        samples = []
        for _ in range(args.repeat):
            out.fill(np.nan)
            samples.append(timed(fn, args.server_pid))
            check(out, factors, values, 1024)
        report(what, nbytes, samples)


if __name__ == "__main__":
    main()
