#!/usr/bin/env bash
# Normalize paths on the GPU in one device call, under 5 minutes (issue #15): the tests
# of the path under study (FOCUS, a test-name stem: NormalizeClusterBulk, the default),
# then every other normalize variant test; compute-sanitizer on
# ${FOCUS}Small; every normalize variant timed per shape; a table of the default, the
# variants under study (NEW, bench row names joined by '|') and the best other one.
#
# Here (no GPU needed):
#   cmake -S . -B build-cuda -DGPUCOMPUTE_ENABLE_CUDA=ON -DCMAKE_BUILD_TYPE=Release
#   nice cmake --build build-cuda -j2 --target gpu_kernel_variants_test gpu_kernels_bench
#   /work/shared/tools/device-bundle .device/norm build-cuda/tests/gpu_kernel_variants_test build-cuda/bench/gpu_kernels_bench
#   rm -f .device/norm/lib/libcufft*   # the GPU machine has it in /usr/local/cuda/lib64
#   tar -C .device -cf - norm | xz -T2 -6 > .device/norm.txz   # ~17 MB (64 MiB carry)
# On the GPU machine (device tool: carry [".device/norm.txz"]; it has /usr/local/cuda/lib64
# and /usr/local/cuda/bin/compute-sanitizer):
#   bash bench/run_gpu_normalize.sh     # unpacks the bundle; logs under $OUT (or ./gpu-out)
set -u
BUNDLE=${BUNDLE:-.device/norm}
FOCUS=${FOCUS:-NormalizeClusterBulk}
NEW=${NEW:-cluster bulk|cluster bulk v4|cluster bulk half}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
[ -d "$BUNDLE" ] || tar -C "$(dirname "$BUNDLE")" -xJf "$BUNDLE.txz" || exit 1
export LD_LIBRARY_PATH="$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
VARIANTS="$BUNDLE/gpu_kernel_variants_test"
BENCH="$BUNDLE/gpu_kernels_bench"
T_FOCUS=${T_FOCUS:-90}
T_TEST=${T_TEST:-90}
T_SAN=${T_SAN:-45}
T_BENCH=${T_BENCH:-100}

step() { echo; echo "=== $* ($(date +%T))"; }
run_test() {  # limit, filter
  timeout "$1" "$VARIANTS" --gtest_color=no --gtest_filter="$2" >> "$OUT/test.log" 2>&1
  echo "rc=$? ($2)" >> "$OUT/test.log"
}

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee "$OUT/summary.txt"

step "1. tests (limits ${T_FOCUS}s, ${T_TEST}s)"
: > "$OUT/test.log"
run_test "$T_FOCUS" "GpuKernelVariants.${FOCUS}*"
run_test "$T_TEST" "GpuKernelVariants.Normalize*:-GpuKernelVariants.${FOCUS}*:*NormalizePipelineRowByRow"
grep -E '^\[       OK \]|^\[  FAILED  \]|^\[  PASSED|^\[  SKIPPED \] [0-9]|^rc=' "$OUT/test.log"
grep -B2 -A14 'Failure' "$OUT/test.log" | head -80

SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
step "2. compute-sanitizer: ${SAN:-not found} (limit ${T_SAN}s each)"
if [ -n "${SAN:-}" ]; then
  : > "$OUT/sanitizer.log"
  for tool in memcheck racecheck synccheck; do
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    [ "$tool" = racecheck ] && extra=(--racecheck-report hazard)
    GPUCOMPUTE_SANITIZER=1 timeout "$T_SAN" "$SAN" --tool "$tool" --error-exitcode 17 "${extra[@]}" \
      "$VARIANTS" --gtest_color=no --gtest_filter="GpuKernelVariants.${FOCUS}Small" \
      >> "$OUT/sanitizer.log" 2>&1
    echo "rc=$? ($tool)" >> "$OUT/sanitizer.log"
  done
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^rc=|Invalid|Race|Barrier|hazard' "$OUT/sanitizer.log" | head -30
fi

step "3. gpu_kernels_bench --only=normalize (limit ${T_BENCH}s)"
timeout "$T_BENCH" "$BENCH" --only=normalize --csv "$OUT/bench.csv" > "$OUT/bench.log" 2>&1
echo "rc=$?" >> "$OUT/bench.log"
grep -E '^device|bandwidth|^rc=' "$OUT/bench.log"
# What the default and the new variants run for the long rows:
grep -A1 -E '^  normalize .*x(50000|100000|400000|1000000) ' "$OUT/bench.log" | grep -v '^--$' |
  sed 's/; /\n      /g' | grep -E "normalize|default =|${NEW}" | head -60

step "4. per shape: ms (x D2D) of default, ${NEW}, the best other"
awk -F, -v new="$NEW" 'BEGIN { n = split(new, names, "|"); for (i = 1; i <= n; ++i) col[names[i]] = i }
NR > 1 && $1 ~ /^  / {
  key = $2 " " $3; v = $1; sub(/^ +/, "", v); sub(/ (sum|l1|l2|max_abs)$/, "", v)
  cell = sprintf("%.4f (%.2f)", $4, $9)
  if (v == "default") d[key] = cell
  else if (v in col) c[key, col[v]] = cell
  else if (!(key in best) || $4 < bestms[key]) { bestms[key] = $4; best[key] = v " " cell }
  keys[key] = 1
} END {
  printf "%-18s %-16s", "shape", "default"
  for (i = 1; i <= n; ++i) printf " %-16s", names[i]
  printf " %s\n", "best other"
  fflush()
  for (k in keys) {
    line = sprintf("%-18s %-16s", k, d[k])
    for (i = 1; i <= n; ++i) line = line sprintf(" %-16s", c[k, i])
    print line " " best[k] | "sort -V"
  }
  close("sort -V")
}' "$OUT/bench.csv" | tee "$OUT/table.txt"

step "summary"
{
  echo "tests: $(grep -cE '^\[       OK \]' "$OUT/test.log") ok, $(grep -cE '^\[  FAILED  \] GpuKernel' "$OUT/test.log") failed; $(grep '^rc=' "$OUT/test.log" | tr '\n' ' ')"
  [ -f "$OUT/sanitizer.log" ] && echo "sanitizer: $(grep '^rc=' "$OUT/sanitizer.log" | tr '\n' ' ') $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer.log" | sort | uniq -c | tr '\n' ' ')"
} | tee -a "$OUT/summary.txt"
