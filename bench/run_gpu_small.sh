#!/usr/bin/env bash
# Small requests on the GPU (issue 13), in one device call: round trip and
# throughput of 1024-element float32 requests through the C++ CLI bench and the
# Python client, and where a request spends its time on the server.
#
# Here:   cmake --build build-cuda -j2 --target gpucompute-server gpucompute-cli \
#             small_results_test dynamic_batching_test
#         /work/shared/tools/device-bundle .device/small build-cuda/server/gpucompute-server \
#             build-cuda/client/gpucompute-cli build-cuda/tests/small_results_test \
#             build-cuda/tests/dynamic_batching_test
#         (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# There:  BUNDLE=.device/small bash bench/run_gpu_small.sh
#         (carry .device and client/python/gpucompute/_proto)
# The CPU table (no GPU): BACKEND=cpu BUNDLE=DIR bash bench/run_gpu_small.sh, DIR
# holding gpucompute-server and gpucompute-cli; BEFORE_BUNDLE=DIR2 and
# BEFORE_PYTHONPATH=SRC/client/python run the before mode on an older build
# instead (with no flags).
#
# Modes, each on a fresh CUDA server:
#   before  --cuda_sync=spin --batching=false and the bench's
#           --complete_results=false: the old synchronization, no batching and
#           three messages per result (the rest of the server as it is now).
#   unbatched  the defaults but --batching=false.
#   after   the defaults.
# For each: 1 in flight normalize (C++ and Python), then the four-op mix at 4,
# 16, 64 and 128 in flight; the server's stage means around the 1 and 64 runs.
set -u
BUNDLE=${BUNDLE:-.device/small}
BACKEND=${BACKEND:-cuda}
BEFORE_BUNDLE=${BEFORE_BUNDLE:-}
PYTHON=${PYTHON:-python3}
OUT=${OUT:-gpu-out}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-4}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PORT=50161
METRICS=9571
MIX=normalize:1,haversine:1,discount:1,lombscargle:1
step() { echo; echo "=== $* ($(date +%T))"; }

step "device"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
nproc

step "small_results_test and dynamic_batching_test on the CUDA backend"
[ "$BACKEND" = cuda ] && for t in small_results_test dynamic_batching_test; do
  GPUCOMPUTE_TEST_BACKEND=cuda timeout 90 "$BUNDLE/$t" --gtest_color=no > "$OUT/$t.log" 2>&1
  echo "$t rc=$?"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]' "$OUT/$t.log"
  grep -A8 'Failure' "$OUT/$t.log" | head -30
done

bench() {  # MODE IN_FLIGHT MIX EXTRA...: one C++ bench run, its lines into the table
  local mode=$1 c=$2 mix=$3; shift 3
  local log="$OUT/bench_${mode}_c${c}_${mix%%:*}.txt"
  timeout 60 "$CLI" --target=127.0.0.1:$PORT bench --concurrency=$c --duration=${SECONDS_PER_RUN}s \
    --size=1024 --dtype=float32 --mix=$mix "$@" > "$log" 2>&1
  local tput lat label=${mix%%:*}
  [[ $mix == *,* ]] && label=mix
  tput=$(awk '/^throughput/ {print $2}' "$log")
  lat=$(awk '/^latency/ {print $3, $6, $9}' "$log")  # p50 p90 p99 in ms
  printf '%-9s %-9s %4d %10s req/s  p50/p90/p99 ms %s\n' "$mode" "$label" "$c" "${tput:-FAIL}" "${lat:-}" | tee -a "$OUT/table.txt"
}

run_mode() {  # MODE SERVER_FLAGS CLI_FLAGS [BINARIES [PYTHONPATH]]
  local mode=$1 server_flags=$2 cli_flags=$3 bin=${4:-$BUNDLE} pythonpath=${5:-$PYTHONPATH}
  CLI="$bin/gpucompute-cli"
  step "$mode: $bin, server $server_flags, bench $cli_flags"
  "$bin/gpucompute-server" --backend=$BACKEND --address=127.0.0.1:$PORT \
    --metrics_address=127.0.0.1:$METRICS $server_flags > "$OUT/server_$mode.log" 2>&1 &
  local server=$!
  for _ in $(seq 150); do
    "$CLI" --target=127.0.0.1:$PORT --timeout=1s health > /dev/null 2>&1 && break
    sleep 0.1
  done
  $PYTHON bench/small_requests.py stages --metrics http://127.0.0.1:$METRICS/metrics -- \
    "$CLI" --target=127.0.0.1:$PORT bench --concurrency=1 --duration=${SECONDS_PER_RUN}s \
    --size=1024 --dtype=float32 --mix=normalize:1 $cli_flags > "$OUT/stages_${mode}_c1.txt" 2>&1
  bench "$mode" 1 normalize:1 $cli_flags
  PYTHONPATH=$pythonpath timeout 60 $PYTHON bench/small_requests.py python-latency --target 127.0.0.1:$PORT \
    --seconds $SECONDS_PER_RUN 2>&1 | tee "$OUT/python_$mode.txt" | sed "s/^/$mode python: /" | tee -a "$OUT/table.txt"
  for c in 4 16; do bench "$mode" $c $MIX $cli_flags; done
  $PYTHON bench/small_requests.py stages --metrics http://127.0.0.1:$METRICS/metrics -- \
    "$CLI" --target=127.0.0.1:$PORT bench --concurrency=64 --duration=${SECONDS_PER_RUN}s \
    --size=1024 --dtype=float32 --mix=$MIX $cli_flags > "$OUT/stages_${mode}_c64.txt" 2>&1
  awk -v m="$mode" '/^throughput/ {printf "%-9s mix         64 %10s req/s  (under the stage scrape)\n", m, $2}' \
    "$OUT/stages_${mode}_c64.txt" | tee -a "$OUT/table.txt"
  bench "$mode" 128 $MIX $cli_flags
  curl -s http://127.0.0.1:$METRICS/metrics > "$OUT/metrics_$mode.txt" 2>/dev/null
  $PYTHON bench/small_requests.py batches --metrics http://127.0.0.1:$METRICS/metrics 2>/dev/null | tee -a "$OUT/table.txt"
  kill -TERM $server; wait $server
}

: > "$OUT/table.txt"
if [ -n "$BEFORE_BUNDLE" ]; then
  run_mode before "" "" "$BEFORE_BUNDLE" "${BEFORE_PYTHONPATH:-$PYTHONPATH}"
elif [ "$BACKEND" = cuda ]; then
  run_mode before "--cuda_sync=spin --batching=false" "--complete_results=false"
else
  run_mode before "--batching=false" "--complete_results=false"
fi
run_mode unbatched "--batching=false" ""
run_mode after "" ""

step "stage means (us per request; queue = the executor hop)"
for f in "$OUT"/stages_*.txt; do echo "-- $(basename "$f" .txt)"; grep -A8 '^server stage' "$f"; done
step "table: mode, mix, in flight, req/s, latency"
cat "$OUT/table.txt"
