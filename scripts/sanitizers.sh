#!/usr/bin/env bash
# Builds the whole project and its tests with sanitizers (CPU backend only) and runs ctest:
#   scripts/sanitizers.sh [asan|tsan|all]     (default all; asan first, then tsan)
#   asan: -fsanitize=address,undefined in build-asan
#   tsan: -fsanitize=thread in build-tsan, with tests/fuzz/tsan_absl_sync.cc preloaded
#         (TSan annotations for Debian's uninstrumented absl::Mutex) and the
#         suppressions in tests/fuzz/tsan.supp (see tests/fuzz/README.md)
# Sanitizer reports of every process (test binaries and the servers they start) go
# to build-*/sanitizer-logs/; any report there fails the run, even when the test
# that started the process passed. Ends with "N passed, M failed" (one per mode).
# Environment: CXX (default g++), GPUCOMPUTE_JOBS, GPUCOMPUTE_SAN_BUILD_ROOT,
# GPUCOMPUTE_CTEST_JOBS (parallel tests; default GPUCOMPUTE_JOBS, halved for tsan),
# CTEST_ARGS (extra ctest arguments, e.g. "-R server_test").
set -euo pipefail

mode=${1:-all}
case "$mode" in
  asan | tsan) modes=("$mode") ;;
  all) modes=(asan tsan) ;;
  *) echo "usage: scripts/sanitizers.sh [asan|tsan|all]" >&2; exit 2 ;;
esac
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=${GPUCOMPUTE_SAN_BUILD_ROOT:-$repo}
jobs=${GPUCOMPUTE_JOBS:-$(nproc)}
cxx=${CXX:-g++}

# shellcheck source=scripts/packages.sh
source "$repo/scripts/packages.sh"

packages=(build-essential cmake pkg-config libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev
          protobuf-compiler libabsl-dev prometheus-cpp-dev libfftw3-dev libssl-dev libgtest-dev libgmock-dev
          libbenchmark-dev)
case "$cxx" in
  *clang*) packages+=(clang libclang-rt-dev) ;;
  *) packages+=(libasan8 libubsan1 libtsan2) ;;
esac
install_missing_packages sanitizers.sh "${packages[@]}"

passed=0
failed=0
summary=()
for m in "${modes[@]}"; do
  build=$root/build-$m
  logs=$build/sanitizer-logs
  case "$m" in
    asan)
      flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
      link="-fsanitize=address,undefined"
      ;;
    tsan)
      flags="-fsanitize=thread -fno-omit-frame-pointer"
      link="-fsanitize=thread"
      ;;
  esac
  start=$(date +%s)
  echo "== sanitizers.sh: $m ($cxx $flags) in $build"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    # -O1 -g without NDEBUG: readable stacks at a bearable speed.
    cmake -S "$repo" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" "-DCMAKE_CXX_FLAGS=$flags" \
      "-DCMAKE_EXE_LINKER_FLAGS=$link" "-DCMAKE_SHARED_LINKER_FLAGS=$link" \
      -DGPUCOMPUTE_ENABLE_CUDA=OFF
  fi
  ok=1
  cmake --build "$build" -j "$jobs" || ok=0
  built=$(date +%s)
  rm -rf "$logs"
  mkdir -p "$logs"
  preload=
  if [ "$m" = tsan ] && [ "$ok" -eq 1 ]; then
    # Debian's Abseil is not built with TSan: annotate absl::Mutex from the outside.
    preload=$build/libtsan_absl_sync.so
    "$cxx" -std=c++20 -shared -fPIC -O1 -g "$repo/tests/fuzz/tsan_absl_sync.cc" -o "$preload" -ldl \
      || ok=0
    absl_sync=$(ldconfig -p | sed -n 's/.*libabsl_synchronization.so.* => //p' | head -1)
    # grep without -q reads all of nm's output: with pipefail, an early exit of
    # grep -q can fail nm with SIGPIPE and print this warning for the right library.
    if [ -n "$absl_sync" ] && ! nm -D "$absl_sync" | grep ' _ZN4absl7debian35Mutex4LockEv$' >/dev/null; then
      echo "sanitizers.sh: warning: $absl_sync is not Debian 12's Abseil 20220623;" \
        "tsan_absl_sync.cc does not match it and absl::Mutex stays invisible to TSan"
    fi
  fi
  # Under TSan every test process runs many threads (CPU kernel pool, executor, gRPC
  # pollers), each several times slower. Two such tests per core oversubscribe a small
  # machine: on 2 cores, faults_test's slow LombScargle requests (3-10 s alone) then
  # outlast the 20-30 s drain grace periods of the drain tests. Half the jobs for tsan.
  ctest_jobs=${GPUCOMPUTE_CTEST_JOBS:-$jobs}
  if [ "$m" = tsan ] && [ -z "${GPUCOMPUTE_CTEST_JOBS:-}" ]; then
    ctest_jobs=$(( jobs > 1 ? jobs / 2 : 1 ))
  fi
  status=0
  if [ "$ok" -eq 1 ]; then
    # log_path: one file per process that reports, children included.
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"
    export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:log_path=$logs/asan"
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:log_path=$logs/tsan:suppressions=$repo/tests/fuzz/tsan.supp"
    # shellcheck disable=SC2086  # CTEST_ARGS is a list
    (cd "$build" && LD_PRELOAD=$preload ctest --output-on-failure -j "$ctest_jobs" --timeout 900 \
      ${CTEST_ARGS:-}) >"$build/ctest.log" 2>&1 || status=$?
    unset UBSAN_OPTIONS ASAN_OPTIONS TSAN_OPTIONS
    grep -E "tests passed|Total Test time" "$build/ctest.log" || true
    [ "$status" -eq 0 ] || grep -E -A3 "^The following tests FAILED" "$build/ctest.log" || true
    [ "$status" -eq 0 ] || sed -n '/The following tests FAILED/,$p' "$build/ctest.log" | head -40
  else
    status=1
  fi
  reports=$(find "$logs" -type f | sort)
  if [ -n "$reports" ]; then
    status=1
    echo "sanitizers.sh: $m reports in $logs:"
    for r in $reports; do
      echo "--- $r"
      head -60 "$r"
    done
  fi
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
  summary+=("$m: $([ "$status" -eq 0 ] && echo passed || echo FAILED), build $((built - start))s, ctest $(($(date +%s) - built))s")
done

printf 'sanitizers.sh: %s\n' "${summary[@]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
