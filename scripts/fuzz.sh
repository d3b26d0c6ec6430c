#!/usr/bin/env bash
# Fuzzes request validation and the CPU execution path with libFuzzer, ASan and UBSan:
#   scripts/fuzz.sh [SECONDS]     (default 60)
# Installs clang if missing, builds tests/fuzz in build-fuzz (clang++, CPU only),
# writes the seed corpus, replays tests/fuzz/regressions/, then fuzzes for SECONDS.
# The corpus grows in build-fuzz/fuzz-corpus across runs; crashes are written to
# build-fuzz/fuzz-artifacts/. Ends with "N passed, M failed" (regressions + the run).
# Environment: GPUCOMPUTE_FUZZ_BUILD_DIR, GPUCOMPUTE_JOBS, GPUCOMPUTE_FUZZ_ARGS
# (extra libFuzzer flags, e.g. "-jobs=2 -workers=2").
set -euo pipefail

seconds=${1:-60}
case "$seconds" in
  '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS]" >&2; exit 2 ;;
esac
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GPUCOMPUTE_FUZZ_BUILD_DIR:-$repo/build-fuzz}
jobs=${GPUCOMPUTE_JOBS:-$(nproc)}
start=$(date +%s)

# shellcheck source=scripts/packages.sh
source "$repo/scripts/packages.sh"

# clang with the libFuzzer/sanitizer runtimes, plus the project's build dependencies.
packages=(clang llvm libclang-rt-dev cmake pkg-config libgrpc++-dev protobuf-compiler-grpc
          libprotobuf-dev protobuf-compiler libabsl-dev prometheus-cpp-dev libfftw3-dev libssl-dev)
install_missing_packages fuzz.sh "${packages[@]}"

# One run at a time per build directory: runs share the build, corpus and log.
mkdir -p "$build"
if command -v flock >/dev/null; then
  exec 9>"$build/.fuzz.lock"
  flock 9
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
  # -O1 -g without NDEBUG: fast enough to fuzz, readable stacks.
  cmake -S "$repo" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" -DGPUCOMPUTE_ENABLE_CUDA=OFF -DBUILD_TESTING=OFF \
    -DGPUCOMPUTE_FUZZ=ON
fi
cmake --build "$build" -j "$jobs" --target gpucompute_request_fuzzer gpucompute_fuzz_seeds
built=$(date +%s)

fuzzer=$build/tests/fuzz/gpucompute_request_fuzzer
seeds=$build/fuzz-seeds
corpus=$build/fuzz-corpus
artifacts=$build/fuzz-artifacts
log=$build/fuzz.log
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus" "$artifacts"
"$build/tests/fuzz/gpucompute_fuzz_seeds" "$seeds"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

passed=0
failed=0
# Inputs that once crashed; each must run clean now.
for f in "$repo"/tests/fuzz/regressions/*; do
  [ -f "$f" ] || continue
  if "$fuzzer" -runs=1 "$f" >"$build/regression.log" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "fuzz.sh: regression input $(basename "$f") fails:"
    grep -E "invariant violated|^    |ERROR: |SUMMARY" "$build/regression.log" | head -20 || true
  fi
done

echo "fuzz.sh: fuzzing for ${seconds}s (corpus $corpus, seeds $seeds)"
status=0
# shellcheck disable=SC2086  # GPUCOMPUTE_FUZZ_ARGS is a list of flags
"$fuzzer" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2560 -max_len=16384 \
  -dict="$repo/tests/fuzz/gpucompute.dict" -artifact_prefix="$artifacts/" \
  -print_final_stats=1 ${GPUCOMPUTE_FUZZ_ARGS:-} "$corpus" "$seeds" >"$log" 2>&1 || status=$?

runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9A-Za-z]*\).*/\1/p' <<<"$last")
if [ "$status" -eq 0 ]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "fuzz.sh: the fuzzer stopped with status $status; log $log:"
  grep -E -A1 "invariant violated" "$log" | head -4 || true
  grep -E -A16 "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error|ERROR: libFuzzer: (timeout|out-of-memory)" \
    "$log" | head -20 || true
  grep -E "Test unit written to" "$log" | tail -1 || true
  echo "fuzz.sh: reproduce with $fuzzer FILE; keep it as tests/fuzz/regressions/NAME once fixed"
fi
echo "fuzz.sh: ${runs:-0} executions (${rate:-0}/s), cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?};" \
  "build $((built - start))s, total $(($(date +%s) - start))s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
