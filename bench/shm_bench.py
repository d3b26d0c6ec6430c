#!/usr/bin/env python3
"""Same-host zero copy side by side with local CuPy, in one GPU-machine run.

Against a CUDA server started with --allow_shared_memory on this host, from warm
clients, median wall time of each case (the ratio is gpucompute / CuPy; goals below):

  ceiling   pinned PCIe bandwidth, CuPy cudaMemcpy from/to cudaMallocHost memory
  region    host<->device through a registered region: the server's transfer_in /
            transfer_out of a 1 GiB Normalize from and into shared_array memory
            (goal: >= 85% of the ceiling)
  seed 003  ten 10M float32 rows normalized, from and into shared_array memory
            (goal: <= 30 ms); CuPy from the same host arrays: asarray, normalize, get
  seed 000  (4000, 5) x (100, 4000, 5) float64 discount product, shared_array in and
            out (goal: no slower than CuPy from the same host arrays)
  seed 001  1000 x 1000 haversine mesh, float64, into shared_array (goal: no slower
            than CuPy building the mesh and copying it back)
  ipc 003   seed 003 from CuPy arrays through CUDA IPC, out= a CuPy array (goal:
            <= 2 ms); CuPy doing the same on its own arrays
  grpc      seeds 000 and 001 through plain NumPy arrays (the copy over gRPC), for scale

Every result is checked against NumPy (or CuPy) before it is timed.

    python3 bench/shm_bench.py --target 127.0.0.1:50161 [--reps 15]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client" / "python"))
import gpucompute  # noqa: E402
from harness import median_ms  # noqa: E402

R_KM = 6371.0088


def cupy_haversine(cp, n, ref):
    lat = cp.radians(cp.linspace(29, 31, n))[:, None]
    lon = cp.radians(cp.linspace(99, 101, n))[None, :]
    rlat, rlon = np.radians(ref[0]), np.radians(ref[1])
    h = cp.sin((lat - rlat) / 2) ** 2 + cp.cos(lat) * np.cos(rlat) * cp.sin((lon - rlon) / 2) ** 2
    return 2 * R_KM * cp.arcsin(cp.sqrt(h))


def pinned_ceiling(cp, nbytes, reps):
    """GB/s of cudaMemcpy host->device and device->host with pinned host memory."""
    import cupyx
    host = cupyx.empty_pinned((nbytes // 4,), np.float32)
    dev = cp.empty((nbytes // 4,), np.float32)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    out = []
    for kind in (cp.cuda.runtime.memcpyHostToDevice, cp.cuda.runtime.memcpyDeviceToHost):
        times = []
        for _ in range(reps):
            start.record()
            if kind == cp.cuda.runtime.memcpyHostToDevice:
                cp.cuda.runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, nbytes, kind, 0)
            else:
                cp.cuda.runtime.memcpyAsync(host.ctypes.data, dev.data.ptr, nbytes, kind, 0)
            stop.record()
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
        out.append(nbytes / statistics.median(times) / 1e9)
    return out


class Table:
    def __init__(self):
        self.rows = []
        self.failed = []

    def add(self, case, ours, theirs, goal, ok, unit="ms"):
        ratio = f"{ours / theirs:.2f}" if theirs else "-"
        verdict = "PASS" if ok else "MISS"
        if not ok:
            self.failed.append(case)
        self.rows.append((case, f"{ours:.2f} {unit}", f"{theirs:.2f} {unit}" if theirs else "-",
                          ratio, goal, verdict))
        print(f"  {case}: gpucompute {ours:.3f} {unit}, reference {theirs:.3f} {unit}, "
              f"ratio {ratio}, goal {goal}: {verdict}", flush=True)

    def show(self):
        widths = [max(len(str(r[i])) for r in self.rows + [self.header()]) for i in range(6)]
        for row in [self.header()] + self.rows:
            print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))

    @staticmethod
    def header():
        return ("case", "gpucompute", "CuPy / ceiling", "ratio", "goal", "")


def bandwidth(gc, cp, table, nbytes, reps):
    """Pinned ceiling vs host<->device through a registered region."""
    nbytes = nbytes // (16 * 4) * (16 * 4)
    h2d_ceiling, d2h_ceiling = pinned_ceiling(cp, nbytes, 5)
    x = gc.shared_array((16, nbytes // 64), np.float32)
    x[...] = 1.0
    out = gc.shared_array(x.shape, np.float32)
    ins, outs = [], []
    for i in range(max(5, reps // 2)):
        _, t = gc.normalize(x, out=out, return_timing=True)
        if i > 0:
            ins.append(nbytes / t.transfer_in / 1e9)
            outs.append(nbytes / t.transfer_out / 1e9)
    assert np.allclose(out[:, :4], 1.0 / x.shape[1])
    h2d, d2h = statistics.median(ins), statistics.median(outs)
    table.add("region host->device", h2d, h2d_ceiling, ">= 0.85 x pinned",
              h2d >= 0.85 * h2d_ceiling, "GB/s")
    table.add("region device->host", d2h, d2h_ceiling, ">= 0.85 x pinned",
              d2h >= 0.85 * d2h_ceiling, "GB/s")
    gc.free_shared(x)
    gc.free_shared(out)


def seed003(gc, cp, table, rng, reps):
    """Ten 10M float32 rows normalized: host shared memory, then CUDA IPC."""
    x = gc.shared_array((10, 10_000_000), np.float32)
    x[...] = rng.random(x.shape, dtype=np.float32)
    out = gc.shared_array(x.shape, np.float32)
    gc.normalize(x, out=out)
    ref = x / x.sum(axis=1, keepdims=True, dtype=np.float64)
    assert np.max(np.abs(out - ref)) < 1e-6 * np.abs(ref).max(), "seed 003 result"
    ours = median_ms(lambda: gc.normalize(x, out=out), reps)
    host_out = np.empty_like(x)

    def cupy_003():
        d = cp.asarray(x)
        cp.divide(d, d.sum(axis=1, keepdims=True, dtype=cp.float64), out=d, casting="unsafe")
        d.get(out=host_out)
    theirs = median_ms(cupy_003, reps)
    table.add("seed 003 host shm", ours, theirs, "<= 30 ms", ours <= 30)

    xd = cp.asarray(x)
    outd = cp.empty_like(xd)
    gc.normalize(xd, out=outd)
    cp.testing.assert_allclose(outd, cp.asarray(ref, dtype=cp.float32), rtol=1e-5)
    ours = median_ms(lambda: gc.normalize(xd, out=outd), reps)
    theirs = median_ms(lambda: cp.divide(xd, xd.sum(axis=1, keepdims=True, dtype=cp.float64),
                                         out=outd, casting="unsafe"),
                       reps, sync=cp.cuda.Device().synchronize)
    table.add("seed 003 CUDA IPC", ours, theirs, "<= 2 ms", ours <= 2)
    for a in (xd, x, out):
        gc.free_shared(a)


def seed000(gc, cp, table, rng, reps):
    """(4000, 5) x (100, 4000, 5) float64 discount product."""
    f = gc.shared_array((4000, 5))
    v = gc.shared_array((100, 4000, 5))
    f[...] = rng.uniform(0.5, 1, f.shape)
    v[...] = rng.uniform(-1, 1, v.shape)
    out = gc.shared_array(v.shape)
    gc.discount_product(f, v, out=out)
    assert np.array_equal(out, f * v), "seed 000 result"
    ours = median_ms(lambda: gc.discount_product(f, v, out=out), reps)
    host_out = np.empty(v.shape)
    theirs = median_ms(lambda: (cp.asarray(f) * cp.asarray(v)).get(out=host_out), reps)
    table.add("seed 000 host shm", ours, theirs, "<= CuPy", ours <= theirs)
    fn, vn = np.array(f), np.array(v)
    grpc_000 = median_ms(lambda: gc.discount_product(fn, vn), max(3, reps // 3))
    table.add("seed 000 over gRPC", grpc_000, theirs, "(for scale)", True)
    for a in (f, v, out):
        gc.free_shared(a)


def seed001(gc, cp, table, reps):
    """1000 x 1000 haversine mesh, float64."""
    n, ref_point = 1000, (30.0, 101.0)
    mesh = gpucompute.LatLonMesh(29, 31, n, 99, 101, n)
    out = gc.shared_array((1, n, n))
    gc.haversine_grid(mesh, ref_point, out=out)
    expected = cp.asnumpy(cupy_haversine(cp, n, ref_point))
    assert np.max(np.abs(out[0] - expected)) < 1e-9 * expected.max(), "seed 001 result"
    ours = median_ms(lambda: gc.haversine_grid(mesh, ref_point, out=out), reps)
    host_out = np.empty((n, n))
    theirs = median_ms(lambda: cupy_haversine(cp, n, ref_point).get(out=host_out), reps)
    table.add("seed 001 host shm", ours, theirs, "<= CuPy", ours <= theirs)
    grpc_001 = median_ms(lambda: gc.haversine_grid(mesh, ref_point), max(3, reps // 3))
    table.add("seed 001 over gRPC", grpc_001, theirs, "(for scale)", True)
    gc.free_shared(out)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="127.0.0.1:50161")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--region-gib", type=float, default=1.0)
    args = p.parse_args()
    import cupy as cp

    gc = gpucompute.Client(args.target, timeout=120)
    info = gc.info()
    print(f"server: backend {info.backend} on {info.devices[0].description}; "
          f"CuPy {cp.__version__} on {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    rng = np.random.default_rng(11)
    table = Table()

    bandwidth(gc, cp, table, int(args.region_gib * (1 << 30)), args.reps)
    seed003(gc, cp, table, rng, args.reps)
    seed000(gc, cp, table, rng, args.reps)
    seed001(gc, cp, table, args.reps)
    gc.close()
    print()
    table.show()
    if table.failed:
        print("goals missed: " + ", ".join(table.failed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
