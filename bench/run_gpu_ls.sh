#!/usr/bin/env bash
# Issue 14 (Lomb-Scargle: NUFFT and direct methods) on a GPU machine, in one device call.
#
# Here (no GPU needed):
#   cmake --build build-cuda -j2 --target lombscargle_methods_test lombscargle_conformance_test \
#       gpu_lombscargle_bench gpucompute-server gpucompute-cli
#   /work/shared/tools/device-bundle .device/ls build-cuda/tests/lombscargle_methods_test \
#       build-cuda/tests/lombscargle_conformance_test build-cuda/bench/gpu_lombscargle_bench \
#       build-cuda/server/gpucompute-server build-cuda/client/gpucompute-cli
#   rm -f .device/ls/lib/libcufft*      # ~280 MB: the machine's CUDA image has cuFFT
#   (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# On the GPU machine (device tool: carry [".device", "client/python/gpucompute/_proto"]):
#   bash bench/run_gpu_ls.sh           # logs under $OUT (or ./gpu-out)
#
# Steps, each with its own time limit (about 6 minutes in all):
#   1. the cuda_* instances of lombscargle_methods_test (NUFFT vs float64 direct reference,
#      method choice, refusals, amplitudes, ragged batches) and of lombscargle_conformance_test's
#      Lomb-Scargle suite (every option combination, amplitude included, on both methods);
#   1b. the NUFFT's small ill-conditioned rows (and the option sweep's small cases) over
#      SWEEP_SEEDS fresh seeds (default 2000; 0 skips), GPUCOMPUTE_SEED_SWEEP; with
#      SWEEP_ONLY=1 the script stops after it (to keep each device call under 10 minutes:
#      one call SWEEP_SEEDS=0, one SWEEP_ONLY=1);
#   2. compute-sanitizer memcheck on the NUFFT tests;
#   3. gpu_lombscargle_bench: compute times and errors against the direct float64 sums;
#   3b. where nsys is installed, its per-kernel sums for the 3000 x 1e6 case;
#   4. cupyx.scipy.signal.lombscargle on the same cases in the same run (explicit freqs);
#   5. seed 004 end to end from host arrays: the Python client against a fresh CUDA
#      server (result over gRPC, and into a shared array on the same host), and cupyx
#      from the same numpy arrays (copy in, periodogram, copy out);
#   5b. normalize="amplitude" through that server, both methods and dtypes, against
#      tests/python/reference.py and (SciPy >= 1.15) scipy.signal.lombscargle.
set -u
BUNDLE=${BUNDLE:-.device/ls}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
# cuFFT from the machine's CUDA image (the bundle leaves it out), else from pip's nvidia-cufft.
CUFFT_DIR=$(dirname "$(ls /usr/local/cuda/lib64/libcufft.so* 2>/dev/null | head -1)" 2>/dev/null)
[ -z "$CUFFT_DIR" ] && CUFFT_DIR=$(python3 -c 'import nvidia.cufft, os; print(os.path.join(nvidia.cufft.__path__[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$BUNDLE/lib:${CUFFT_DIR:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
step() { echo; echo "=== $* ($(date +%T))"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
echo "cuFFT from: ${CUFFT_DIR:-not found}"

step "1. tests (limit 120 s)"
timeout 120 "$BUNDLE/lombscargle_methods_test" --gtest_color=no --gtest_filter='*cuda*' > "$OUT/ls_test.log" 2>&1
echo "rc=$?" >> "$OUT/ls_test.log"
timeout 120 "$BUNDLE/lombscargle_conformance_test" --gtest_color=no --gtest_filter='LombScargle*cuda*' >> "$OUT/ls_test.log" 2>&1
echo "rc=$?" >> "$OUT/ls_test.log"
grep -E '^\[  (PASSED|FAILED) |^\[       OK \]|^\[  FAILED  \]|^rc=' "$OUT/ls_test.log" | tail -30
grep -B2 -A10 'Failure' "$OUT/ls_test.log" | head -60

SWEEP_SEEDS=${SWEEP_SEEDS:-2000}
step "1b. seed sweep, $SWEEP_SEEDS seeds (limits 150 + 60 + 60 s)"
if [ "$SWEEP_SEEDS" -gt 0 ]; then
  : > "$OUT/ls_sweep.log"
  for run in "150 lombscargle_methods_test LombScargleMethods/cuda_f32.NufftOnIllConditionedSmallRows $SWEEP_SEEDS" \
             "60 lombscargle_methods_test LombScargleMethods/cuda_f64.NufftOnIllConditionedSmallRows $((SWEEP_SEEDS / 4))" \
             "60 lombscargle_conformance_test LombScargleConformance/cuda_f32.EveryOptionCombination $((SWEEP_SEEDS / 4))"; do
    set -- $run
    echo "--- $3 over $4 seeds" >> "$OUT/ls_sweep.log"
    GPUCOMPUTE_SEED_SWEEP=$4 timeout "$1" "$BUNDLE/$2" --gtest_color=no --gtest_filter="$3" >> "$OUT/ls_sweep.log" 2>&1
    echo "rc=$? ($3)" >> "$OUT/ls_sweep.log"
  done
  grep -E '^--- |SWEEP|^\[  FAILED  \]|^rc=' "$OUT/ls_sweep.log"
  grep -B2 -A10 'Failure' "$OUT/ls_sweep.log" | head -40
fi
[ "${SWEEP_ONLY:-0}" = 1 ] && exit 0

SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
step "2. memcheck (limit 60 s): ${SAN:-not found}"
if [ -n "${SAN:-}" ]; then
  GPUCOMPUTE_SANITIZER=1 timeout 60 "$SAN" --tool memcheck --error-exitcode 17 "$BUNDLE/lombscargle_methods_test" \
    --gtest_color=no --gtest_filter='*cuda*:-*AutoPicks*' > "$OUT/ls_memcheck.log" 2>&1
  echo "rc=$?" >> "$OUT/ls_memcheck.log"
  grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) |^rc=|Invalid' "$OUT/ls_memcheck.log" | head -10
fi

step "3. gpu_lombscargle_bench (limit 90 s)"
timeout 90 "$BUNDLE/gpu_lombscargle_bench" 2>&1 | tee "$OUT/ls_bench.log"

NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
step "3b. per-kernel times of 3000 x 1e6 (nsys, limit 90 s): ${NSYS:-not found}"
if [ -n "${NSYS:-}" ]; then
  timeout 90 "$NSYS" profile --stats=false --force-overwrite=true -o "$OUT/ls_nsys" \
    "$BUNDLE/gpu_lombscargle_bench" --case="3000 x 1e6" > "$OUT/ls_nsys.log" 2>&1
  timeout 60 "$NSYS" stats --report cuda_gpu_kern_sum,cuda_gpu_mem_time_sum --format csv \
    "$OUT/ls_nsys.nsys-rep" 2>/dev/null | cut -c1-200 | head -40 | tee -a "$OUT/ls_nsys.log"
fi

step "4. cupyx on the same cases (limit 60 s)"
timeout 60 python3 - <<'PY' 2>&1 | tee "$OUT/ls_cupy.log"
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

step "5. seed 004 end to end from host arrays (limit 60 s)"
PORT=50161
"$BUNDLE/gpucompute-server" --backend=cuda --address=127.0.0.1:$PORT --metrics_address=127.0.0.1:9575 \
  --allow_shared_memory > "$OUT/ls_server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do
  "$BUNDLE/gpucompute-cli" --target=127.0.0.1:$PORT --timeout=1s health > /dev/null 2>&1 && break
  sleep 0.1
done
timeout 60 python3 - "$PORT" <<'PY' 2>&1 | tee "$OUT/ls_e2e.log"
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
step "5b. normalize='amplitude' through the CUDA server against the float64 reference and SciPy (limit 120 s)"
timeout 120 python3 - "$PORT" <<'PY' 2>&1 | tee "$OUT/ls_amplitude.log"
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

step "summary"
grep -E '^\[  (PASSED|FAILED) |^rc=' "$OUT/ls_test.log" | tr '\n' ' '; echo
[ -f "$OUT/ls_sweep.log" ] && grep -E '^rc=' "$OUT/ls_sweep.log" | tr '\n' ' ' && echo
[ -f "$OUT/ls_memcheck.log" ] && grep -E 'ERROR SUMMARY' "$OUT/ls_memcheck.log" | tail -1
[ -f "$OUT/ls_amplitude.log" ] && tail -1 "$OUT/ls_amplitude.log"
