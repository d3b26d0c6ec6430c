#!/usr/bin/env bash
# Small requests on the GPU, in one device call: round trip and
# throughput of 1024-element float32 requests through the C++ CLI bench and the
# Python client, where a request spends its time on the server, and the CPU a
# request costs.
#
# Here:   cmake --build build-cuda -j2 --target gpucompute-server gpucompute-cli \
#             small_results_test dynamic_batching_test run_from_host_test
#         /work/shared/tools/device-bundle .device/small build-cuda/server/gpucompute-server \
#             build-cuda/client/gpucompute-cli build-cuda/tests/small_results_test \
#             build-cuda/tests/dynamic_batching_test build-cuda/tests/run_from_host_test
#         (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# There:  BUNDLE=.device/small MAIN_SERVER=.device/small-main/gpucompute-server \
#             bash bench/run_gpu_small.sh
#         (carry .device and client/python/gpucompute/_proto). MAIN_SERVER (optional): a
#         gpucompute-server built before the one-wait path (49cbf47) in its own folder
#         (cp, no bundle: the libraries are the bundle's), measured as "main" beside it.
# The CPU table (no GPU): BACKEND=cpu BUNDLE=DIR bash bench/run_gpu_small.sh, DIR
# holding gpucompute-server and gpucompute-cli.
#
# 0. run_from_host_test (small requests on one stream, one wait, against the
#    step-by-step path), small_results_test and dynamic_batching_test on CUDA.
# 1. 1 in flight, unbatched (--batching=false), adaptive (the defaults),
#    adaptive with --small_lane_spin=200us and (MAIN_SERVER) main's adaptive
#    server side by side: the servers up at once
#    and measured in alternate rounds, so that drift of the machine falls on all;
#    next to the floor, a health check on the same channel (C++ and Python), and
#    the adaptive server's results read as streams (bench --unary_results=false)
#    rather than as unary calls. Then the Python floor: a bare gRPC health check
#    in fresh processes under variants of gRPC's environment and channel options,
#    with the grpcio and Python versions (why Python's floor is above C++'s), and
#    the adaptive server's stage means of each operation of the mix at 1 in flight.
# 2. Each mode on a fresh server, the four-op mix at 4, 16, 64 and 128 in flight:
#      before     --batching=false, three messages per result (bench
#                 --complete_results=false), and on CUDA --cuda_sync=spin
#      unbatched  the defaults but --batching=false
#      after      the defaults (adaptive batching)
#      main       the defaults on MAIN_SERVER, when given
#    with the server's stage means and its CPU per request at 64 in flight, split
#    by server thread name (executor, gRPC, CUDA threads).
# 3. The after server under bench --callbacks at 64 and 128 in flight: the same
#    closed loop with the client's requests as callback slots rather than 64
#    threads on the blocking API, so that the client takes less of the cores.
# 4. The after server with the load spread over 4 connections (--connections=4),
#    as several callers would bring it: one HTTP/2 connection is one transport
#    that gRPC works through a message at a time, on each side.
set -u
BUNDLE=${BUNDLE:-.device/small}
BACKEND=${BACKEND:-cuda}
PYTHON=${PYTHON:-python3}
OUT=${OUT:-gpu-out}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-4}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
CLI="$BUNDLE/gpucompute-cli"
PORT=50161 PORT_B=50162 PORT_C=50163 PORT_D=50164
METRICS=9571 METRICS_B=9572 METRICS_C=9573 METRICS_D=9574
MAIN_SERVER=${MAIN_SERVER:-}
[ -n "$MAIN_SERVER" ] && [ ! -x "$MAIN_SERVER" ] && { echo "MAIN_SERVER $MAIN_SERVER is not there"; MAIN_SERVER=; }
MIX=normalize:1,haversine:1,discount:1,lombscargle:1
TICKS=$(getconf CLK_TCK)
NPROC=$(nproc)
step() { echo; echo "=== $* ($(date +%T))"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # user + system
thread_ticks() {  # PID: "NAME TICKS THREADS" per thread name (user + system)
  local t s rest
  for t in /proc/$1/task/*; do
    s=$(cat "$t/stat" 2>/dev/null) || continue
    rest=${s##*) }; s=${s#*(}
    set -- $rest; echo "${s%%)*} $(( ${12} + ${13} ))"
  done | awk '{ticks[$1] += $2; n[$1]++} END {for (k in ticks) print k, ticks[k], n[k]}'
}

start_server() {  # NAME PORT METRICS FLAGS...: starts it (SERVER_BIN, else the bundle's), waits until it serves; sets SERVER
  local name=$1 port=$2 metrics=$3; shift 3
  "${SERVER_BIN:-$BUNDLE/gpucompute-server}" --backend=$BACKEND --address=127.0.0.1:$port \
    --metrics_address=127.0.0.1:$metrics "$@" > "$OUT/server_$name.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 150); do
    "$CLI" --target=127.0.0.1:$port --timeout=1s health > /dev/null 2>&1 && return
    sleep 0.1
  done
  echo "server $name did not start"; tail -5 "$OUT/server_$name.log"
}

stop_server() { kill -TERM "$1"; wait "$1"; }

bench() {  # MODE PORT IN_FLIGHT MIX EXTRA...: one C++ bench run, its line into the table
  local mode=$1 port=$2 c=$3 mix=$4; shift 4
  local log="$OUT/bench_${mode}_c${c}_${mix%%:*}.txt"
  timeout 60 "$CLI" --target=127.0.0.1:$port bench --concurrency=$c --duration=${SECONDS_PER_RUN}s \
    --size=1024 --dtype=float32 --mix=$mix "$@" > "$log" 2>&1
  local tput lat label=${mix%%:*}
  [[ $mix == *,* ]] && label=mix
  tput=$(awk '/^throughput/ {print $2}' "$log")
  lat=$(awk '/^latency/ {print $3, $6, $9}' "$log")  # p50 p90 p99 in ms
  printf '%-9s %-9s %4d %10s req/s  p50/p90/p99 ms %s\n' "$mode" "$label" "$c" "${tput:-FAIL}" "${lat:-}" | tee -a "$OUT/table.txt"
}

stages() {  # MODE METRICS IN_FLIGHT MIX PORT EXTRA...: stage means around one bench run
  local mode=$1 metrics=$2 c=$3 mix=$4 port=$5; shift 5
  $PYTHON bench/small_requests.py stages --metrics http://127.0.0.1:$metrics/metrics -- \
    "$CLI" --target=127.0.0.1:$port bench --concurrency=$c --duration=${SECONDS_PER_RUN}s \
    --size=1024 --dtype=float32 --mix=$mix "$@" > "$OUT/stages_${mode}_c${c}.txt" 2>&1
}

costed() {  # MODE PORT IN_FLIGHT EXTRA...: the mix with the server's and the client's CPU per request
  local mode=$1 port=$2 c=$3; shift 3
  local log="$OUT/bench_${mode}_c${c}_costed.txt" before after client threads_before
  threads_before=$(thread_ticks "$SERVER")
  before=$(cpu_ticks "$SERVER")
  client=$( { TIMEFORMAT='%U %S'; time timeout 60 "$CLI" --target=127.0.0.1:$port bench --concurrency=$c \
    --duration=${SECONDS_PER_RUN}s --size=1024 --dtype=float32 --mix=$MIX "$@" > "$log" 2>&1; } 2>&1 )
  after=$(cpu_ticks "$SERVER")
  local tput lat n
  tput=$(awk '/^throughput/ {print $2}' "$log")
  lat=$(awk '/^latency/ {print $3, $6, $9}' "$log")
  n=$(awk '/^requests/ {print $2}' "$log")
  printf '%-9s %-9s %4d %10s req/s  p50/p90/p99 ms %s\n' "$mode" "mix" "$c" "${tput:-FAIL}" "${lat:-}" | tee -a "$OUT/table.txt"
  awk -v m="$mode" -v s=$((after - before)) -v t=$TICKS -v c="$client" -v n="${n:-0}" -v p=$NPROC 'BEGIN {
    split(c, u, " "); if (n == 0) exit
    printf "%-9s cpu per request: server %.0f us, client %.0f us (of %d cores)\n", m, s / t / n * 1e6, (u[1] + u[2]) / n * 1e6, p
  }' | tee -a "$OUT/table.txt"
  # Which server threads spent it: ours are gc-exec (gc-exec-small: the small lane),
  # gc-timer and gc-cpu-pool (common/thread_name.h); gRPC's nexting_thread and
  # default-executo; CUDA's cuda-*; the process's first thread gpucompute-serv.
  { echo "$threads_before" | sed 's/^/B /'; thread_ticks "$SERVER" | sed 's/^/A /'; } |
    awk -v m="$mode" -v t=$TICKS -v n="${n:-0}" '
      $1 == "B" {b[$2] = $3} $1 == "A" {a[$2] = $3; k[$2] = $4}
      END {if (n == 0) exit; line = ""
        for (x in a) if (a[x] - b[x] > 0) line = line sprintf(" %s %.0f (%d)", x, (a[x] - b[x]) / t / n * 1e6, k[x])
        printf "%-9s server us per request by thread (threads):%s\n", m, line}' | tee -a "$OUT/table.txt"
}

step "device"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
echo "$NPROC cores"

step "run_from_host_test, small_results_test and dynamic_batching_test on the CUDA backend"
[ "$BACKEND" = cuda ] && for t in run_from_host_test small_results_test dynamic_batching_test; do
  GPUCOMPUTE_TEST_BACKEND=cuda timeout 120 "$BUNDLE/$t" --gtest_color=no > "$OUT/$t.log" 2>&1
  echo "$t rc=$?"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]' "$OUT/$t.log"
  grep -A8 'Failure' "$OUT/$t.log" | head -30
done

: > "$OUT/table.txt"
step "1 in flight: unbatched, adaptive and adaptive with a spinning small lane side by side"
# name port metrics flags: all up at once, measured in alternate rounds.
SIDE=("unbatched $PORT $METRICS --batching=false" "after $PORT_B $METRICS_B"
      "spin $PORT_C $METRICS_C --small_lane_spin=200us")
[ -n "$MAIN_SERVER" ] && SIDE+=("main $PORT_D $METRICS_D")
PIDS=()
for s in "${SIDE[@]}"; do
  set -- $s; name=$1 port=$2 metrics=$3; shift 3
  binary=; [ "$name" = main ] && binary=$MAIN_SERVER
  SERVER_BIN=$binary start_server ${name}1 $port $metrics "$@"; PIDS+=($SERVER)
  stages $name $metrics 1 normalize:1 $port
done
for round in 1 2; do
  bench floor $PORT 1 health:1
  for s in "${SIDE[@]}"; do set -- $s; bench $1 $2 1 normalize:1; done
  bench streamed $PORT_B 1 normalize:1 --unary_results=false  # after, read as a stream
done
for s in "${SIDE[@]}"; do
  set -- $s
  timeout 60 $PYTHON bench/small_requests.py python-latency --target 127.0.0.1:$2 \
    --seconds $SECONDS_PER_RUN 2>&1 | tee "$OUT/python_$1.txt" | sed "s/^/$1 python: /" | tee -a "$OUT/table.txt"
done
timeout 90 $PYTHON bench/small_requests.py python-floor --target 127.0.0.1:$PORT_B \
  --seconds $((2 * SECONDS_PER_RUN)) 2>&1 | tee -a "$OUT/table.txt"
$PYTHON bench/small_requests.py batches --metrics http://127.0.0.1:$METRICS_B/metrics 2>/dev/null \
  | sed 's/^/after c1: /' | tee -a "$OUT/table.txt"
stages after_mix $METRICS_B 1 $MIX $PORT_B  # each operation's stages at 1 in flight
for pid in "${PIDS[@]}"; do stop_server $pid; done

run_mode() {  # MODE SERVER_FLAGS CLI_FLAGS: the mix at 4..128 in flight on a fresh server
  local mode=$1 server_flags=$2 cli_flags=$3
  step "$mode: server $server_flags, bench $cli_flags"
  start_server $mode $PORT $METRICS $server_flags
  for c in 4 16; do bench "$mode" $PORT $c $MIX $cli_flags; done
  stages "$mode" $METRICS 64 $MIX $PORT $cli_flags
  costed "$mode" $PORT 64 $cli_flags
  bench "$mode" $PORT 128 $MIX $cli_flags
  $PYTHON bench/small_requests.py batches --metrics http://127.0.0.1:$METRICS/metrics 2>/dev/null | tee -a "$OUT/table.txt"
  stop_server $SERVER
}

if [ "$BACKEND" = cuda ]; then
  run_mode before "--cuda_sync=spin --batching=false" "--complete_results=false"
else
  run_mode before "--batching=false" "--complete_results=false"
fi
run_mode unbatched "--batching=false" ""
run_mode after "" ""
[ -n "$MAIN_SERVER" ] && SERVER_BIN=$MAIN_SERVER run_mode main "" ""

step "after, the load from bench --callbacks (requests in flight as callback slots, not threads)"
start_server after-cb $PORT $METRICS
costed after-cb $PORT 64 --callbacks
bench after-cb $PORT 128 $MIX --callbacks
stop_server $SERVER

step "after, the load spread over 4 connections (bench --connections=4), threads and callback slots"
start_server after-4c $PORT $METRICS
stages after-4c $METRICS 64 $MIX $PORT --connections=4
costed after-4c $PORT 64 --connections=4
bench after-4c $PORT 128 $MIX --connections=4
costed cb-4c $PORT 64 --connections=4 --callbacks
bench cb-4c $PORT 128 $MIX --connections=4 --callbacks
stop_server $SERVER

step "stage means (us per request; queue = the executor hop)"
for f in "$OUT"/stages_*.txt; do echo "-- $(basename "$f" .txt)"; grep -A8 '^server stage' "$f"; done
step "table: mode, mix, in flight, req/s, latency"
cat "$OUT/table.txt"
