#!/usr/bin/env python3
"""Seed 000: discount products, cv[d, i, j] = multBy[i, j] * discount[d, i, j].

The thread's user mapped the whole dataset to ONE guvectorize worker (1.2 s); one thread
per element took 0.84 ms, but the three host<->device copies took ~20 ms: for an op this
light the transfers dominate, so data should stay on the device.

1. The thread's case: multBy (4000, 5), discount (100, 4000, 5) float64, checked against
   NumPy; then again with both operands stored on the server and the result kept there.
2. The user's real data: (10M, 5) factors and (200, 10M, 5) values float64 (80 GB in,
   80 GB out). Done in one request if the server's device (and buffer quota) can hold it,
   else in batches along D that fit: the factors are uploaded once and stay on the
   device; each batch of values is uploaded as a stored buffer, multiplied there, and the
   result streamed back and checked against NumPy. With --streaming each batch is one
   StreamingCompute call instead (values streamed in, results streamed out at once, with
   bounded server memory), so a batch is limited by this host's memory only; with
   --stripes K a batch runs as K such calls at once over its slices, and with
   --processes too each in its own worker process (the values then made in the
   client's stripe_array, so they reach the workers without a copy). The values are
   made and checked by slices on several threads; the calls are timed apart from that.

    python examples/seed000_discount.py --target localhost:50051 [--small]
"""
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from _common import (Checks, connect, gb, host_available_bytes, ms, parser, rate, shared_array,
                     timing_line)


def thread_case(client, checks):
    mult_by = np.arange(20000, dtype=np.float64).reshape(4000, 5)
    discount = np.arange(2000000, dtype=np.float64).reshape(100, 4000, 5)
    t0 = time.perf_counter()
    expected = mult_by * discount
    numpy_s = time.perf_counter() - t0

    print("\n== the thread's case: multBy (4000, 5) * discount (100, 4000, 5), float64")
    cv, t = client.discount_product(mult_by, discount, return_timing=True)
    print(f"inline operands (discount is {gb(discount.nbytes)}, uploaded automatically): "
          f"{timing_line(t)}")
    cv, t = client.discount_product(mult_by, discount, return_timing=True)
    print(f"again:                                                    {timing_line(t)}")
    print(f"NumPy on this host: {ms(numpy_s)}; result {cv.shape} {cv.dtype}, "
          f"cv[99, 3999, 4] = {cv[99, 3999, 4]:.6g}")
    checks("thread case equals NumPy", np.array_equal(cv, expected),
           f"max |diff| {np.max(np.abs(cv - expected)):.3g}")

    f_shared = shared_array(client, mult_by.shape)
    if f_shared is not None:  # same host: operands and result in shared memory
        d_shared = client.shared_array(discount.shape)
        out = client.shared_array(discount.shape)
        f_shared[...], d_shared[...] = mult_by, discount
        client.discount_product(f_shared, d_shared, out=out)
        _, t = client.discount_product(f_shared, d_shared, out=out, return_timing=True)
        print(f"shared memory in and out:                                 {timing_line(t)}")
        checks("shared-memory result equals NumPy", np.array_equal(out, expected))
        for a in (f_shared, d_shared, out):
            client.free_shared(a)

    with client.upload(mult_by, name="seed000 multBy") as f_dev, \
            client.upload(discount, name="seed000 discount") as d_dev:
        out_dev, t = client.discount_product(f_dev, d_dev, keep_on_device=True,
                                             return_timing=True)
        with out_dev:
            print(f"operands stored, result kept on the device ({out_dev.location}): "
                  f"{timing_line(t)}")
            back = out_dev.download()
        checks("stored-buffer result equals NumPy", np.array_equal(back, expected))
        checks("no transfer for stored operands", t.transfer_in == 0 or t.transfer_in < 1e-3,
               f"transfer_in {ms(t.transfer_in)}")


def plan_batches(info, n, d, forced_batch, kept, streaming=False, stripes=1):
    """Slices of D per batch that the server's device, its quota and this host can hold
    (kept: the result is stored too, and counts against the quota); streamed over
    stripes, a multiple of them (each call takes whole slices: equal calls)."""
    per_slice = n * 5 * 8
    factors = per_slice
    device = info.devices[0] if info.devices else None
    dev_mem = device.memory_bytes if device and device.memory_bytes else 0
    # The server's memory budget, where smaller: allocations over 1/16 of it may
    # together fill only 3/4 of it (the rest is kept for small requests).
    if device and device.memory_budget_bytes:
        dev_mem = min(dev_mem or device.memory_budget_bytes, device.memory_budget_bytes)
    quota = info.limits.buffer_quota_bytes
    host = host_available_bytes()
    # Stored on the server: factors + values batch (quota and device memory); the
    # device also holds the batch's result while it streams back.
    by_quota = (quota - factors) // (per_slice * (2 if kept else 1)) if quota > factors else 0
    by_device = int(0.7 * dev_mem - factors) // (2 * per_slice) if dev_mem else d
    # This host holds the values batch, the streamed result and one slice of check.
    by_host = int(0.6 * host - factors) // (2 * per_slice + 1)
    if streaming:  # the server holds a few chunks only: this host alone limits a batch
        by_quota = by_device = d
    fits_whole = factors + 2 * d * per_slice <= 0.7 * dev_mem and factors + d * per_slice <= quota
    batch = forced_batch or max(0, min(d, by_quota, by_device, by_host))
    if streaming and not forced_batch and batch > stripes:
        batch -= batch % stripes
    print(f"plan: factors {gb(factors)}, values and result {gb(d * per_slice)} each; "
          f"device {device.name if device else '?'} memory {gb(dev_mem)}, buffer quota "
          f"{gb(quota)}, this host {gb(host)} available")
    print(f"      whole case on the device: {'fits' if fits_whole else 'does not fit'}; "
          f"slices per batch by quota {by_quota}, by device memory {by_device}, "
          f"by host memory {by_host}" + (f", forced {forced_batch}" if forced_batch else ""))
    return batch


#: threads making and checking the full case's values (NumPy drops the GIL)
_THREADS = max(1, min(16, os.cpu_count() or 1))


def make_values(values, s, n):
    """values[d, i, j] = ((s + d) * n + i) * 5 + j, slice by slice on several threads."""
    ramp = np.arange(n * 5, dtype=np.float64).reshape(n, 5)

    def fill(d):
        np.add(ramp, float((s + d) * n * 5), out=values[d])

    with ThreadPoolExecutor(_THREADS) as pool:
        list(pool.map(fill, range(len(values))))
    return values


def matches(out, factors, values):
    """out == factors * values, slice by slice on several threads."""
    def check(d):
        return np.array_equal(out[d], np.multiply(factors, values[d]))

    with ThreadPoolExecutor(_THREADS) as pool:
        return all(pool.map(check, range(len(values))))


def streamed_batch(client, f_dev, values, out):
    """One batch as a StreamingCompute call into ``out``: (out, seconds, compute seconds)."""
    t0 = time.perf_counter()
    out, t = client.stream_discount_product(f_dev, values, out=out, return_timing=True)
    return out, time.perf_counter() - t0, t.compute


def full_case(client, info, checks, n, d, forced_batch, max_batches, streaming=False):
    print(f"\n== the user's data: factors ({n}, 5) * values ({d}, {n}, 5), float64")
    # With stripes the result is kept on the server and downloaded over them (a
    # compute result streams on one stream).
    striped = client.stripes > 1
    batch = plan_batches(info, n, d, forced_batch, kept=striped, streaming=streaming,
                         stripes=client.stripes)
    if batch < 1:
        checks("one slice of the full case fits", False, "not even one (n, 5) slice fits")
        return
    starts = list(range(0, d, batch))
    if max_batches:
        starts = starts[:max_batches]
    n_batches = -(-d // batch)
    print(f"      -> {n_batches} batch(es) of up to {batch} slice(s)"
          + (f", running the first {len(starts)}" if len(starts) < n_batches else ""))

    factors = np.arange(n * 5, dtype=np.float64).reshape(n, 5)
    # One values and one result array for every batch (memory touched once), in the
    # client's stripe_array: shared with its stripe processes, if it has them.
    values_memory = client.stripe_array((min(batch, d), n, 5))
    out_memory = client.stripe_array((min(batch, d), n, 5)) if streaming else None
    totals = dict(upload=0.0, compute=0.0, wall=0.0, bytes=0, ok=True, make=0.0, check=0.0)
    t_all = time.perf_counter()
    with client.upload(factors, name="seed000 factors") as f_dev:
        print(f"factors uploaded once: {f_dev}")
        for i, s in enumerate(starts):
            e = min(s + batch, d)
            t0 = time.perf_counter()
            values = make_values(values_memory[:e - s], s, n)
            totals["make"] += time.perf_counter() - t0
            if streaming:
                out, wall, compute = streamed_batch(client, f_dev, values, out_memory[:e - s])
                t0 = time.perf_counter()
                ok = matches(out, factors, values)
                totals["check"] += time.perf_counter() - t0
                totals["compute"] += compute
                totals["wall"] += wall
                totals["bytes"] += values.nbytes
                totals["ok"] &= ok
                print(f"batch {i + 1}/{len(starts)} d[{s}:{e}]: streamed {gb(values.nbytes)} in "
                      f"and out in {ms(wall)} ({rate(values.nbytes, wall)} each way), compute "
                      f"{ms(compute)}, check {'ok' if ok else 'MISMATCH'}")
                del out, values
                continue
            t0 = time.perf_counter()
            with client.upload(values, name=f"seed000 values {s}:{e}") as v_dev:
                up_s = time.perf_counter() - t0
                out, t = client.discount_product(f_dev, v_dev, return_timing=True,
                                                 keep_on_device=striped)
                wall = t.wall
                if striped:
                    t0 = time.perf_counter()
                    with out as out_dev:
                        out = out_dev.download()
                    wall += time.perf_counter() - t0
            t0 = time.perf_counter()
            ok = matches(out, factors, values)
            totals["check"] += time.perf_counter() - t0
            nbytes = values.nbytes
            totals["upload"] += up_s
            totals["compute"] += t.compute
            totals["wall"] += up_s + wall
            totals["bytes"] += nbytes
            totals["ok"] &= ok
            back_s = max(wall - t.queue - t.compute, 1e-9)  # the rest: the stream back
            print(f"batch {i + 1}/{len(starts)} d[{s}:{e}]: upload {gb(nbytes)} in {ms(up_s)} "
                  f"({rate(nbytes, up_s)}), compute {ms(t.compute)}, result {gb(out.nbytes)} "
                  f"back in {ms(back_s)} ({rate(out.nbytes, back_s)}), check "
                  f"{'ok' if ok else 'MISMATCH'}")
            del out, values
    elapsed = time.perf_counter() - t_all
    # The calls alone (upload, compute, result back) apart from making and checking
    # the data here (NumPy, on several threads).
    print(f"full case: {gb(totals['bytes'])} in and out in {elapsed:.2f} s, of which the "
          f"calls {totals['wall']:.2f} s ({rate(totals['bytes'], totals['wall'])} each way); "
          f"upload {totals['upload']:.2f} s, device compute {totals['compute']:.3f} s "
          f"({100 * totals['compute'] / max(elapsed, 1e-9):.1f}% of the time: the transfers "
          f"dominate, as the thread's answer said); making the values {totals['make']:.2f} s "
          f"and checking the results {totals['check']:.2f} s on {_THREADS} threads")
    checks(f"full case ({len(starts)} batch(es)) equals NumPy", totals["ok"])


def main():
    p = parser(__doc__)
    p.add_argument("--small", action="store_true",
                   help="a tiny full case for tests: --n 20000 --d 12 --batch 5")
    p.add_argument("--n", type=int, default=10_000_000, help="rows of the full case (10M)")
    p.add_argument("--d", type=int, default=200, help="D of the full case (200)")
    p.add_argument("--batch", type=int, default=0,
                   help="slices of D per batch (default: as many as fit)")
    p.add_argument("--max-batches", type=int, default=0, help="stop after this many batches")
    p.add_argument("--skip-full", action="store_true", help="only the thread's case")
    p.add_argument("--streaming", action="store_true",
                   help="the full case's batches as StreamingCompute calls")
    args = p.parse_args()
    if args.small:
        args.n, args.d, args.batch = 20000, 12, args.batch or 5

    client, info = connect(args)
    checks = Checks()
    thread_case(client, checks)
    if not args.skip_full:
        full_case(client, info, checks, args.n, args.d, args.batch, args.max_batches,
                  args.streaming)
    leftovers = [b for b in client.list_buffers() if b.name.startswith("seed000")]
    checks("stored buffers cleaned up", not leftovers, f"{len(leftovers)} left")
    checks.exit()


if __name__ == "__main__":
    sys.exit(main())
