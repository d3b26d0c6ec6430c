#!/usr/bin/env python3
"""Seed 004: the GTC talk's Lomb-Scargle periodogram (scipy.signal.lombscargle).

The talk ported SciPy's lombscargle to Numba and a CuPy RawKernel (now
cupyx.scipy.signal.lombscargle) on a V100 with "input size 2^10, output size 2^20":
the test signal of SciPy's documentation, 2^10 points on linspace(0.01, 10 pi) of which
those with a uniform random r >= 0.9 are kept (about a tenth), y = A cos(w x + phi)
with A = 2, w = 1, phi = pi / 2, and 2^20 angular frequencies on linspace(0.01, 10).
SciPy took ~3.8 s; the GPU versions were thousands of times faster after caching the
compiled kernels, one kernel per dtype (no implicit casts), fast math and a precompiled
fatbin (no JIT on the first pass).

Here the frequencies are a FrequencyGrid generated on the server (nothing but three
numbers travel), in float32 and float64, each timed on its first pass and on average,
and checked against scipy.signal.lombscargle with explicit float64 frequencies (the
talk's own check: assert_allclose(cpu, gpu, 1e-3)).

    python examples/seed004_lombscargle.py --target localhost:50051 [--freqs 1048576]
"""
import sys
import time

import numpy as np

from _common import Checks, connect, ms, parser, shared_array, timing_line


def make_signal(n_in, seed):
    rng = np.random.default_rng(seed)
    A, w, phi, frac_points = 2.0, 1.0, 0.5 * np.pi, 0.9
    r = rng.random(n_in)
    x = np.linspace(0.01, 10 * np.pi, n_in)
    x = x[r >= frac_points]
    y = A * np.cos(w * x + phi)
    return x, y


def main():
    p = parser(__doc__)
    p.add_argument("--samples", type=int, default=2 ** 10, help="input points before the "
                   "r >= 0.9 selection (2^10)")
    p.add_argument("--freqs", type=int, default=2 ** 20, help="output frequencies (2^20)")
    p.add_argument("--repeats", type=int, default=5, help="passes after the first")
    p.add_argument("--seed", type=int, default=4)
    args = p.parse_args()
    client, _ = connect(args)
    import gpucompute as gc
    from scipy import signal
    checks = Checks()

    x, y = make_signal(args.samples, args.seed)
    grid = gc.FrequencyGrid(0.01, 10.0, args.freqs)
    f64 = grid.numpy(np.float64)
    print(f"\n== {len(x)} samples (of {args.samples}, r >= 0.9), {args.freqs} frequencies on "
          f"linspace(0.01, 10)")
    t0 = time.perf_counter()
    reference = signal.lombscargle(x, y, f64)
    scipy_s = time.perf_counter() - t0
    peak = f64[np.argmax(reference)]
    print(f"scipy.signal.lombscargle, float64, on this host: {ms(scipy_s)}; peak at "
          f"w = {peak:.4f} (the signal's w = 1)")

    for dtype, rtol in ((np.float32, 1e-3), (np.float64, 1e-8)):
        name = np.dtype(dtype).name
        xs, ys = x.astype(dtype), y.astype(dtype)
        pgram, first = client.lombscargle(xs, ys, grid, return_timing=True)
        later = [client.lombscargle(xs, ys, grid, return_timing=True)[1]
                 for _ in range(max(1, args.repeats))]
        avg_compute = sum(t.compute for t in later) / len(later)
        avg_wall = sum(t.wall for t in later) / len(later)
        print(f"{name}: first pass {timing_line(first)}")
        print(f"{name}: average of {len(later)}: compute {ms(avg_compute)}, client wall "
              f"{ms(avg_wall)}; speed-up vs SciPy {scipy_s / avg_wall:.1f}x end to end, "
              f"{scipy_s / max(avg_compute, 1e-9):.1f}x device compute")
        atol = rtol * np.max(np.abs(reference))
        err = np.max(np.abs(pgram.astype(np.float64) - reference) / (atol + rtol *
                                                                      np.abs(reference)))
        checks(f"{name} periodogram matches scipy.signal.lombscargle",
               pgram.dtype == dtype and pgram.shape == reference.shape and err <= 1.0,
               f"rtol {rtol:g}: worst |diff| / tolerance {err:.2e}; peak at "
               f"{f64[np.argmax(pgram)]:.4f}")

    # Same host: samples in, periodogram out through shared memory.
    xs = shared_array(client, x.shape)
    if xs is not None:
        ys, out = client.shared_array(y.shape), client.shared_array(reference.shape)
        xs[...], ys[...] = x, y
        client.lombscargle(xs, ys, grid, out=out)
        _, t = client.lombscargle(xs, ys, grid, out=out, return_timing=True)
        print(f"float64, shared memory in and out: {timing_line(t)}")
        checks("float64 periodogram in shared memory matches SciPy",
               np.allclose(out, reference, rtol=1e-8, atol=1e-8 * np.max(np.abs(reference))))
        for a in (xs, ys, out):
            client.free_shared(a)

    # The explicit-array path too (what SciPy takes), on a slice of the frequencies.
    m = min(args.freqs, 4096)
    pg = client.lombscargle(x, y, f64[:m], precenter=True, normalize=True)
    # SciPy 1.15's precenter is exactly y - y.mean() going in (SciPy < 1.15 normalized by
    # the uncentered y.y; SciPy >= 1.17 deprecates the argument for this substitution).
    ref = signal.lombscargle(x, y - y.mean(), f64[:m], normalize=True)
    checks("explicit float64 freqs, precenter + normalize, matches SciPy",
           np.allclose(pg, ref, rtol=1e-8, atol=1e-10))
    checks.exit()


if __name__ == "__main__":
    sys.exit(main())
