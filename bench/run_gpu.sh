#!/usr/bin/env bash
# Every GPU check and timing of the CUDA backend in one device call.
#
# Here (no GPU needed):
#   cmake -S . -B build-cuda && cmake --build build-cuda -j2 --target gpu_backend_test backend_conformance_test backend_values_test gpu_kernels_bench
#   /work/shared/tools/device-bundle .device/gpu build-cuda/tests/gpu_backend_test build-cuda/tests/backend_conformance_test build-cuda/tests/backend_values_test build-cuda/bench/gpu_kernels_bench
# On the GPU machine (device tool: carry [".device"]):
#   bash bench/run_gpu.sh            # writes logs under $OUT (or ./gpu-out)
#
# Steps, each with its own time limit so one hang cannot eat the rest:
#   1. gpu_backend_test, all tests (GPU vs CPU backend, 1 .. 1e8 elements, poisoned
#      outputs, two threads, pool baseline, OOM, sticky error), then the cuda_*
#      instances of backend_conformance_test (every op vs float64 references, cancellation)
#      and of backend_values_test (edge values and their messages);
#   2. gpu_kernels_bench: D2D and pinned PCIe ceilings, every op at seed sizes;
#   3. compute-sanitizer memcheck and racecheck on the small tests;
#   4. the same ops through CuPy, where python3 has it;
#   5. SASS of the hot kernels (for reading here), then a short summary.
set -u
BUNDLE=${BUNDLE:-.device/gpu}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
TEST="$BUNDLE/gpu_backend_test"
CONFORMANCE="$BUNDLE/backend_conformance_test"
VALUES="$BUNDLE/backend_values_test"
BENCH="$BUNDLE/gpu_kernels_bench"
T_TEST=${T_TEST:-180}
T_BENCH=${T_BENCH:-130}
T_MEMCHECK=${T_MEMCHECK:-100}
T_RACECHECK=${T_RACECHECK:-60}
T_CUPY=${T_CUPY:-80}
SMALL='GpuBackendSmall.*'
RACY='GpuBackendSmall.WarmAtConstruction'
CUDA_CONFORMANCE='*cuda*'
RACY_CONFORMANCE='BackendConformance/cuda_*.NormalizeMatchesReference:LombScargleConformance/cuda_*.SinusoidsOverALongBaseline:BackendConformance/cuda_*.NormalizeNamesFirstBadRow'

step() { echo; echo "=== $* ($(date +%T))"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 | tee "$OUT/summary.txt"
uname -r

step "1. gpu_backend_test (limit ${T_TEST}s)"
timeout "$T_TEST" "$TEST" --gtest_color=no > "$OUT/test.log" 2>&1
echo "rc=$?" >> "$OUT/test.log"
timeout "$T_TEST" "$CONFORMANCE" --gtest_color=no --gtest_filter="$CUDA_CONFORMANCE" >> "$OUT/test.log" 2>&1
echo "rc=$?" >> "$OUT/test.log"
timeout "$T_TEST" "$VALUES" --gtest_color=no --gtest_filter="$CUDA_CONFORMANCE" >> "$OUT/test.log" 2>&1
echo "rc=$?" >> "$OUT/test.log"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[       OK \]|^\[  FAILED  \]|^rc=|kernels loaded|^device ' "$OUT/test.log" | tail -45
grep -B3 -A12 'Failure' "$OUT/test.log" | head -80

step "2. gpu_kernels_bench (limit ${T_BENCH}s)"
timeout "$T_BENCH" "$BENCH" --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
echo "rc=$?" >> "$OUT/bench.log"
grep -E '^device|^backend warm-up|bandwidth|pinned [0-9]|^rc=' "$OUT/bench.log"

SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
step "3. compute-sanitizer: ${SAN:-not found}"
if [ -n "${SAN:-}" ]; then
  GPUCOMPUTE_SANITIZER=1 timeout "$T_MEMCHECK" "$SAN" --tool memcheck --leak-check full --error-exitcode 17 \
    "$TEST" --gtest_color=no --gtest_filter="$SMALL" > "$OUT/memcheck.log" 2>&1
  echo "rc=$?" >> "$OUT/memcheck.log"
  GPUCOMPUTE_SANITIZER=1 timeout "$T_MEMCHECK" "$SAN" --tool memcheck --leak-check full --error-exitcode 17 \
    "$CONFORMANCE" --gtest_color=no --gtest_filter="$CUDA_CONFORMANCE" >> "$OUT/memcheck.log" 2>&1
  echo "rc=$?" >> "$OUT/memcheck.log"
  GPUCOMPUTE_SANITIZER=1 timeout "$T_MEMCHECK" "$SAN" --tool memcheck --leak-check full --error-exitcode 17 \
    "$VALUES" --gtest_color=no --gtest_filter="$CUDA_CONFORMANCE" >> "$OUT/memcheck.log" 2>&1
  echo "rc=$?" >> "$OUT/memcheck.log"
  echo "-- memcheck:"; grep -E 'ERROR SUMMARY|LEAK SUMMARY|^\[  (PASSED|FAILED) |^rc=|Invalid|========= Program hit' "$OUT/memcheck.log" | head -20
  GPUCOMPUTE_SANITIZER=1 timeout "$T_RACECHECK" "$SAN" --tool racecheck --racecheck-report hazard --error-exitcode 17 \
    "$TEST" --gtest_color=no --gtest_filter="$RACY" > "$OUT/racecheck.log" 2>&1
  echo "rc=$?" >> "$OUT/racecheck.log"
  GPUCOMPUTE_SANITIZER=1 timeout "$T_RACECHECK" "$SAN" --tool racecheck --racecheck-report hazard --error-exitcode 17 \
    "$CONFORMANCE" --gtest_color=no --gtest_filter="$RACY_CONFORMANCE" >> "$OUT/racecheck.log" 2>&1
  echo "rc=$?" >> "$OUT/racecheck.log"
  echo "-- racecheck:"; grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard|^\[  (PASSED|FAILED) |^rc=' "$OUT/racecheck.log" | head -20
fi

step "4. CuPy (limit ${T_CUPY}s)"
timeout "$T_CUPY" env PYTHONUNBUFFERED=1 python3 - > "$OUT/cupy.log" 2>&1 <<'PY'
import math, time
import numpy as np
try:
    import cupy as cp
    from cupyx.profiler import benchmark
except Exception as e:
    print("no cupy:", e); raise SystemExit(0)
print("cupy", cp.__version__)
rows = []
def t(name, dt, size, f, nbytes=0, reps=20):
    try:
        r = benchmark(f, (), n_repeat=reps, n_warmup=3)
        ms = float(np.median(r.gpu_times[0])) * 1e3
        rows.append((name, dt, size, ms, nbytes / (ms * 1e6) if nbytes else 0))
        print(f"{name:28s} {dt:4s} {size:22s} {ms:10.4f} ms", flush=True)
    except Exception as e:
        print(f"{name} {dt} {size}: failed: {type(e).__name__}: {e}", flush=True)
    cp.get_default_memory_pool().free_all_blocks()

# discount product: the seed's broadcast multiply
for dt, D in ((np.float64, 200), (np.float32, 200)):
    f = cp.random.random((1000000, 5)).astype(dt); v = cp.random.random((D, 1000000, 5)).astype(dt)
    o = cp.empty_like(v)
    t("discount (cupy multiply)", "f64" if dt == np.float64 else "f32", f"({D},1000000,5)", lambda: cp.multiply(f, v, out=o), f.nbytes + v.nbytes + o.nbytes)
    del f, v, o
# haversine mesh, as a user writes it with broadcasting (and fused)
R = 6371.0088
for n in (1000, 10000):
    for dt in (np.float32, np.float64):
        lat = cp.linspace(29, 31, n, dtype=dt)[:, None]; lon = cp.linspace(99, 101, n, dtype=dt)[None, :]
        c0 = math.cos(math.radians(30.0))
        def hav():
            dlat = cp.radians(lat - 30.0); dlon = cp.radians(lon - 101.0)
            a = cp.sin(dlat / 2) ** 2 + cp.cos(cp.radians(lat)) * c0 * cp.sin(dlon / 2) ** 2
            return 2 * R * cp.arctan2(cp.sqrt(a), cp.sqrt(1 - a))
        @cp.fuse()
        def hav_fused(la, lo):
            dlat = (la - 30.0) * (math.pi / 180); dlon = (lo - 101.0) * (math.pi / 180)
            a = cp.sin(dlat / 2) ** 2 + cp.cos(la * (math.pi / 180)) * c0 * cp.sin(dlon / 2) ** 2
            return 2 * R * cp.arctan2(cp.sqrt(a), cp.sqrt(1 - a))
        name = "f32" if dt == np.float32 else "f64"
        t("haversine (cupy exprs)", name, f"{n}x{n}", hav, n * n * np.dtype(dt).itemsize)
        t("haversine (cupy.fuse)", name, f"{n}x{n}", lambda: hav_fused(lat, lon), n * n * np.dtype(dt).itemsize)
# normalize a / a.sum()
for dt, (r_, c_) in ((np.float32, (10, 10000000)), (np.float32, (1000000, 100))):
    a = cp.random.random((r_, c_)).astype(dt) + 0.5
    t("normalize a/a.sum(1)", "f32", f"{r_}x{c_}", lambda: a / a.sum(axis=1, keepdims=True), 2 * a.nbytes)
    del a
# Lomb-Scargle: cupyx.scipy.signal.lombscargle (the cuSignal kernel)
try:
    from cupyx.scipy.signal import lombscargle
    for dt in (np.float32, np.float64):
        x = cp.sort(cp.random.uniform(0, 1000, 1024)).astype(dt)
        y = cp.sin(x).astype(dt)
        fr = cp.linspace(0.01, 10, 1 << 20, dtype=dt)
        t("lombscargle (cupyx)", "f32" if dt == np.float32 else "f64", "N=1024 M=1048576",
          lambda: lombscargle(x, y, fr), 0, reps=10)
except Exception as e:
    print("cupyx lombscargle unavailable:", e)
print()
print(f"{'op':28s} {'type':4s} {'size':22s} {'median ms':>10s} {'GB/s':>8s}")
for r in rows:
    print(f"{r[0]:28s} {r[1]:4s} {r[2]:22s} {r[3]:10.4f} {r[4]:8.0f}")
PY
echo "rc=$?" >> "$OUT/cupy.log"
tail -16 "$OUT/cupy.log"

step "5. SASS of the hot kernels"
CUOBJ=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
if [ -n "${CUOBJ:-}" ]; then
  "$CUOBJ" -sass -arch sm_90 "$BENCH" 2>/dev/null | awk '
    /Function :/ { keep = ($0 ~ /PeriodogramKernelI[fd]Li0ELb1ELb1/ || $0 ~ /RowBroadcastKernelIdLb1/ ||
                           $0 ~ /ChunkReduceKernelIfLNS_8NormKindE0ELb1/ || $0 ~ /ChunkScaleKernelIfLb1/ ||
                           $0 ~ /MeshKernelIfLb1/ || $0 ~ /MeshKernelIdLb1/) }
    keep { print }' > "$OUT/sass_hot.txt"
  wc -l "$OUT/sass_hot.txt"
fi

step "summary"
{
  echo "tests:    $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/test.log" | tr '\n' ' ') $(tail -1 "$OUT/test.log")"
  [ -f "$OUT/memcheck.log" ] && echo "memcheck: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/memcheck.log" | tr '\n' ' ') $(tail -1 "$OUT/memcheck.log")"
  [ -f "$OUT/racecheck.log" ] && echo "racecheck: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | tail -1) $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/racecheck.log" | tr '\n' ' ') $(tail -1 "$OUT/racecheck.log")"
} | tee -a "$OUT/summary.txt"
sed -n '/^D2D ceiling/,$p' "$OUT/bench.log"
