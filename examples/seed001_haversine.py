#!/usr/bin/env python3
"""Seed 001: haversine distances over a lat/lon mesh made where the computation runs.

The thread built a 1000 x 1000 mesh from linspace(29, 31) x linspace(99, 101) on the
host and copied four 8 MB arrays to the GPU (11.4 ms H2D, 5.9 ms kernel, 3.3 ms D2H);
passing the point (30, 101) as scalars halved the H2D, and generating the mesh inside
the kernel removed it. Here the server generates the mesh (HaversineGrid mesh mode): the
request is a few numbers, only the result travels. For contrast the same mesh is also
built on this host and sent as points.

The seed's formula, atan2(a, 1 - a), is not the haversine distance; this computes
2 R atan2(sqrt(h), sqrt(1 - h)) and checks it against a NumPy float64 haversine written
as 2 R arcsin(sqrt(h)).

    python examples/seed001_haversine.py --target localhost:50051 [--n 1000]
"""
import sys
import time

import numpy as np

from _common import Checks, connect, ms, parser, shared_array, timing_line

R_KM = 6371.0088


def numpy_haversine(lat, lon, ref_lat, ref_lon, radius=R_KM):
    lat, lon = np.radians(lat), np.radians(lon)
    rlat, rlon = np.radians(ref_lat), np.radians(ref_lon)
    h = np.sin((lat - rlat) / 2) ** 2 + np.cos(lat) * np.cos(rlat) * np.sin((lon - rlon) / 2) ** 2
    return 2 * radius * np.arcsin(np.sqrt(h))


def main():
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=1000, help="mesh points per axis (1000)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per variant")
    args = p.parse_args()
    n = args.n
    client, _ = connect(args)
    import gpucompute as gc
    checks = Checks()
    ref = (30.0, 101.0)

    lat = np.linspace(29, 31, n)
    lon = np.linspace(99, 101, n)
    t0 = time.perf_counter()
    expected = numpy_haversine(lat[:, None], lon[None, :], *ref)
    numpy_s = time.perf_counter() - t0

    print(f"\n== {n} x {n} mesh, lat linspace(29, 31) x lon linspace(99, 101), "
          f"distance to {ref} in km")
    for dtype, tol in ((np.float64, 1e-9), (np.float32, 2e-6)):
        name = np.dtype(dtype).name
        best = None
        for _ in range(max(1, args.repeats)):
            d, t = client.haversine_grid(gc.LatLonMesh(29, 31, n, 99, 101, n), ref, dtype=dtype,
                                         return_timing=True)
            if best is None or t.wall < best.wall:
                best = t
        print(f"server-generated mesh, {name}: {timing_line(best)}")
        grid = d[0]
        err = np.max(np.abs(grid - expected)) / np.max(expected)
        print(f"  result {d.shape} {d.dtype}: min {grid.min():.4f} km at "
              f"{np.unravel_index(grid.argmin(), grid.shape)}, max {grid.max():.4f} km; "
              f"max relative error vs NumPy float64 {err:.2e}")
        checks(f"{name} mesh matches NumPy haversine", d.shape == (1, n, n) and err < tol,
               f"{err:.2e} < {tol:g}")
        checks(f"{name} mesh sent no input", best.transfer_in < 1e-3,
               f"transfer_in {ms(best.transfer_in)}")
        out = shared_array(client, (1, n, n), dtype)
        if out is not None:  # the same, written into shared memory instead of streamed
            mesh = gc.LatLonMesh(29, 31, n, 99, 101, n)
            best = min((client.haversine_grid(mesh, ref, dtype=dtype, out=out,
                                              return_timing=True)[1]
                        for _ in range(max(1, args.repeats))), key=lambda t: t.wall)
            print(f"  into shared memory, {name}: {timing_line(best)}")
            err = np.max(np.abs(out[0] - expected)) / np.max(expected)
            checks(f"{name} mesh in shared memory matches NumPy", err < tol,
                   f"{err:.2e} < {tol:g}")
            client.free_shared(out)

    # The thread's first version: the mesh built here and shipped as points.
    xv, yv = np.meshgrid(lat, lon, indexing="ij")
    best = None
    for _ in range(max(1, args.repeats)):
        d_pts, t = client.haversine_points(xv, yv, ref, return_timing=True)
        if best is None or t.wall < best.wall:
            best = t
    print(f"host-built mesh sent as points ({(xv.nbytes + yv.nbytes) / 1e6:.1f} MB in): "
          f"{timing_line(best)}")
    err = np.max(np.abs(d_pts[0] - expected)) / np.max(expected)
    checks("points mode matches NumPy haversine", err < 1e-9, f"{err:.2e} < 1e-09")

    a = np.sin(np.radians(lat[:, None] - ref[0]) / 2) ** 2 + np.cos(np.radians(lat[:, None])) * \
        np.cos(np.radians(ref[0])) * np.sin(np.radians(lon[None, :] - ref[1]) / 2) ** 2
    seed = np.arctan2(a, 1 - a)
    print(f"NumPy float64 on this host: {ms(numpy_s)}. (The seed's atan2(a, 1 - a) with "
          f"R = 1 gives {seed[0, 0]:.3e} at (29, 99), where the distance is "
          f"{expected[0, 0] / R_KM:.3e} radians.)")
    checks.exit()


if __name__ == "__main__":
    sys.exit(main())
