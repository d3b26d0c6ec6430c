#!/usr/bin/env bash
# Issue 13, small Lomb-Scargle requests (the small-problem path, lombscargle_small.cu), in
# one device call of about 4 minutes.
#
# Here (no GPU needed):
#   cmake --build build-cuda -j2 --target gpu_lombscargle_variants_test lombscargle_methods_test \
#       backend_conformance_test gpu_lombscargle_bench
#   /work/shared/tools/device-bundle .device/lssmall build-cuda/tests/gpu_lombscargle_variants_test \
#       build-cuda/tests/lombscargle_methods_test build-cuda/tests/backend_conformance_test \
#       build-cuda/bench/gpu_lombscargle_bench
#   rm -f .device/lssmall/lib/libcufft*   # ~280 MB: the machine has /usr/local/cuda/lib64's
#   # Still ~480 MB (4 binaries of ~120 MB, fat binaries for 4 architectures): stripped and
#   # xz'd ~42 MB, under the device call's 64 MiB; the script unpacks it when the folder is absent.
#   (cd .device && strip lssmall/*_test lssmall/gpu_lombscargle_bench &&
#    tar cf - lssmall | xz -T2 > lssmall.tar.xz && rm -rf lssmall)
# On the GPU machine (device tool: carry [".device"]):
#   bash bench/run_gpu_ls_small.sh        # logs under $OUT (or ./gpu-out)
#
# Steps, each under its own time limit:
#   1. gpu_lombscargle_variants_test: every launch policy, the small path included, against
#      the float64 reference at small shapes, every option, bad weights (limit 90 s);
#   2. the CUDA Lomb-Scargle suites through the backend, which now picks the small path
#      for small shapes: backend_conformance_test LombScargle*cuda* and
#      lombscargle_methods_test *cuda* (limit 100 s);
#   3. compute-sanitizer memcheck on the variants test's small shapes and bad weights
#      (limit 90 s), racecheck on bad weights (4 rows, 2 tiles, every variant; limit 60 s);
#   4. gpu_lombscargle_bench --small: per shape and dtype the old policy against the small
#      path's three policies (0 is LaunchLombScargle's), what it picks, the backend's
#      compute time and the errors (limit 60 s);
#   5. gpu_lombscargle_bench on three large cases, which keep the old path (its per-thread
#      code now shared as ThreadFrequencies), against bench/results/
#      h100_lombscargle_methods_run1.log's direct times (limit 60 s each).
set -u
BUNDLE=${BUNDLE:-.device/lssmall}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
[ -d "$BUNDLE" ] || [ ! -f "$BUNDLE.tar.xz" ] || tar xJf "$BUNDLE.tar.xz" -C "$(dirname "$BUNDLE")"
CUFFT_DIR=$(dirname "$(ls /usr/local/cuda/lib64/libcufft.so* 2>/dev/null | head -1)" 2>/dev/null)
export LD_LIBRARY_PATH="$BUNDLE/lib:${CUFFT_DIR:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
step() { echo; echo "=== $* ($(date +%T))"; }
results() { grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|^rc=' "$1" | tail -"${2:-20}"; grep -B2 -A12 'Failure' "$1" | head -50; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
echo "cuFFT from: ${CUFFT_DIR:-not found}"

step "1. gpu_lombscargle_variants_test (limit 90 s)"
timeout 90 "$BUNDLE/gpu_lombscargle_variants_test" --gtest_color=no > "$OUT/lssmall_variants.log" 2>&1
echo "rc=$?" >> "$OUT/lssmall_variants.log"
grep -E '^\[       OK \]' "$OUT/lssmall_variants.log"
results "$OUT/lssmall_variants.log"

step "2. backend suites on CUDA (limits 60 + 40 s)"
timeout 60 "$BUNDLE/backend_conformance_test" --gtest_color=no --gtest_filter='LombScargle*cuda*' > "$OUT/lssmall_suites.log" 2>&1
echo "rc=$? (backend_conformance_test)" >> "$OUT/lssmall_suites.log"
timeout 40 "$BUNDLE/lombscargle_methods_test" --gtest_color=no --gtest_filter='*cuda*' >> "$OUT/lssmall_suites.log" 2>&1
echo "rc=$? (lombscargle_methods_test)" >> "$OUT/lssmall_suites.log"
results "$OUT/lssmall_suites.log"

SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
step "3. memcheck (limit 90 s): ${SAN:-not found}"
if [ -n "${SAN:-}" ]; then
  GPUCOMPUTE_SANITIZER=1 timeout 90 "$SAN" --tool memcheck --error-exitcode 17 "$BUNDLE/gpu_lombscargle_variants_test" \
    --gtest_color=no --gtest_filter='*SmallShapes*:*BadWeights*' > "$OUT/lssmall_memcheck.log" 2>&1
  echo "rc=$?" >> "$OUT/lssmall_memcheck.log"
  grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) |^rc=|Invalid' "$OUT/lssmall_memcheck.log" | head -10
  timeout 60 "$SAN" --tool racecheck --error-exitcode 17 "$BUNDLE/gpu_lombscargle_variants_test" \
    --gtest_color=no --gtest_filter='*BadWeights*' > "$OUT/lssmall_racecheck.log" 2>&1
  echo "rc=$?" >> "$OUT/lssmall_racecheck.log"
  grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|^\[  (PASSED|FAILED) |^rc=|hazard' "$OUT/lssmall_racecheck.log" | head -10
fi

step "4. old policy against the small path (limit 60 s)"
timeout 60 "$BUNDLE/gpu_lombscargle_bench" --small 2>&1 | tee "$OUT/lssmall_bench.log"

step "5. large problems, old path kept (run1 direct, ms: 3000 x 1e6 grid f64 6.55 f32 1.56;"
echo "    100 series f64 1.11 f32 0.325; 10000 x 1e6 explicit f64 33.06 f32 7.39)"
: > "$OUT/lssmall_large.log"
for c in "3000 x 1e6" "100 series" "10000 x 1e6"; do
  timeout 60 "$BUNDLE/gpu_lombscargle_bench" --case="$c" >> "$OUT/lssmall_large.log" 2>&1
  echo "rc=$? ($c)" >> "$OUT/lssmall_large.log"
done
grep -E 'direct -> direct|^rc=' "$OUT/lssmall_large.log"

step "summary"
grep -E '^rc=' "$OUT/lssmall_variants.log" "$OUT/lssmall_suites.log" | tr '\n' ' '; echo
[ -f "$OUT/lssmall_memcheck.log" ] && grep -E 'ERROR SUMMARY' "$OUT/lssmall_memcheck.log" | tail -1
[ -f "$OUT/lssmall_racecheck.log" ] && grep -E 'SUMMARY|^rc=' "$OUT/lssmall_racecheck.log" | tail -2
grep -E '^ +4 x +256 x +256' "$OUT/lssmall_bench.log"
