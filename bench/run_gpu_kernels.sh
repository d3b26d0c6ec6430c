#!/usr/bin/env bash
# Kernels: the shipped kernels' tests, sanitizers and timings on one GPU, each section one
# table. The candidates they were chosen from are timed by dev/cuda's programs.
#
# Here (no GPU needed):
#   cmake -S . -B build-cuda -DGPUCOMPUTE_ENABLE_CUDA=ON -DCMAKE_BUILD_TYPE=Release
#   nice cmake --build build-cuda -j2 --target gpu_kernels_test gpu_backend_test \
#       gpu_chunk_memory_test backend_conformance_test backend_values_test gpu_kernels_bench \
#       lombscargle_methods_test lombscargle_conformance_test gpu_lombscargle_bench \
#       gpucompute-server gpucompute-cli
#   /work/shared/tools/device-bundle .device/kernels build-cuda/tests/gpu_kernels_test \
#       build-cuda/tests/gpu_backend_test build-cuda/tests/gpu_chunk_memory_test \
#       build-cuda/tests/backend_conformance_test build-cuda/tests/backend_values_test \
#       build-cuda/bench/gpu_kernels_bench build-cuda/tests/lombscargle_methods_test \
#       build-cuda/tests/lombscargle_conformance_test build-cuda/bench/gpu_lombscargle_bench \
#       build-cuda/server/gpucompute-server build-cuda/client/gpucompute-cli
#   (over the 64 MiB carry limit: tar -C .device -cJf .device/kernels.txz kernels, carry that)
#   (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# On the GPU machine (device tool: carry [".device", "client/python/gpucompute/_proto"]):
#   bash bench/run_gpu_kernels.sh [SECTION...]     # logs under $OUT (or ./gpu-out)
#
# Sections (default: tests sanitizer bench, one device call; ls_tests ls cupy fit in
# another, ls_sweep and ab each in one of their own):
#   tests      gpu_kernels_test (every policy switch, unaligned, poisoned, bad rows),
#              gpu_backend_test, gpu_chunk_memory_test, the cuda_* conformance and values
#              suites; one line per binary
#   sanitizer  compute-sanitizer memcheck on the kernels test and the small suites,
#              racecheck and synccheck on the shared-memory paths (tiles, clusters, held
#              items), racecheck on the warm-up and the racy conformance cases
#   bench      gpu_kernels_bench (each operation through the backend, kernels only): op,
#              size, ms, ratio to its ceiling measured in the same run (D2D, or write-only
#              for the mesh), and the goal
#   cupy       the same operations written as a user would in CuPy (cupyx.profiler)
#   ab         the bench alternated against an older build, new/old/new/old: old ms, new
#              ms, ratio, noise (the spread between a build's two runs). OLD_BUNDLE=DIR: the
#              older commit's gpu_kernels_bench bundled alone (device-bundle DIR
#              build-old/bench/gpu_kernels_bench; -DCMAKE_CUDA_ARCHITECTURES=90 keeps it small)
#   ls_tests   Lomb-Scargle: the cuda_* NUFFT and direct tests, memcheck on the NUFFT tests
#   ls_sweep   the NUFFT's small ill-conditioned rows over SWEEP_SEEDS (2000) fresh seeds
#   ls         Lomb-Scargle timings: gpu_lombscargle_bench (errors against direct float64
#              sums), nsys per-kernel sums where installed, cupyx on the same cases, seed
#              004 end to end through a CUDA server against cupyx from the same NumPy
#              arrays, and normalize="amplitude" against the float64 reference and SciPy
set -u
BUNDLE=${BUNDLE:-.device/kernels}
# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
KERNELS=$(find_bin gpu_kernels_test)
TEST=$(find_bin gpu_backend_test)
CONFORMANCE=$(find_bin backend_conformance_test)
VALUES=$(find_bin backend_values_test)
BENCH=$(find_bin gpu_kernels_bench)
T_TEST=${T_TEST:-180}
T_SAN=${T_SAN:-100}
T_BENCH=${T_BENCH:-150}
CUDA_SUITES='*cuda*'
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)

section_tests() (
  run_test() {  # log, limit, binary, filter
    timeout "$2" "$3" --gtest_color=no --gtest_filter="$4" >> "$OUT/$1" 2>&1
    echo "rc=$? ($(basename "$3"))" >> "$OUT/$1"
  }
  step "tests (limit ${T_TEST}s each)"
  : > "$OUT/test.log"
  run_test test.log "$T_TEST" "$KERNELS" '*'
  run_test test.log "$T_TEST" "$TEST" '*'
  run_test test.log "$T_TEST" "$(find_bin gpu_chunk_memory_test)" '*'
  run_test test.log "$T_TEST" "$CONFORMANCE" "$CUDA_SUITES"
  run_test test.log "$T_TEST" "$VALUES" "$CUDA_SUITES"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^rc=' "$OUT/test.log"
  grep -B2 -A14 'Failure' "$OUT/test.log" | head -120
  echo "tests: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/test.log" | tr '\n' ' ') $(grep -c '^rc=0' "$OUT/test.log")/5 rc=0" \
    | tee -a "$OUT/summary.txt"
)

section_sanitizer() (
  step "compute-sanitizer: ${SAN:-not found} (limit ${T_SAN}s each)"
  [ -n "${SAN:-}" ] || exit 0
  : > "$OUT/sanitizer.log"
  san() {  # tool, binary, filter, tool flags...
    GPUCOMPUTE_SANITIZER=1 timeout "$T_SAN" "$SAN" --tool "$1" --error-exitcode 17 "${@:4}" \
      "$2" --gtest_color=no --gtest_filter="$3" >> "$OUT/sanitizer.log" 2>&1
    echo "rc=$? ($1 $(basename "$2") $3)" >> "$OUT/sanitizer.log"
  }
  san memcheck "$KERNELS" '*:-*NormalizeAroundEveryPolicySwitch' --leak-check full
  san memcheck "$TEST" 'GpuBackendSmall.*' --leak-check full
  san memcheck "$CONFORMANCE" 'BackendConformance/cuda_*.Normalize*:BackendConformance/cuda_*.Haversine*' --leak-check full
  san memcheck "$VALUES" "$CUDA_SUITES" --leak-check full
  san racecheck "$KERNELS" 'GpuKernels.NormalizeBadRowsUnderRacecheck' --racecheck-report hazard
  san synccheck "$KERNELS" 'GpuKernels.NormalizeBadRowsUnderRacecheck'
  san racecheck "$TEST" 'GpuBackendSmall.WarmAtConstruction' --racecheck-report hazard
  san racecheck "$CONFORMANCE" 'BackendConformance/cuda_*.NormalizeMatchesReference:LombScargleConformance/cuda_*.SinusoidsOverALongBaseline:BackendConformance/cuda_*.NormalizeNamesFirstBadRow' \
    --racecheck-report hazard
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^rc=|Invalid|Race|Barrier' "$OUT/sanitizer.log" | head -30
  echo "sanitizer: $(grep -c '^rc=0' "$OUT/sanitizer.log")/8 rc=0; $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | sort | uniq -c | tr '\n' ' ')" \
    | tee -a "$OUT/summary.txt"
)

section_bench() (
  step "gpu_kernels_bench (limit ${T_BENCH}s)"
  timeout "$T_BENCH" "$BENCH" --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
  echo "rc=$?" >> "$OUT/bench.log"
  grep -E '^device|^backend warm-up|bandwidth|^rc=' "$OUT/bench.log"
  step "ratios (ceiling measured in this run) and goals"
  # The goals: normalize >= 0.85 of D2D, mesh f32 >= 0.85 / f64 >= 0.7 of
  # write-only, points >= 0.7 of D2D, discount >= 0.93, all against the 2 GiB ceilings;
  # in brackets the ratio to the same ceiling measured at the row's own bytes.
  awk -F, 'NR > 1 && $7 > 0 {
    goal = "";
    if ($1 ~ /normalize/) goal = 0.85;
    else if ($1 ~ /mesh/) goal = ($2 == "f32") ? 0.85 : 0.7;
    else if ($1 ~ /points/) goal = 0.7;
    else if ($1 ~ /discount/) goal = 0.93;
    mark = (goal != "" && $12 < goal) ? "  below" : "";
    printf "%-24s %-4s %-20s %9.4f ms  %5.2f x %-5s goal %s%s  (%.2f x its own size)\n", $1, $2, $3, $4, $12, $11,
           goal, mark, $13
  }' "$OUT/bench.csv" | tee "$OUT/ratios.txt"
  echo "below goal: $(grep -c below "$OUT/ratios.txt") rows" | tee -a "$OUT/summary.txt"
)

section_cupy() (
  step "CuPy (limit ${T_CUPY:-80}s)"
  timeout "${T_CUPY:-80}" "$PYTHON" - > "$OUT/cupy.log" 2>&1 <<'PY'
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
)

# The same cases in both builds, normalize at each row-length class.
AB_CASES='--normalize_cases=f32:sum:10x10000000,f64:l2:10x10000000,f32:sum:1000000x100,f32:l1:10000000x10,f32:sum:1562500x64,f64:l2:195312x256,f32:sum:100000x1000,f64:l2:5000x10000,f32:sum:2000x50000,f64:l2:500x100000,f32:sum:250x400000,f64:l2:50x1000000,f32:sum:100x1000000'
section_ab() (
  step "ab: $BUNDLE (new) against ${OLD_BUNDLE:-OLD_BUNDLE unset} (old), alternated"
  [ -n "${OLD_BUNDLE:-}" ] || { echo "set OLD_BUNDLE to the older build's bundle"; exit 0; }
  if [ ! -d "$OLD_BUNDLE" ] && [ -f "$OLD_BUNDLE.txz" ]; then
    tar -C "$(dirname "$OLD_BUNDLE")" -xJf "$OLD_BUNDLE.txz" || exit 1
  fi
  NEWLIB=$BUNDLE/lib:/usr/local/cuda/lib64
  OLDLIB=$OLD_BUNDLE/lib:/usr/local/cuda/lib64
  t0=$(date +%s)
  for run in new1 old1 new2 old2; do
    b=${run%[12]}
    lib=$NEWLIB dir=$BUNDLE lim=70
    [ "$b" = old ] && lib=$OLDLIB dir=$OLD_BUNDLE lim=90
    LD_LIBRARY_PATH=$lib timeout $lim "$dir/gpu_kernels_bench" "$AB_CASES" --csv "$OUT/$run.csv" > "$OUT/$run.log" 2>&1
    echo "$run rc=$? $(grep -E '^backend warm-up' "$OUT/$run.log")"
  done
  echo "total: $(( $(date +%s) - t0 )) s"
  "$PYTHON" - "$OUT" <<'PY'
import csv, sys, os
out = sys.argv[1]
def rows(name):
    p = os.path.join(out, name + ".csv")
    if not os.path.exists(p): return {}
    return {(r["op"], r["dtype"], r["size"]): float(r["median_ms"]) for r in csv.DictReader(open(p)) if not r["op"].startswith(" ")}
n1, n2, o1, o2 = rows("new1"), rows("new2"), rows("old1"), rows("old2")
print("%-22s %-4s %-24s %9s %9s %6s %6s" % ("row", "type", "size", "old ms", "new ms", "ratio", "noise"))
worse = 0
for k in o1:
    if k not in n1 or k not in n2 or k not in o2: continue
    old, new = (o1[k] + o2[k]) / 2, (n1[k] + n2[k]) / 2
    noise = max(abs(n1[k] - n2[k]) / new, abs(o1[k] - o2[k]) / old)
    flag = "  SLOWER" if new / old - 1 > max(noise, 0.02) else ""
    worse += bool(flag)
    print("%-22s %-4s %-24s %9.4f %9.4f %6.3f %6.3f%s" % (k[0][:22], k[1], k[2][:24], old, new, new / old, noise, flag))
print("rows slower beyond noise (and 2%%): %d" % worse)
PY
)

section_ls_tests() (
  step "Lomb-Scargle tests (limit 120 s)"
  timeout 120 "$(find_bin lombscargle_methods_test)" --gtest_color=no --gtest_filter='*cuda*' > "$OUT/ls_test.log" 2>&1
  echo "rc=$?" >> "$OUT/ls_test.log"
  timeout 120 "$(find_bin lombscargle_conformance_test)" --gtest_color=no --gtest_filter='LombScargle*cuda*' >> "$OUT/ls_test.log" 2>&1
  echo "rc=$?" >> "$OUT/ls_test.log"
  grep -E '^\[  (PASSED|FAILED) |^\[       OK \]|^\[  FAILED  \]|^rc=' "$OUT/ls_test.log" | tail -30
  grep -B2 -A10 'Failure' "$OUT/ls_test.log" | head -60
  step "memcheck on the NUFFT tests (limit 60 s): ${SAN:-not found}"
  if [ -n "${SAN:-}" ]; then
    GPUCOMPUTE_SANITIZER=1 timeout 60 "$SAN" --tool memcheck --error-exitcode 17 "$(find_bin lombscargle_methods_test)" \
      --gtest_color=no --gtest_filter='*cuda*:-*AutoPicks*' > "$OUT/ls_memcheck.log" 2>&1
    echo "rc=$?" >> "$OUT/ls_memcheck.log"
    grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) |^rc=|Invalid' "$OUT/ls_memcheck.log" | head -10
  fi
  echo "ls tests: $(grep -E '^\[  (PASSED|FAILED) |^rc=' "$OUT/ls_test.log" | tr '\n' ' ')" \
    "$( [ -f "$OUT/ls_memcheck.log" ] && grep -E 'ERROR SUMMARY' "$OUT/ls_memcheck.log" | tail -1)" | tee -a "$OUT/summary.txt"
)

section_ls_sweep() (
  SWEEP_SEEDS=${SWEEP_SEEDS:-2000}
  step "seed sweep, $SWEEP_SEEDS seeds (limits 150 + 60 + 60 s)"
  : > "$OUT/ls_sweep.log"
  for run in "150 lombscargle_methods_test LombScargleMethods/cuda_f32.NufftOnIllConditionedSmallRows $SWEEP_SEEDS" \
             "60 lombscargle_methods_test LombScargleMethods/cuda_f64.NufftOnIllConditionedSmallRows $((SWEEP_SEEDS / 4))" \
             "60 lombscargle_conformance_test LombScargleConformance/cuda_f32.EveryOptionCombination $((SWEEP_SEEDS / 4))"; do
    read -r limit binary filter seeds <<< "$run"
    echo "--- $filter over $seeds seeds" >> "$OUT/ls_sweep.log"
    GPUCOMPUTE_SEED_SWEEP=$seeds timeout "$limit" "$(find_bin "$binary")" --gtest_color=no --gtest_filter="$filter" >> "$OUT/ls_sweep.log" 2>&1
    echo "rc=$? ($filter)" >> "$OUT/ls_sweep.log"
  done
  grep -E '^--- |SWEEP|^\[  FAILED  \]|^rc=' "$OUT/ls_sweep.log"
  grep -B2 -A10 'Failure' "$OUT/ls_sweep.log" | head -40
)

section_ls() (
  step "gpu_lombscargle_bench (limit 90 s)"
  timeout 90 "$(find_bin gpu_lombscargle_bench)" 2>&1 | tee "$OUT/ls_bench.log"

  NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
  step "per-kernel times of 3000 x 1e6 (nsys, limit 90 s): ${NSYS:-not found}"
  if [ -n "${NSYS:-}" ]; then
    timeout 90 "$NSYS" profile --stats=false --force-overwrite=true -o "$OUT/ls_nsys" \
      "$(find_bin gpu_lombscargle_bench)" --case="3000 x 1e6" > "$OUT/ls_nsys.log" 2>&1
    timeout 60 "$NSYS" stats --report cuda_gpu_kern_sum,cuda_gpu_mem_time_sum --format csv \
      "$OUT/ls_nsys.nsys-rep" 2>/dev/null | cut -c1-200 | head -40 | tee -a "$OUT/ls_nsys.log"
  fi

  step "cupyx on the same cases (limit 60 s)"
  timeout 60 "$PYTHON" - <<'PY' 2>&1 | tee "$OUT/ls_cupy.log"
import numpy as np
try:
    import cupy as cp
    from cupyx.profiler import benchmark
    from cupyx.scipy.signal import lombscargle
except Exception as e:
    print("no cupyx:", e); raise SystemExit(0)
rng = np.random.default_rng(14)
def case(name, batch, n, m, grid, reps=10):
    for dt in (np.float64, np.float32):
        x = np.sort(rng.uniform(0, 1000, n))
        f = np.linspace(0.01, 10, m) if grid else rng.uniform(0.01, 10, m)
        ys = [2 * np.sin((1 + 0.01 * b) * x) + rng.normal(0, 0.5, n) for b in range(batch)]
        xd, fd = cp.asarray(x, dt), cp.asarray(f, dt)
        yd = [cp.asarray(y, dt) for y in ys]
        def run():
            for y in yd:
                lombscargle(xd, y, fd)
        r = benchmark(run, (), n_repeat=reps, n_warmup=2)
        ms = float(np.median(r.gpu_times[0])) * 1e3
        print(f"{name:34s} {np.dtype(dt).name:8s} cupyx {ms:10.4f} ms"
              + (f"  ({batch} calls, one per series)" if batch > 1 else ""), flush=True)
        cp.get_default_memory_pool().free_all_blocks()
case("3000 x 1e6 grid", 1, 3000, 1000000, True)
case("100 series x 3000, 1000 freqs", 100, 3000, 1000, True, reps=5)
case("10000 x 1e6 explicit", 1, 10000, 1000000, False, reps=5)
case("seed 004: 100 x 2^20 grid", 1, 100, 1 << 20, True)
PY

  step "seed 004 end to end from host arrays (limit 60 s)"
  PORT=50161
  "$(find_bin gpucompute-server)" --backend="$BACKEND" --address=127.0.0.1:$PORT --metrics_address=127.0.0.1:9575 \
    --allow_shared_memory > "$OUT/ls_server.log" 2>&1 &
  SERVER=$!
  await_health $PORT 100
  timeout 60 "$PYTHON" - "$PORT" <<'PY' 2>&1 | tee "$OUT/ls_e2e.log"
import sys, time
import numpy as np
import gpucompute as gc
port = sys.argv[1]
rng = np.random.default_rng(4)
x = np.linspace(0.01, 10 * np.pi, 1024)[rng.random(1024) >= 0.9]
y = 2.0 * np.cos(x + 0.5 * np.pi)
m = 1 << 20
client = gc.Client(f"127.0.0.1:{port}", timeout=60)
grid = gc.FrequencyGrid(0.01, 10.0, m)
def med(f, reps=10):
    f(); f()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); t.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(t))
for dt in (np.float32, np.float64):
    xs, ys = x.astype(dt), y.astype(dt)
    for method in ("auto", "direct", "nufft"):
        _, timing = client.lombscargle(xs, ys, grid, method=method, return_timing=True)
        wall = med(lambda: client.lombscargle(xs, ys, grid, method=method))
        print(f"gpucompute {np.dtype(dt).name:8s} {method:6s} -> {timing.method:6s} end to end {wall:9.3f} ms "
              f"(compute {timing.compute * 1e3:.3f} ms)")
    # Same host: the result lands in a shared array the server maps (out=), no gRPC bytes.
    out = client.shared_array((m,), dt)
    wall = med(lambda: client.lombscargle(xs, ys, grid, out=out))
    print(f"gpucompute {np.dtype(dt).name:8s} auto   out=shared_array  end to end {wall:9.3f} ms")
    client.free_shared(out)
    try:
        import cupy as cp
        from cupyx.scipy.signal import lombscargle
        f_host = np.linspace(0.01, 10.0, m).astype(dt)
        def cupyx_e2e():
            out = lombscargle(cp.asarray(xs), cp.asarray(ys), cp.asarray(f_host))
            return cp.asnumpy(out)
        print(f"cupyx      {np.dtype(dt).name:8s} explicit freqs, end to end {med(cupyx_e2e):9.3f} ms")
    except Exception as e:
        print("no cupyx:", e)
PY
  step "normalize='amplitude' through the server against the float64 reference and SciPy (limit 120 s)"
  timeout 120 "$PYTHON" - "$PORT" <<'PY' 2>&1 | tee "$OUT/ls_amplitude.log"
import sys
import numpy as np
import gpucompute as gc
sys.path.insert(0, "tests/python")
import reference as ref
from scipy import signal
# SciPy < 1.15 reads normalize as a bool: "amplitude" gives a real normalized power.
probe = signal.lombscargle(np.arange(3.0), np.arange(3.0), np.ones(1), normalize="amplitude")
scipy_amplitude = signal.lombscargle if np.iscomplexobj(probe) else None
if scipy_amplitude is None:
    print("SciPy", __import__("scipy").__version__, "has no normalize='amplitude'")
client = gc.Client(f"127.0.0.1:{sys.argv[1]}", timeout=60)
rng = np.random.default_rng(15)
grid = gc.FrequencyGrid(0.05, 12.0, 10000)  # the references run on the CPU
freqs = grid.numpy(np.float64)
failed = 0
for dt in (np.float32, np.float64):
    for method in ("direct", "nufft"):
        for fm in (False, True):
            x = np.sort(rng.uniform(0, 200, 1000)).astype(dt)
            y = (1.5 * np.sin(0.7 * x) + 0.3 + 0.5 * rng.standard_normal(1000)).astype(dt)
            w = rng.uniform(0.5, 2.0, 1000).astype(dt)
            got = client.lombscargle(x, y, grid, normalize="amplitude", weights=w,
                                     floating_mean=fm, method=method)
            want = ref.lombscargle_1_15(x, y, freqs, normalize="amplitude", weights=w,
                                        floating_mean=fm)
            err = np.abs(got - want).max() / np.abs(want).max()
            bound = 1e-9 if dt == np.float64 else 1e-4
            line = (f"amplitude {np.dtype(dt).name:8s} {method:6s} floating_mean={fm!s:5s} "
                    f"error/row max {err:.2e} (bound {bound:.0e})")
            if scipy_amplitude is not None:
                s = scipy_amplitude(x.astype(np.float64), y.astype(np.float64), freqs,
                                    normalize="amplitude", weights=w.astype(np.float64),
                                    floating_mean=fm)
                line += f", vs SciPy {np.abs(got - s).max() / np.abs(s).max():.2e}"
            ok = err <= bound
            failed += not ok
            print(line, "ok" if ok else "FAILED", flush=True)
print("amplitude: all within bounds" if failed == 0 else f"amplitude: {failed} FAILED")
PY
  kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null
)

run_sections "tests sanitizer bench" "$@"
