#!/usr/bin/env bash
# The shipped kernels in one device call: their tests against float64 references,
# compute-sanitizer, then the benchmark through the backend and the ratios to the
# ceilings measured in the same run. The candidates they were chosen from are timed by
# dev/cuda's programs (cmake -DGPUCOMPUTE_DEV_KERNELS=ON: haversine_lab, normalize_lab,
# lombscargle_lab).
#
# Here (no GPU needed):
#   cmake -S . -B build-cuda -DGPUCOMPUTE_ENABLE_CUDA=ON -DCMAKE_BUILD_TYPE=Release
#   nice cmake --build build-cuda -j2 --target gpu_kernels_test gpu_backend_test backend_conformance_test backend_values_test gpu_kernels_bench
#   /work/shared/tools/device-bundle .device/kernels build-cuda/tests/gpu_kernels_test build-cuda/tests/gpu_backend_test build-cuda/tests/backend_conformance_test build-cuda/tests/backend_values_test build-cuda/bench/gpu_kernels_bench
# On the GPU machine (device tool: carry [".device"]):
#   bash bench/run_gpu_kernels.sh     # logs under $OUT (or ./gpu-out)
#
# Steps, each with its own time limit:
#   1. gpu_kernels_test (every policy switch, unaligned, poisoned, bad rows), gpu_backend_test,
#      the cuda_* conformance and values suites;
#   2. compute-sanitizer memcheck on the kernels test and the small suites, racecheck
#      and synccheck on the shared-memory paths (tiles, clusters, held items);
#   3. gpu_kernels_bench (each operation through the backend, kernels only);
#   4. the table: op, size, ms, ratio to its ceiling (D2D, or write-only for the mesh),
#      and the goal.
set -u
BUNDLE=${BUNDLE:-.device/kernels}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
KERNELS="$BUNDLE/gpu_kernels_test"
TEST="$BUNDLE/gpu_backend_test"
CONFORMANCE="$BUNDLE/backend_conformance_test"
VALUES="$BUNDLE/backend_values_test"
BENCH="$BUNDLE/gpu_kernels_bench"
T_TEST=${T_TEST:-180}
T_SAN=${T_SAN:-100}
T_BENCH=${T_BENCH:-150}
CUDA_SUITES='*cuda*'

step() { echo; echo "=== $* ($(date +%T))"; }
run_test() {  # log, limit, binary, filter
  timeout "$2" "$3" --gtest_color=no --gtest_filter="$4" >> "$OUT/$1" 2>&1
  echo "rc=$? ($(basename "$3"))" >> "$OUT/$1"
}

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>&1 | tee "$OUT/summary.txt"

step "1. tests (limit ${T_TEST}s each)"
: > "$OUT/test.log"
run_test test.log "$T_TEST" "$KERNELS" '*'
run_test test.log "$T_TEST" "$TEST" '*'
run_test test.log "$T_TEST" "$CONFORMANCE" "$CUDA_SUITES"
run_test test.log "$T_TEST" "$VALUES" "$CUDA_SUITES"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^rc=' "$OUT/test.log"
grep -B2 -A14 'Failure' "$OUT/test.log" | head -120

SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
step "2. compute-sanitizer: ${SAN:-not found} (limit ${T_SAN}s each)"
if [ -n "${SAN:-}" ]; then
  : > "$OUT/sanitizer.log"
  san() {  # tool, binary, filter
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
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^rc=|Invalid|Race|Barrier' "$OUT/sanitizer.log" | head -30
fi

step "3. gpu_kernels_bench (limit ${T_BENCH}s)"
timeout "$T_BENCH" "$BENCH" --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
echo "rc=$?" >> "$OUT/bench.log"
grep -E '^device|^backend warm-up|bandwidth|^rc=' "$OUT/bench.log"

step "4. ratios (ceiling measured in this run) and goals"
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

step "summary"
{
  echo "tests: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/test.log" | tr '\n' ' ') $(grep -c '^rc=0' "$OUT/test.log")/4 rc=0"
  [ -f "$OUT/sanitizer.log" ] && echo "sanitizer: $(grep -c '^rc=0' "$OUT/sanitizer.log")/6 rc=0; $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | sort | uniq -c | tr '\n' ' ')"
  echo "below goal: $(grep -c below "$OUT/ratios.txt") rows"
} | tee -a "$OUT/summary.txt"
