#!/usr/bin/env python3
"""The same-host path from plain NumPy arrays, against local CuPy from the same arrays.

Each seed runs from ordinary NumPy arrays (no shared_array, no change to caller code)
through three paths, in one process and one run, median wall time of --reps calls:

  shm     gpucompute.Client(target): large arrays go through the client's shared-memory
          pool (the server must run on this host with --allow_shared_memory)
  grpc    gpucompute.Client(target, shared_memory=False): the same call over gRPC
  cupy    CuPy on this process's GPU from the same NumPy arrays: cp.asarray, compute,
          .get() into a new NumPy array (what the client returns)

  seed 003  ten 10M float32 rows, each divided by its sum (goal: shm <= 1.1 x cupy)
  seed 000  (4000, 5) x (100, 4000, 5) float64 discount product
  seed 001  1000 x 1000 lat/lon mesh to (30, 101), float64: haversine_points from the
            NumPy mesh arrays, and haversine_grid (the mesh made on the server)
  seed 004  Lomb-Scargle, 2^10 float64 samples x 2^20 frequencies given as an array
            (cupyx.scipy.signal.lombscargle)

Every result is checked against CuPy's before it is timed.

    build/server/gpucompute-server --allow_shared_memory --address=127.0.0.1:50161 &
    python3 bench/same_host.py --target 127.0.0.1:50161 [--reps 10]
or let it start the server: python3 bench/same_host.py --server build/server/gpucompute-server
"""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client" / "python"))
import gpucompute  # noqa: E402
from harness import median_ms, start_server  # noqa: E402

R_KM = 6371.0088


def cupy_haversine(cp, lat, lon, ref):
    lat, lon = cp.radians(lat), cp.radians(lon)
    rlat, rlon = np.radians(ref[0]), np.radians(ref[1])
    h = cp.sin((lat - rlat) / 2) ** 2 + cp.cos(lat) * np.cos(rlat) * cp.sin((lon - rlon) / 2) ** 2
    return 2 * R_KM * cp.arcsin(cp.sqrt(h))


def seeds(cp, rng):
    """(name, shm/grpc call taking a client, CuPy call, rtol) per case, on NumPy arrays."""
    import cupyx.scipy.signal as cusignal

    x003 = rng.random((10, 10_000_000), dtype=np.float32)
    f000, v000 = rng.uniform(0.5, 1, (4000, 5)), rng.uniform(-1, 1, (100, 4000, 5))
    lat1, lon1 = np.meshgrid(np.linspace(29, 31, 1000), np.linspace(99, 101, 1000),
                             indexing="ij")
    mesh = gpucompute.LatLonMesh(29, 31, 1000, 99, 101, 1000)
    t004 = np.sort(rng.uniform(0, 100, 1 << 10))
    y004 = np.sin(1.3 * t004) + 0.1 * rng.standard_normal(t004.size)
    f004 = np.linspace(0.01, 10, 1 << 20)

    def cupy_003():
        d = cp.asarray(x003)
        cp.divide(d, d.sum(axis=1, keepdims=True, dtype=cp.float64), out=d, casting="unsafe")
        return d.get()

    return [
        ("seed 003 normalize", lambda c: c.normalize(x003), cupy_003, 1e-5),
        ("seed 000 discount", lambda c: c.discount_product(f000, v000),
         lambda: (cp.asarray(f000) * cp.asarray(v000)).get(), 0),
        ("seed 001 points", lambda c: c.haversine_points(lat1, lon1, (30, 101))[0],
         lambda: cupy_haversine(cp, cp.asarray(lat1), cp.asarray(lon1), (30, 101)).get(),
         1e-9),
        ("seed 001 grid", lambda c: c.haversine_grid(mesh, (30, 101))[0],
         lambda: cupy_haversine(cp, cp.asarray(lat1), cp.asarray(lon1), (30, 101)).get(),
         1e-9),
        ("seed 004 lombscargle", lambda c: c.lombscargle(t004, y004, f004, method="direct"),
         lambda: cusignal.lombscargle(cp.asarray(t004), cp.asarray(y004),
                                      cp.asarray(f004)).get(), 1e-6),
    ]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", help="a server on this host with --allow_shared_memory "
                   "(default: $GPUCOMPUTE_TARGET)")
    p.add_argument("--server", help="start this gpucompute-server binary instead")
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args()
    import cupy as cp

    proc = None
    target = args.target
    if args.server:
        proc, target = start_server(args.server)
    try:
        shm = gpucompute.Client(target, timeout=300)
        grpc = gpucompute.Client(target, timeout=300, shared_memory=False)
        info = shm.info()
        if not info.raw.limits.shared_memory:
            sys.exit("the server runs without --allow_shared_memory: nothing to measure")
        print(f"server {info.version}: backend {info.backend} on "
              f"{info.devices[0].description if info.devices else '?'}; CuPy {cp.__version__} "
              f"on {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}", flush=True)
        rows = []
        for name, call, cupy_call, rtol in seeds(cp, np.random.default_rng(3)):
            expected = cupy_call()
            for client in (shm, grpc):
                got = call(client)
                scale = np.abs(expected).max()
                err = np.abs(np.asarray(got, np.float64) - expected).max() / scale
                assert err <= max(rtol, 1e-15), f"{name}: relative error {err:.2e}"
            t_shm = median_ms(lambda: call(shm), args.reps)
            t_grpc = median_ms(lambda: call(grpc), args.reps)
            t_cupy = median_ms(cupy_call, args.reps)
            rows.append((name, t_shm, t_grpc, t_cupy))
            print(f"  {name}: shm {t_shm:.1f} ms, grpc {t_grpc:.1f} ms, cupy {t_cupy:.1f} ms",
                  flush=True)
        shm.close()
        grpc.close()
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    print()
    header = ("case", "shm ms", "grpc ms", "cupy ms", "shm/cupy", "goal")
    table = [header] + [(n, f"{a:.1f}", f"{b:.1f}", f"{c:.1f}", f"{a / c:.2f}",
                         "<= 1.10" if n.startswith("seed 003") else "")
                        for n, a, b, c in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    seed003 = next(r for r in rows if r[0].startswith("seed 003"))
    met = seed003[1] <= 1.1 * seed003[3]
    print(f"seed 003 from plain NumPy within 1.1 x local CuPy: {'yes' if met else 'NO'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
