#!/usr/bin/env bash
# Soak test: the CPU-backend server on loopback under `gpucompute-cli bench` at saturation.
#
#   scripts/soak.sh [DURATION_SECONDS=600] [BUILD_DIR=build]
#
# 1. starts BUILD_DIR/server/gpucompute-server --backend=cpu on free 127.0.0.1 ports
#    (gRPC and /metrics) and waits for health;
# 2. uploads a few .npy buffers of random data and records the SHA-256 of their payloads;
# 3. runs `gpucompute-cli bench` for DURATION seconds (concurrency 2x cores, the four
#    operations) while sampling the server's VmRSS every few seconds to a CSV;
# 4. downloads the buffers and compares checksums, checks the bench's errors, the RSS growth
#    after warm-up (median of the first window after the warm-up vs median of the last
#    window, < 5%), cross-checks the request counts with one /metrics scrape, then stops the
#    server with SIGTERM and expects exit status 0;
# 5. prints a summary and "N passed, M failed"; exits 1 on any failure.
#
# Environment (all optional):
#   SOAK_CONCURRENCY  requests in flight (default 2 x nproc, at least 4)
#   SOAK_SIZE         elements per result (default 65536: ~1-3 ms for normalize, haversine,
#                     discount and ~16 ms for lombscargle alone on 2 cores)
#   SOAK_MIX          bench mix (default normalize:4,haversine:4,discount:4,lombscargle:1,
#                     which splits the server's CPU time roughly evenly between the ops)
#   SOAK_DTYPE        float32 (default) or float64
#   SOAK_WARMUP       seconds of warm-up before the first RSS window (default 60)
#   SOAK_WINDOW       seconds in each RSS window (default 60); runs shorter than
#                     WARMUP + 2 x WINDOW use a quarter of the run for each
#   SOAK_INTERVAL     seconds between RSS samples (default 2)
#   SOAK_MAX_GROWTH   allowed RSS growth in percent (default 5)
#   SOAK_EXPECTED_CODES  comma-separated gRPC codes that do not count as failures (default
#                     none: with concurrency below --max_queue_depth and no deadlines, the
#                     server has no reason to refuse or fail any request)
#   SOAK_SERVER_FLAGS extra server flags, e.g. "--threads=2"
#   SOAK_OUT          directory for the artifacts (default a new /tmp/gpucompute-soak.XXXXXX,
#                     kept: bench.txt, rss.csv, server.log, metrics.txt, checks.tsv)
# The server inherits the environment, so e.g. MALLOC_ARENA_MAX=2 scripts/soak.sh applies to it.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
duration=${1:-600}
build=${2:-build}
case "$build" in /*) ;; *) build="$repo/$build" ;; esac
server_bin="$build/server/gpucompute-server"
cli_bin="$build/client/gpucompute-cli"
py=/usr/bin/python3
check_py="$repo/scripts/soak_check.py"

cores=$(nproc)
concurrency=${SOAK_CONCURRENCY:-$((2 * cores < 4 ? 4 : 2 * cores))}
size=${SOAK_SIZE:-65536}
mix=${SOAK_MIX:-normalize:4,haversine:4,discount:4,lombscargle:1}
dtype=${SOAK_DTYPE:-float32}
warmup=${SOAK_WARMUP:-60}
window=${SOAK_WINDOW:-60}
interval=${SOAK_INTERVAL:-2}
max_growth=${SOAK_MAX_GROWTH:-5}
expected_codes=${SOAK_EXPECTED_CODES:-}
grace=10

if ! [[ "$duration" =~ ^[0-9]+$ ]] || [ "$duration" -lt 8 ]; then
  echo "soak.sh: DURATION_SECONDS must be an integer >= 8 (got '$duration')" >&2
  exit 2
fi
for bin in "$server_bin" "$cli_bin"; do
  [ -x "$bin" ] || { echo "soak.sh: $bin not found; build it first (BUILD_DIR=$build)" >&2; exit 2; }
done

out=${SOAK_OUT:-$(mktemp -d /tmp/gpucompute-soak.XXXXXX)}
mkdir -p "$out"
checks="$out/checks.tsv"
: >"$checks"

server_pid="" sampler_pid="" bench_pid=""
# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
  # Only the processes this script started, by pid.
  for pid in $bench_pid $sampler_pid; do
    kill -TERM "$pid" 2>/dev/null
  done
  [ -n "$server_pid" ] && stop_server >/dev/null
  rm -f "$out"/*.npy
}

# SIGTERM to the server, SIGKILL if it is still there after the grace period plus 30 s;
# sets server_rc. (kill -0 succeeds on an unreaped child, so the watchdog polls while this
# shell waits.)
server_rc=""
stop_server() {
  kill -TERM "$server_pid" 2>/dev/null
  (
    for _ in $(seq 1 $((grace + 30))); do
      sleep 1
      kill -0 "$server_pid" 2>/dev/null || exit 0
    done
    kill -KILL "$server_pid" 2>/dev/null
  ) &
  local watchdog=$!
  wait "$server_pid"
  server_rc=$?
  server_pid=""
  wait "$watchdog" 2>/dev/null
}
trap cleanup EXIT
trap 'echo "soak.sh: interrupted" >&2; exit 130' INT TERM

log() { echo "soak.sh: $*"; }
# Running and not a zombie (kill -0 also succeeds on an unreaped child).
alive() {
  local state
  state=$(sed -E 's/.*\) (\S).*/\1/' "/proc/${1:-none}/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}
pass() { printf 'PASS\t%s\t%s\n' "$1" "$2" >>"$checks"; }
fail() { printf 'FAIL\t%s\t%s\n' "$1" "$2" >>"$checks"; }

finish() {
  echo
  echo "== checks"
  local passed failed
  passed=$(grep -c '^PASS' "$checks")
  failed=$(grep -c '^FAIL' "$checks")
  awk -F'\t' '{ printf "%s  %s: %s\n", $1, $2, $3 }' "$checks"
  echo "artifacts in $out"
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
  exit $?
}

# --------------------------------------------------------------------------- 1. server
log "server $server_bin (cpu backend), ${duration}s at concurrency $concurrency, artifacts in $out"
# shellcheck disable=SC2086  # SOAK_SERVER_FLAGS is split into flags on purpose
"$server_bin" --backend=cpu --address=127.0.0.1:0 --metrics_address=127.0.0.1:0 \
  --grace_period=${grace}s ${SOAK_SERVER_FLAGS:-} >"$out/server.log" 2>&1 &
server_pid=$!

port="" metrics_port=""
for _ in $(seq 1 300); do  # 30 s
  line=$(grep -m1 'serving gRPC on' "$out/server.log" 2>/dev/null || true)
  if [ -n "$line" ]; then
    port=$(sed -E 's/.*serving gRPC on [^ ]+ \(port ([0-9]+)\).*/\1/' <<<"$line")
    metrics_port=$(sed -E 's/.*metrics on .*\(port ([0-9]+)\).*/\1/' <<<"$line")
    break
  fi
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ] || [ -z "$metrics_port" ]; then
  fail "server started" "no 'serving gRPC on' line; log: $(tail -3 "$out/server.log" | tr '\n' ' ')"
  finish
fi
target=127.0.0.1:$port
metrics_url=http://127.0.0.1:$metrics_port/metrics
cli() { "$cli_bin" --target="$target" "$@"; }

healthy=0
for _ in $(seq 1 60); do  # 30 s
  if cli --timeout=2s health >"$out/health.txt" 2>&1; then healthy=1; break; fi
  sleep 0.5
done
if [ "$healthy" -ne 1 ]; then
  fail "server healthy" "health never succeeded: $(cat "$out/health.txt")"
  finish
fi
pass "server healthy" "pid $server_pid, gRPC $target, metrics $metrics_url"
log "server pid $server_pid on $target, metrics on $metrics_url: $(tr '\n' ' ' <"$out/health.txt")"

# RSS sampler: from now until the end of the bench (bounded by a deadline).
"$py" "$check_py" sample --pid="$server_pid" --out="$out/rss.csv" --interval="$interval" \
  --metrics="$metrics_url" --deadline=$((duration + 600)) &
sampler_pid=$!

# --------------------------------------------------------------------------- 2. buffers
# name dtype shape: ~16 B to ~8 MiB, both dtypes, ranks 1-3.
buffers=(
  "soak-tiny f4 3"
  "soak-row f8 1000"
  "soak-matrix f4 512,1024"
  "soak-cube f8 4,500,512"
)
: >"$out/buffers.tsv"
stored_bytes=0
upload_ok=1
for spec in "${buffers[@]}"; do
  read -r name dt shape <<<"$spec"
  file="$out/$name.npy"
  "$py" "$check_py" make-npy "$file" --dtype="$dt" --shape="$shape" --seed=$((RANDOM * 32768 + RANDOM))
  sum=$("$py" "$check_py" npy-sum "$file")
  if ! cli upload "$file" --name="$name" >"$out/upload-$name.txt" 2>&1; then
    upload_ok=0
    fail "upload $name" "$(tr '\n' ' ' <"$out/upload-$name.txt")"
    continue
  fi
  id=$(awk '$1 == "id" { print $2 }' "$out/upload-$name.txt")
  bytes=$(awk '$1 == "bytes" { print $2 }' "$out/upload-$name.txt")
  stored_bytes=$((stored_bytes + bytes))
  printf '%s\t%s\t%s\n' "$name" "$id" "$sum" >>"$out/buffers.tsv"
  log "uploaded $name ($dt $shape, $bytes bytes) as $id"
done
[ "$upload_ok" -eq 1 ] && pass "uploads" "${#buffers[@]} buffers, $stored_bytes bytes"

# --------------------------------------------------------------------------- 3. bench
sleep "$interval"  # at least one idle sample before the bench
log "bench --concurrency=$concurrency --duration=${duration}s --mix=$mix --size=$size --dtype=$dtype"
bench_start=$(date +%s.%N)
# A hung request would keep bench past its duration: bound it from outside too.
timeout --signal=TERM --kill-after=10 $((duration + 120)) \
  "$cli_bin" --target="$target" bench --concurrency="$concurrency" --duration="${duration}s" \
  --mix="$mix" --size="$size" --dtype="$dtype" >"$out/bench.txt" 2>&1 &
bench_pid=$!
server_died=""
while alive "$bench_pid"; do
  if [ -z "$server_died" ] && ! alive "$server_pid"; then
    server_died=$(awk -v a="$bench_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
    log "the server exited ${server_died} s into the bench: $(tail -2 "$out/server.log" | tr '\n' ' ')"
  fi
  sleep 1
done
wait "$bench_pid"
bench_rc=$?
bench_pid=""
bench_end=$(date +%s.%N)
if alive "$server_pid"; then
  pass "server alive after the bench" "pid $server_pid"
else
  fail "server alive after the bench" "it exited${server_died:+ ${server_died} s into the bench}; log: $(grep -v 'gpucompute-server: \(backend\|serving\)' "$out/server.log" | tail -3 | tr '\n' ' ')"
fi
sleep "$interval"  # one more sample, then stop sampling
kill -TERM "$sampler_pid" 2>/dev/null
wait "$sampler_pid" 2>/dev/null
sampler_pid=""
echo
echo "== bench output"
cat "$out/bench.txt"

# --------------------------------------------------------------------------- 4. checks
: >"$out/sums.tsv"
while IFS=$'\t' read -r name id want; do
  file="$out/$name.down.npy"
  if cli download "$id" "$file" >"$out/download-$name.txt" 2>&1; then
    got=$("$py" "$check_py" npy-sum "$file")
  else
    got="download failed: $(tr '\n' ' ' <"$out/download-$name.txt")"
  fi
  printf '%s\t%s\t%s\n' "$name" "$want" "$got" >>"$out/sums.tsv"
done <"$out/buffers.tsv"

if ! "$py" "$check_py" scrape "$metrics_url" "$out/metrics.txt" 2>"$out/scrape.err"; then
  : >"$out/metrics.txt"
  fail "/metrics scrape" "$(cat "$out/scrape.err")"
fi

echo
echo "== summary"
"$py" "$check_py" analyze --bench="$out/bench.txt" --bench-rc="$bench_rc" --rss="$out/rss.csv" \
  --metrics="$out/metrics.txt" --sums="$out/sums.tsv" --checks="$checks" \
  --bench-start="$bench_start" --bench-end="$bench_end" --warmup="$warmup" --window="$window" \
  --interval="$interval" --max-growth="$max_growth" --expected-codes="$expected_codes" \
  --stored-bytes="$stored_bytes" ||
  fail "analysis" "soak_check.py analyze failed"

# Stop the server: SIGTERM, exit status 0 within the grace period (plus slack).
stop_start=$(date +%s.%N)
stop_server
stop_s=$(awk -v a="$stop_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "server       exit status $server_rc ${stop_s} s after SIGTERM; last log line: $(tail -1 "$out/server.log")"
if [ "$server_rc" -eq 0 ]; then
  pass "SIGTERM exit 0" "in ${stop_s} s"
else
  fail "SIGTERM exit 0" "exit status $server_rc after ${stop_s} s"
fi
finish
