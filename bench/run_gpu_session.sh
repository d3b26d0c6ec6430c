#!/usr/bin/env bash
# Small requests as calls of their own against the same requests on one open
# Compute.Session, in one device call, 1024-element float32 requests,
# on each server variant of VARIANTS (name:flags, e.g. the in-place run of tiny
# requests against the executor hop):
#   0. session_test (its servers on the CPU backend), client_session_test and
#      dynamic_batching_test (CUDA), executor_test;
#   1. C++ 1 in flight, normalize: calls (bench --callbacks) and session (--callbacks
#      --session) in alternate rounds on one server, beside a health check, and the
#      server's stage means of the session's requests;
#   2. the four-op mix on one connection at CURVE in flight, calls against --session
#      (8 sessions on the connection); with SESSIONS, that many sessions per
#      connection at 64 and 128; then 64 over 4 connections;
#   3. Python, 1 in flight: bench/ping_pong.py (unary call, session, a chunk of an
#      open StreamingCompute stream, health check);
#   4. the same on the CPU backend of the same host (BACKENDS="cuda cpu").
#
# Here:   cmake --build build-cuda -j2 --target gpucompute-server gpucompute-cli session_test \
#             client_session_test dynamic_batching_test executor_test
#         /work/shared/tools/device-bundle .device/session build-cuda/server/gpucompute-server \
#             build-cuda/client/gpucompute-cli build-cuda/tests/{session,client_session}_test \
#             build-cuda/tests/{dynamic_batching,executor}_test
#         (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# There:  bash bench/run_gpu_session.sh   (carry .device/session.txz and client/python/gpucompute/_proto)
set -u
BUNDLE=${BUNDLE:-.device/session}
OUT=${OUT:-gpu-out}
PYTHON=${PYTHON:-python3}
BACKENDS=${BACKENDS:-cuda cpu}
VARIANTS=${VARIANTS:-in_place:--in_place_work=16384 queued:--in_place_work=0}
ROUNDS=${ROUNDS:-3}
CURVE=${CURVE:-1 4 16 32 64 128}
CURVE_ROUNDS=${CURVE_ROUNDS:-2}
SESSIONS=${SESSIONS:-}  # e.g. "1 4 8": sessions per connection compared at 64 and 128 in flight
SECONDS_PER_RUN=${SECONDS_PER_RUN:-4}
TESTS=${TESTS:-1}  # 0: skip step 0 (a second pass in the same call)
mkdir -p "$OUT"
[ -d "$BUNDLE" ] || tar -C "$(dirname "$BUNDLE")" -xJf "$BUNDLE.txz" || exit 1
export LD_LIBRARY_PATH="$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
CLI="$BUNDLE/gpucompute-cli"
PORT=50181
METRICS=50182
MIX=normalize:1,haversine:1,discount:1,lombscargle:1
step() { echo; echo "=== $* ($(date +%T))"; }

bench() {  # LABEL IN_FLIGHT MIX EXTRA...: one C++ bench run, its line into the table
  local label=$1 c=$2 mix=$3; shift 3
  local log="$OUT/bench_${BACKEND}_${VARIANT}_${label// /_}_c${c}.txt"
  timeout 60 "$CLI" --target=127.0.0.1:$PORT bench --concurrency=$c --duration=${SECONDS_PER_RUN}s \
    --size=1024 --dtype=float32 --mix=$mix "$@" > "$log" 2>&1
  local tput lat
  tput=$(awk '/^throughput/ {print $2}' "$log")
  lat=$(awk '/^latency/ {print $3, $6, $9}' "$log")  # p50 p90 p99 in ms
  printf '%-5s %-9s %-22s %4d %10s req/s  p50/p90/p99 ms %s\n' "$BACKEND" "$VARIANT" "$label" "$c" \
    "${tput:-FAIL}" "${lat:-}" | tee -a "$OUT/table.txt"
}

step "device"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
echo "$(nproc) cores"

step "0. session_test (CPU backend), client_session_test and dynamic_batching_test (CUDA backend), executor_test"
for t in session_test client_session_test dynamic_batching_test executor_test; do
  [ "$TESTS" = 1 ] || break
  GPUCOMPUTE_TEST_BACKEND=cuda timeout 120 "$BUNDLE/$t" --gtest_color=no > "$OUT/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.log" | tr '\n' ' ')"
done

for BACKEND in $BACKENDS; do
for variant in $VARIANTS; do
  VARIANT=${variant%%:*}
  FLAGS=${variant#*:}
  step "server, $BACKEND backend, $VARIANT: $FLAGS"
  # shellcheck disable=SC2086  # FLAGS is a list of flags
  "$BUNDLE/gpucompute-server" --backend=$BACKEND --address=127.0.0.1:$PORT \
    --metrics_address=127.0.0.1:$METRICS $FLAGS > "$OUT/server_${BACKEND}_$VARIANT.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 150); do
    "$CLI" --target=127.0.0.1:$PORT --timeout=1s health > /dev/null 2>&1 && break
    sleep 0.1
  done
  "$CLI" --target=127.0.0.1:$PORT bench --concurrency=16 --duration=1s --size=1024 --mix=$MIX \
    --callbacks --session > /dev/null 2>&1  # warm-up
  step "1. C++ 1 in flight ($BACKEND, $VARIANT)"
  for r in $(seq "$ROUNDS"); do
    bench "calls normalize" 1 normalize:1 --callbacks
    bench "session normalize" 1 normalize:1 --callbacks --session
  done
  bench "health" 1 health:1
  $PYTHON bench/small_requests.py stages --metrics http://127.0.0.1:$METRICS/metrics -- \
    "$CLI" --target=127.0.0.1:$PORT bench --concurrency=1 --duration=${SECONDS_PER_RUN}s \
    --size=1024 --dtype=float32 --mix=normalize:1 --callbacks --session 2>&1 |
    grep -A9 "stage means" | sed "s/^/$BACKEND $VARIANT session c1 /" | tee -a "$OUT/table.txt"
  step "2. the mix on one connection, $CURVE in flight ($BACKEND, $VARIANT)"
  for r in $(seq "$CURVE_ROUNDS"); do
    for c in $CURVE; do
      bench "calls mix" $c $MIX --callbacks
      bench "session mix" $c $MIX --callbacks --session
    done
  done
  if [ -n "$SESSIONS" ]; then
    step "2b. sessions per connection: $SESSIONS ($BACKEND, $VARIANT)"
    for c in 64 128; do
      for n in $SESSIONS; do
        bench "${n} sessions mix" $c $MIX --callbacks --session --sessions_per_connection=$n
      done
    done
  fi
  bench "calls mix 4 conns" 64 $MIX --callbacks --connections=4
  bench "4x2 sessions mix" 64 $MIX --callbacks --session --sessions_per_connection=2 --connections=4
  $PYTHON bench/small_requests.py batches --metrics http://127.0.0.1:$METRICS/metrics 2>/dev/null |
    sed "s/^/$BACKEND $VARIANT /" | tee -a "$OUT/table.txt"
  step "3. Python 1 in flight ($BACKEND, $VARIANT)"
  timeout 120 "$PYTHON" bench/ping_pong.py --target 127.0.0.1:$PORT --count 3000 2>&1 |
    sed "s/^/$BACKEND $VARIANT /" | tee -a "$OUT/table.txt"
  kill -TERM "$SERVER"
  wait "$SERVER"
done
done

step "table"
cat "$OUT/table.txt"
