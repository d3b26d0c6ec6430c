#!/usr/bin/env python3
"""Seed 002: why is the first call slow?

With CuPy or Numba the first call of a function pays JIT compilation and module
loading; later calls are fast. gpucompute compiles its kernels ahead of time and loads
and warms them before it reports SERVING, so on a freshly started server the first
request of each operation (and dtype) should cost what the later ones do.

For every operation and dtype this sends one first request and then --repeats more,
and prints the first request's server time (accepted -> trailer, so that connection
set-up on the client side does not count), the median of the later ones and the ratio;
client wall times are shown too. Run it against a freshly started server; the check
fails when a first request costs more than --max-ratio times the later median
(plus --slack-ms, for timer noise on tiny requests).

    python examples/seed002_first_call.py --target localhost:50051
"""
import statistics
import sys

import numpy as np

from _common import Checks, connect, ms, parser, shared_array


def operations(gc, scale):
    """(label, dtype, call(client, dtype)) for each op; inputs made once per dtype."""
    rng = np.random.default_rng(2)
    m = max(10, int(4000 * scale))
    n_mesh = max(10, int(1000 * scale))
    n_norm = max(10, int(1_000_000 * scale))
    n_freq = max(16, int(2 ** 16 * scale))
    data = {}
    for dt in (np.float32, np.float64):
        x = np.sort(rng.uniform(0, 10, 1024)).astype(dt)
        data[dt] = dict(
            factors=rng.random((m, 5)).astype(dt), values=rng.random((10, m, 5)).astype(dt),
            rows=rng.random((10, n_norm // 10)).astype(dt),
            x=x, y=np.cos(x + 0.5).astype(dt))
    ops = [
        ("DiscountProduct", lambda c, dt: c.discount_product(
            data[dt]["factors"], data[dt]["values"], return_timing=True)),
        ("HaversineGrid", lambda c, dt: c.haversine_grid(
            gc.LatLonMesh(29, 31, n_mesh, 99, 101, n_mesh), (30, 101), dtype=dt,
            return_timing=True)),
        ("Normalize", lambda c, dt: c.normalize(data[dt]["rows"], return_timing=True)),
        ("LombScargle", lambda c, dt: c.lombscargle(
            data[dt]["x"], data[dt]["y"], gc.FrequencyGrid(0.01, 10, n_freq),
            return_timing=True)),
    ]
    return ops


def main():
    p = parser(__doc__)
    p.add_argument("--repeats", type=int, default=10, help="later requests per op and dtype")
    p.add_argument("--scale", type=float, default=1.0, help="input size factor (tests: 0.05)")
    p.add_argument("--max-ratio", type=float, default=3.0)
    p.add_argument("--slack-ms", type=float, default=5.0)
    args = p.parse_args()
    client, info = connect(args)
    import gpucompute as gc
    checks = Checks()
    print(f"\n{'operation':<16} {'dtype':<8} {'first (server)':>15} {'later median':>13} "
          f"{'ratio':>6}   {'first (wall)':>13} {'later (wall)':>13}")
    for label, call in operations(gc, args.scale):
        for dt in (np.float32, np.float64):
            _, first = call(client, dt)
            later = [call(client, dt)[1] for _ in range(max(1, args.repeats))]
            med = statistics.median(t.total for t in later)
            med_wall = statistics.median(t.wall for t in later)
            ratio = first.total / med if med > 0 else float("inf")
            name = np.dtype(dt).name
            print(f"{label:<16} {name:<8} {ms(first.total):>15} {ms(med):>13} {ratio:>6.2f}   "
                  f"{ms(first.wall):>13} {ms(med_wall):>13}")
            ok = first.total <= args.max_ratio * med + args.slack_ms * 1e-3
            checks(f"{label} {name}: first request costs what later ones do", ok,
                   f"first {ms(first.total)}, later {ms(med)}, ratio {ratio:.2f}")
    print("(server time = accepted -> trailer sent, from each result's trailer; wall = as "
          "this client saw it, including the stream)")
    rows = shared_array(client, (10, max(10, int(1_000_000 * args.scale)) // 10), np.float32)
    if rows is not None:  # same host: the Normalize of the table, through shared memory
        rows[...] = np.random.default_rng(2).random(rows.shape, dtype=np.float32)
        out = client.shared_array(rows.shape, np.float32)
        first = client.normalize(rows, out=out, return_timing=True)[1]
        later = [client.normalize(rows, out=out, return_timing=True)[1]
                 for _ in range(max(1, args.repeats))]
        print(f"{'Normalize shm':<16} {'float32':<8} {ms(first.total):>15} "
              f"{ms(statistics.median(t.total for t in later)):>13} {'':>6}   "
              f"{ms(first.wall):>13} {ms(statistics.median(t.wall for t in later)):>13}")
        checks("Normalize through shared memory: rows sum to 1",
               bool(np.allclose(out.sum(axis=1, dtype=np.float64), 1, atol=1e-4)))
        client.free_shared(rows)
        client.free_shared(out)
    checks.exit()


if __name__ == "__main__":
    sys.exit(main())
