#!/usr/bin/env bash
# Small requests: round trip and throughput of 1024-element float32 requests through the
# C++ CLI's bench and the Python client, where a request spends its time on the server,
# and the CPU a request costs; each section one table.
#
# Here (no GPU needed):
#   cmake -S . -B build-cuda -DGPUCOMPUTE_ENABLE_CUDA=ON -DCMAKE_BUILD_TYPE=Release
#   nice cmake --build build-cuda -j2 --target gpucompute-server gpucompute-cli \
#       run_from_host_test small_results_test dynamic_batching_test session_test \
#       client_session_test executor_test gpu_small_op_bench
#   /work/shared/tools/device-bundle .device/small build-cuda/server/gpucompute-server \
#       build-cuda/client/gpucompute-cli build-cuda/tests/{run_from_host,small_results}_test \
#       build-cuda/tests/{dynamic_batching,session,client_session,executor}_test \
#       build-cuda/bench/gpu_small_op_bench
#   (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# On the GPU machine (device tool: carry [".device", "client/python/gpucompute/_proto"]):
#   bash bench/run_gpu_small.sh [SECTION...]     # logs under $OUT (or ./gpu-out)
# Without a GPU: BACKEND=cpu BUNDLE=build bash bench/run_gpu_small.sh latency load
#
# Sections (default: tests latency load, one device call; session in one of its own,
# replicas and gpu_part in another):
#   tests     run_from_host_test (small requests on one stream, one wait), small_results_test,
#             dynamic_batching_test, client_session_test on the CUDA backend, session_test
#             (its servers on the CPU backend), executor_test
#   latency   1 in flight: unbatched (--batching=false), adaptive (the defaults), adaptive
#             with --small_lane_spin=200us and (MAIN_SERVER) an older server side by side,
#             up at once and measured in alternate rounds so that the machine's drift falls
#             on all; beside them a health check on the same channel (C++ and Python), and
#             the adaptive server's results read as streams (bench --unary_results=false).
#             Then the Python floor (a bare gRPC health check in fresh processes under
#             variants of gRPC's environment and channel options) and the adaptive
#             server's stage means of each operation of the mix
#   load      each mode on a fresh server, the four-op mix at 4, 16, 64 and 128 in flight,
#             with stage means and CPU per request at 64, split by server thread:
#               before     --batching=false, three messages per result (bench
#                          --complete_results=false), and on CUDA --cuda_sync=spin
#               unbatched  the defaults but --batching=false
#               after      the defaults (adaptive batching)
#               main       the defaults on MAIN_SERVER, when given
#             then after under bench --callbacks (requests as callback slots, not client
#             threads) and over 4 connections (one HTTP/2 connection is one transport gRPC
#             works through a message at a time, on each side)
#   session   calls of their own against the same requests on one open Compute.Session, on
#             each backend of BACKENDS ("cuda cpu") and server variant of VARIANTS
#             (name:flags; default in-place run of tiny requests against the executor
#             hop): C++ at 1 in flight and the server's stage means of the session's
#             requests; the mix at CURVE in flight on one connection (SESSIONS="1 4 8":
#             that many sessions per connection at 64 and 128), then over 4 connections;
#             Python at 1 in flight (bench/ping_pong.py: unary call, session, a chunk of
#             an open StreamingCompute stream, health check)
#   replicas  1, 2 and 3 servers sharing one GPU through one target and
#             gpucompute.ReplicatedClient (bench/replicas_bench.py), on 127.0.0.2-4:
#             calls/s, p50/p99, GPU utilization, each replica's share of the calls
#             (REPLICA_SECONDS=10 a run, WORKLOADS="lombscargle normalize", PROCESSES=8,
#             THREADS=4)
#   gpu_part  where the GPU part of a small request goes (gpu_small_op_bench: copies,
#             kernel, CUDA graph, Backend::RunFromHost from 1 and several threads)
# MAIN_SERVER (optional): an older gpucompute-server in a folder of its own (cp, no
# bundle: the libraries are the bundle's), measured as "main" beside this one.
set -u
BUNDLE=${BUNDLE:-.device/small}
# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
SECONDS_PER_RUN=${SECONDS_PER_RUN:-4}
CLI=$(find_bin gpucompute-cli)
DEFAULT_SERVER=$(find_bin gpucompute-server)
PORT=50161 PORT_B=50162 PORT_C=50163 PORT_D=50164
METRICS=9571 METRICS_B=9572 METRICS_C=9573 METRICS_D=9574
MAIN_SERVER=${MAIN_SERVER:-}
if [ -n "$MAIN_SERVER" ] && [ ! -x "$MAIN_SERVER" ]; then echo "MAIN_SERVER $MAIN_SERVER is not there"; MAIN_SERVER=; fi
MIX=normalize:1,haversine:1,discount:1,lombscargle:1
TICKS=$(getconf CLK_TCK)
NPROC=$(nproc)
TABLE=$OUT/table.txt  # each section its own

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # user + system
thread_ticks() {  # PID: "NAME TICKS THREADS" per thread name (user + system)
  local t s rest
  for t in /proc/$1/task/*; do
    s=$(cat "$t/stat" 2>/dev/null) || continue
    rest=${s##*) }; s=${s#*(}
    # shellcheck disable=SC2086  # the stat fields, one word each
    set -- $rest; echo "${s%%)*} $(( ${12} + ${13} ))"
  done | awk '{ticks[$1] += $2; n[$1]++} END {for (k in ticks) print k, ticks[k], n[k]}'
}

start_server() {  # NAME PORT METRICS FLAGS...: starts it (SERVER_BIN, else the bundle's), waits until it serves; sets SERVER
  local name=$1 port=$2 metrics=$3; shift 3
  "${SERVER_BIN:-$DEFAULT_SERVER}" --backend="$BACKEND" --address=127.0.0.1:"$port" \
    --metrics_address=127.0.0.1:"$metrics" "$@" > "$OUT/server_$name.log" 2>&1 &
  SERVER=$!
  await_health "$port" 150 && return
  echo "server $name did not start"; tail -5 "$OUT/server_$name.log"
}

stop_server() { kill -TERM "$1"; wait "$1"; }

bench() {  # MODE PORT IN_FLIGHT MIX EXTRA...: one C++ bench run, its line into the table
  local mode=$1 port=$2 c=$3 mix=$4; shift 4
  local log="$OUT/bench_${mode}_c${c}_${mix%%:*}.txt"
  timeout 60 "$CLI" --target=127.0.0.1:"$port" bench --concurrency="$c" --duration="${SECONDS_PER_RUN}s" \
    --size=1024 --dtype=float32 --mix="$mix" "$@" > "$log" 2>&1
  local tput lat label=${mix%%:*}
  [[ $mix == *,* ]] && label=mix
  tput=$(awk '/^throughput/ {print $2}' "$log")
  lat=$(awk '/^latency/ {print $3, $6, $9}' "$log")  # p50 p90 p99 in ms
  printf '%-9s %-9s %4d %10s req/s  p50/p90/p99 ms %s\n' "$mode" "$label" "$c" "${tput:-FAIL}" "${lat:-}" | tee -a "$TABLE"
}

stages() {  # MODE METRICS IN_FLIGHT MIX PORT EXTRA...: stage means around one bench run
  local mode=$1 metrics=$2 c=$3 mix=$4 port=$5; shift 5
  "$PYTHON" bench/small_requests.py stages --metrics "http://127.0.0.1:$metrics/metrics" -- \
    "$CLI" --target=127.0.0.1:"$port" bench --concurrency="$c" --duration="${SECONDS_PER_RUN}s" \
    --size=1024 --dtype=float32 --mix="$mix" "$@" > "$OUT/stages_${mode}_c${c}.txt" 2>&1
}

costed() {  # MODE PORT IN_FLIGHT EXTRA...: the mix with the server's and the client's CPU per request
  local mode=$1 port=$2 c=$3; shift 3
  local log="$OUT/bench_${mode}_c${c}_costed.txt" before after client threads_before
  threads_before=$(thread_ticks "$SERVER")
  before=$(cpu_ticks "$SERVER")
  client=$( { TIMEFORMAT='%U %S'; time timeout 60 "$CLI" --target=127.0.0.1:"$port" bench --concurrency="$c" \
    --duration="${SECONDS_PER_RUN}s" --size=1024 --dtype=float32 --mix=$MIX "$@" > "$log" 2>&1; } 2>&1 )
  after=$(cpu_ticks "$SERVER")
  local tput lat n
  tput=$(awk '/^throughput/ {print $2}' "$log")
  lat=$(awk '/^latency/ {print $3, $6, $9}' "$log")
  n=$(awk '/^requests/ {print $2}' "$log")
  printf '%-9s %-9s %4d %10s req/s  p50/p90/p99 ms %s\n' "$mode" "mix" "$c" "${tput:-FAIL}" "${lat:-}" | tee -a "$TABLE"
  awk -v m="$mode" -v s=$((after - before)) -v t="$TICKS" -v c="$client" -v n="${n:-0}" -v p="$NPROC" 'BEGIN {
    split(c, u, " "); if (n == 0) exit
    printf "%-9s cpu per request: server %.0f us, client %.0f us (of %d cores)\n", m, s / t / n * 1e6, (u[1] + u[2]) / n * 1e6, p
  }' | tee -a "$TABLE"
  # Which server threads spent it: ours are gc-exec (gc-exec-small: the small lane),
  # gc-timer and gc-cpu-pool (common/thread_name.h); gRPC's nexting_thread and
  # default-executo; CUDA's cuda-*; the process's first thread gpucompute-serv.
  { echo "$threads_before" | sed 's/^/B /'; thread_ticks "$SERVER" | sed 's/^/A /'; } |
    awk -v m="$mode" -v t="$TICKS" -v n="${n:-0}" '
      $1 == "B" {b[$2] = $3} $1 == "A" {a[$2] = $3; k[$2] = $4}
      END {if (n == 0) exit; line = ""
        for (x in a) if (a[x] - b[x] > 0) line = line sprintf(" %s %.0f (%d)", x, (a[x] - b[x]) / t / n * 1e6, k[x])
        printf "%-9s server us per request by thread (threads):%s\n", m, line}' | tee -a "$TABLE"
}

stage_means() {  # GLOB: the stage means of the stages files it names
  local f
  step "stage means (us per request; queue = the executor hop)"
  for f in "$OUT"/$1; do echo "-- $(basename "$f" .txt)"; grep -A8 '^server stage' "$f"; done
}

section_tests() (
  for t in run_from_host_test small_results_test dynamic_batching_test client_session_test session_test executor_test; do
    GPUCOMPUTE_TEST_BACKEND=$BACKEND timeout 120 "$(find_bin $t)" --gtest_color=no > "$OUT/$t.log" 2>&1
    echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]' "$OUT/$t.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \]' "$OUT/$t.log"
    grep -A8 ': Failure' "$OUT/$t.log" | head -30
  done
)

section_latency() (
  TABLE=$OUT/latency.txt
  : > "$TABLE"
  step "1 in flight: unbatched, adaptive and adaptive with a spinning small lane side by side"
  # name port metrics flags: all up at once, measured in alternate rounds.
  SIDE=("unbatched $PORT $METRICS --batching=false" "after $PORT_B $METRICS_B"
        "spin $PORT_C $METRICS_C --small_lane_spin=200us")
  [ -n "$MAIN_SERVER" ] && SIDE+=("main $PORT_D $METRICS_D")
  PIDS=()
  for s in "${SIDE[@]}"; do
    # shellcheck disable=SC2086  # name port metrics flags, one word each
    set -- $s; name=$1 port=$2 metrics=$3; shift 3
    binary=; [ "$name" = main ] && binary=$MAIN_SERVER
    SERVER_BIN=$binary start_server "${name}1" "$port" "$metrics" "$@"; PIDS+=("$SERVER")
    stages "$name" "$metrics" 1 normalize:1 "$port"
  done
  for _ in 1 2; do
    bench floor $PORT 1 health:1
    # shellcheck disable=SC2086
    for s in "${SIDE[@]}"; do set -- $s; bench "$1" "$2" 1 normalize:1; done
    bench streamed $PORT_B 1 normalize:1 --unary_results=false  # after, read as a stream
  done
  for s in "${SIDE[@]}"; do
    # shellcheck disable=SC2086
    set -- $s
    timeout 60 "$PYTHON" bench/small_requests.py python-latency --target "127.0.0.1:$2" \
      --seconds "$SECONDS_PER_RUN" 2>&1 | tee "$OUT/python_$1.txt" | sed "s/^/$1 python: /" | tee -a "$TABLE"
  done
  timeout 90 "$PYTHON" bench/small_requests.py python-floor --target 127.0.0.1:$PORT_B \
    --seconds $((2 * SECONDS_PER_RUN)) 2>&1 | tee -a "$TABLE"
  "$PYTHON" bench/small_requests.py batches --metrics http://127.0.0.1:$METRICS_B/metrics 2>/dev/null \
    | sed 's/^/after c1: /' | tee -a "$TABLE"
  stages after_mix $METRICS_B 1 $MIX $PORT_B  # each operation's stages at 1 in flight
  for pid in "${PIDS[@]}"; do stop_server "$pid"; done
  stage_means 'stages_*_c1.txt'
  step "latency: mode, op, in flight, req/s, latency"
  cat "$TABLE"
)

section_load() (
  TABLE=$OUT/load.txt
  : > "$TABLE"
  run_mode() {  # MODE SERVER_FLAGS CLI_FLAGS: the mix at 4..128 in flight on a fresh server
    local mode=$1 server_flags=$2 cli_flags=$3
    step "$mode: server $server_flags, bench $cli_flags"
    # shellcheck disable=SC2086  # lists of flags
    start_server "$mode" $PORT $METRICS $server_flags
    # shellcheck disable=SC2086
    for c in 4 16; do bench "$mode" $PORT $c $MIX $cli_flags; done
    # shellcheck disable=SC2086
    stages "$mode" $METRICS 64 $MIX $PORT $cli_flags
    # shellcheck disable=SC2086
    costed "$mode" $PORT 64 $cli_flags
    # shellcheck disable=SC2086
    bench "$mode" $PORT 128 $MIX $cli_flags
    "$PYTHON" bench/small_requests.py batches --metrics http://127.0.0.1:$METRICS/metrics 2>/dev/null | tee -a "$TABLE"
    stop_server "$SERVER"
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
  stop_server "$SERVER"

  step "after, the load spread over 4 connections (bench --connections=4), threads and callback slots"
  start_server after-4c $PORT $METRICS
  stages after-4c $METRICS 64 $MIX $PORT --connections=4
  costed after-4c $PORT 64 --connections=4
  bench after-4c $PORT 128 $MIX --connections=4
  costed cb-4c $PORT 64 --connections=4 --callbacks
  bench cb-4c $PORT 128 $MIX --connections=4 --callbacks
  stop_server "$SERVER"

  stage_means 'stages_*_c64.txt'
  step "load: mode, mix, in flight, req/s, latency"
  cat "$TABLE"
)

section_session() (
  BACKENDS=${BACKENDS:-cuda cpu}
  VARIANTS=${VARIANTS:-in_place:--in_place_work=16384 queued:--in_place_work=0}
  ROUNDS=${ROUNDS:-3}
  CURVE=${CURVE:-1 4 16 32 64 128}
  CURVE_ROUNDS=${CURVE_ROUNDS:-2}
  SESSIONS=${SESSIONS:-}  # e.g. "1 4 8": sessions per connection compared at 64 and 128 in flight
  PORT=50181
  METRICS=50182
  TABLE=$OUT/session.txt
  : > "$TABLE"
  session_bench() {  # LABEL IN_FLIGHT MIX EXTRA...: one C++ bench run, its line into the table
    local label=$1 c=$2 mix=$3; shift 3
    local log="$OUT/bench_${BACKEND}_${VARIANT}_${label// /_}_c${c}.txt"
    timeout 60 "$CLI" --target=127.0.0.1:$PORT bench --concurrency="$c" --duration="${SECONDS_PER_RUN}s" \
      --size=1024 --dtype=float32 --mix="$mix" "$@" > "$log" 2>&1
    local tput lat
    tput=$(awk '/^throughput/ {print $2}' "$log")
    lat=$(awk '/^latency/ {print $3, $6, $9}' "$log")  # p50 p90 p99 in ms
    printf '%-5s %-9s %-22s %4d %10s req/s  p50/p90/p99 ms %s\n' "$BACKEND" "$VARIANT" "$label" "$c" \
      "${tput:-FAIL}" "${lat:-}" | tee -a "$TABLE"
  }

  for BACKEND in $BACKENDS; do
  for variant in $VARIANTS; do
    VARIANT=${variant%%:*}
    FLAGS=${variant#*:}
    step "server, $BACKEND backend, $VARIANT: $FLAGS"
    # shellcheck disable=SC2086  # FLAGS is a list of flags
    "$DEFAULT_SERVER" --backend="$BACKEND" --address=127.0.0.1:$PORT \
      --metrics_address=127.0.0.1:$METRICS $FLAGS > "$OUT/server_${BACKEND}_$VARIANT.log" 2>&1 &
    SERVER=$!
    await_health $PORT 150
    "$CLI" --target=127.0.0.1:$PORT bench --concurrency=16 --duration=1s --size=1024 --mix=$MIX \
      --callbacks --session > /dev/null 2>&1  # warm-up
    step "C++ 1 in flight ($BACKEND, $VARIANT)"
    for _ in $(seq "$ROUNDS"); do
      session_bench "calls normalize" 1 normalize:1 --callbacks
      session_bench "session normalize" 1 normalize:1 --callbacks --session
    done
    session_bench "health" 1 health:1
    "$PYTHON" bench/small_requests.py stages --metrics http://127.0.0.1:$METRICS/metrics -- \
      "$CLI" --target=127.0.0.1:$PORT bench --concurrency=1 --duration="${SECONDS_PER_RUN}s" \
      --size=1024 --dtype=float32 --mix=normalize:1 --callbacks --session 2>&1 |
      grep -A9 "stage means" | sed "s/^/$BACKEND $VARIANT session c1 /" | tee -a "$TABLE"
    step "the mix on one connection, $CURVE in flight ($BACKEND, $VARIANT)"
    for _ in $(seq "$CURVE_ROUNDS"); do
      for c in $CURVE; do
        session_bench "calls mix" "$c" $MIX --callbacks
        session_bench "session mix" "$c" $MIX --callbacks --session
      done
    done
    if [ -n "$SESSIONS" ]; then
      step "sessions per connection: $SESSIONS ($BACKEND, $VARIANT)"
      for c in 64 128; do
        for n in $SESSIONS; do
          session_bench "${n} sessions mix" $c $MIX --callbacks --session --sessions_per_connection="$n"
        done
      done
    fi
    session_bench "calls mix 4 conns" 64 $MIX --callbacks --connections=4
    session_bench "4x2 sessions mix" 64 $MIX --callbacks --session --sessions_per_connection=2 --connections=4
    "$PYTHON" bench/small_requests.py batches --metrics http://127.0.0.1:$METRICS/metrics 2>/dev/null |
      sed "s/^/$BACKEND $VARIANT /" | tee -a "$TABLE"
    step "Python 1 in flight ($BACKEND, $VARIANT)"
    timeout 120 "$PYTHON" bench/ping_pong.py --target 127.0.0.1:$PORT --count 3000 2>&1 |
      sed "s/^/$BACKEND $VARIANT /" | tee -a "$TABLE"
    kill -TERM "$SERVER"
    wait "$SERVER"
  done
  done
  step "session"
  cat "$TABLE"
)

section_replicas() (
  SECONDS_PER_RUN=${REPLICA_SECONDS:-10}
  PROCESSES=${PROCESSES:-8}
  THREADS=${THREADS:-4}
  WORKLOADS=${WORKLOADS:-lombscargle normalize}
  PORT=50161
  HOSTS=(127.0.0.2 127.0.0.3 127.0.0.4)

  # Requests each replica has finished, from its /metrics.
  served() {
    "$PYTHON" - "$@" <<'PY'
import re, sys, urllib.request
counts = []
for port in sys.argv[1:]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    counts.append(sum(float(v) for v in re.findall(
        r'^gpucompute_requests_total\{[^}]*operation="(?:lombscargle|normalize)"[^}]*\} (\S+)',
        text, re.M)))
print(" / ".join(f"{c:.0f}" for c in counts))
PY
  }

  step "three $BACKEND servers on ${HOSTS[*]}:$PORT"
  PIDS=()
  for i in 0 1 2; do
    "$DEFAULT_SERVER" --backend="$BACKEND" --address="${HOSTS[$i]}:$PORT" \
      --metrics_address="127.0.0.1:$((9571 + i))" --pool_prewarm_bytes=268435456 \
      > "$OUT/replica$i.log" 2>&1 &
    PIDS+=($!)
  done
  for i in 0 1 2; do
    for _ in $(seq 300); do grep -q "serving gRPC on" "$OUT/replica$i.log" && break; sleep 0.1; done
    grep -E "backend|serving" "$OUT/replica$i.log"
  done

  printf '\n%-9s %-12s %s\n' replicas workload result > "$OUT/replicas.txt"
  for workload in $WORKLOADS; do
    for n in 1 2 3; do
      target="ipv4:$(printf "%s:$PORT," "${HOSTS[@]:0:$n}" | sed 's/,$//')"
      step "$workload through $n replica(s): $target"
      before=$(served 9571 9572 9573)
      (sleep $((SECONDS_PER_RUN / 2 + 2)); nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader \
        > "$OUT/util_${workload}_$n.txt" 2>/dev/null) &
      sampler=$!
      line=$(timeout $((SECONDS_PER_RUN + 90)) "$PYTHON" bench/replicas_bench.py --target "$target" \
        --workload "$workload" --seconds "$SECONDS_PER_RUN" --processes "$PROCESSES" \
        --threads "$THREADS" --label "$n")
      wait "$sampler"
      echo "$line"
      echo "requests per replica before: $before; after: $(served 9571 9572 9573)"
      echo "$line  gpu util $(cat "$OUT/util_${workload}_$n.txt" 2>/dev/null | tr -d '\n')" >> "$OUT/replicas.txt"
    done
  done

  step "stop"
  for pid in "${PIDS[@]}"; do kill -TERM "$pid"; done
  for pid in "${PIDS[@]}"; do wait "$pid"; echo "server $pid exit code $?"; done
  cat "$OUT/replicas.txt"
)

section_gpu_part() (
  step "gpu_small_op_bench (limit 120 s)"
  timeout 120 "$(find_bin gpu_small_op_bench)" 2>&1 | tee "$OUT/gpu_small_op_bench.txt"
)

run_sections "tests latency load" "$@"
