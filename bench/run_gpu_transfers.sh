#!/usr/bin/env bash
# Transfers: bulk uploads and downloads, StreamingCompute and the Python client's stripes
# over loopback, each line in GB/s with the server's core-seconds per GB moved; each
# section one table.
#
# Here (no GPU needed):
#   cmake -S . -B build-cuda -DGPUCOMPUTE_ENABLE_CUDA=ON -DCMAKE_BUILD_TYPE=Release
#   nice cmake --build build-cuda -j2 --target gpucompute-server gpucompute-cli \
#       bulk-transfer-bench grpc-ceiling streaming_compute_test
#   /work/shared/tools/device-bundle .device/transfers build-cuda/server/gpucompute-server \
#       build-cuda/client/gpucompute-cli build-cuda/bench/bulk-transfer-bench \
#       build-cuda/bench/grpc-ceiling build-cuda/tests/streaming_compute_test
#   (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# On the GPU machine (device tool: carry [".device", "client/python/gpucompute/_proto"]):
#   bash bench/run_gpu_transfers.sh [SECTION...]     # logs under $OUT (or ./gpu-out)
# Without a GPU (small sizes): BACKEND=cpu BUNDLE=build BULK_BYTES=268435456
#   STREAM_BYTES=268435456 CLI_STREAM_BYTES=134217728 bash bench/run_gpu_transfers.sh bulk streaming
#
# Sections (default: ceilings bulk, about 8 minutes; one device call each for
# "seed000 streaming" (about 7), "stream_stripes stream_processes seed000_cpp" (about
# 6) and python_stripes (about 4)):
#   ceilings          plain TCP on 1 and 8 loopback connections (tcp_ceiling.py) and gRPC
#                     itself on one stream doing no work (grpc-ceiling)
#   bulk              BULK_BYTES (2 GiB) uploads and downloads through the C++ client
#                     (bulk-transfer-bench) and the Python client (bulk_transfer.py), one
#                     stream and 8 stripes, Python by message size; on the CUDA backend,
#                     then the CPU backend beside it
#   seed000           seed 000's full case (80 GB each way) through stored buffers, Python
#                     client, 8 stripes
#   streaming         the StreamingCompute suite on the CUDA backend; discount product over
#                     STREAM_BYTES (8 GiB) of float32 streamed against upload-compute-download
#                     (Python on 1 and 8 stripes, the CLI on .npy files in /dev/shm); seed
#                     000's full case streamed through the Python client, first 3 batches
#   stream_stripes    the C++ client streaming CPP_STREAM_BYTES (4e9) of float64 on 1, 2, 4
#                     and 8 stripes, then the CLI between .npy files on 1 and 8 stripes
#   stream_processes  K Python processes streaming 1/K of the values each at once: the
#                     ceiling for the Python client's process stripes
#   seed000_cpp       seed 000's full case through the C++ client: 80 GB each way as 10
#                     calls of 8 GB on 8 stripes, 4 and 16 chunks in flight a call
#   python_stripes    the Python client's stripes in worker processes
#                     (Client(stripe_processes=True)): bulk, stream_discount_product, and
#                     seed 000 streamed on SEED_STRIPES (8) process stripes, first 3 batches
set -u
BUNDLE=${BUNDLE:-.device/transfers}
# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
BULK_BYTES=${BULK_BYTES:-2147483648}
STREAM_BYTES=${STREAM_BYTES:-8589934592}
CLI_STREAM_BYTES=${CLI_STREAM_BYTES:-4294967296}
CPP_STREAM_BYTES=${CPP_STREAM_BYTES:-4000000000}
SERVER_BIN=$(find_bin gpucompute-server)
CLI=$(find_bin gpucompute-cli)
BENCH=$(find_bin bulk-transfer-bench)

# limited SECONDS FUNCTION ARGS...: the function in a bash of its own, killed past SECONDS.
limited() {
  local limit=$1 fn=$2
  shift 2
  timeout "$limit" bash -c "set -u; $(declare -f "$fn"); $fn \"\$@\"" "$fn" "$@"
}

# bulk_pass BIN_DIR BACKEND [BYTES] [STRIPES]: a fresh server, then one large Upload and
# Download through the C++ client and the Python client, one stream and striped. BIN_DIR
# holds gpucompute-server and bulk-transfer-bench (a build dir or a bundle).
# PY_CHUNKS="262144 1048576 4194304": then one Python stream per message size (uploads
# and downloads), uploads of 16 MiB messages, and downloads of 256 KiB and 1 MiB with
# glibc keeping freed memory mapped (bulk_transfer.py --keep-freed-memory).
# SERVER_FLAGS: more server flags (e.g. --grpc_channel_args=... to compare transport settings).
bulk_pass() (
  BIN=${1:?BIN_DIR}
  BACKEND=${2:?cpu or cuda}
  BYTES=${3:-2147483648}
  STRIPES=${4:-8}
  REPEAT=${REPEAT:-3}
  PORT=${PORT:-50171}
  OUT=${OUT:-bulk-out}
  mkdir -p "$OUT"
  PY=${PYTHON:-python3}
  find_bin() { for p in "$BIN/$1" "$BIN"/*/"$1"; do [ -x "$p" ] && { echo "$p"; return; }; done; }
  SERVER_BIN=$(find_bin gpucompute-server)
  BENCH_BIN=$(find_bin bulk-transfer-bench)

  # shellcheck disable=SC2086  # SERVER_FLAGS is a list of flags
  "$SERVER_BIN" --backend="$BACKEND" --address=127.0.0.1:$PORT --metrics_address=127.0.0.1:0 \
    --buffer_quota_bytes=$((BYTES * 4 + (1 << 30))) --stream_idle_timeout=120s ${SERVER_FLAGS:-} \
    > "$OUT/server_$BACKEND.log" 2>&1 &
  SERVER=$!
  trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
  for _ in $(seq 300); do
    grep -q "listening\|port" "$OUT/server_$BACKEND.log" 2>/dev/null && \
      timeout 2 "$BENCH_BIN" --target=127.0.0.1:$PORT --bytes=4096 --repeat=1 > /dev/null 2>&1 && break
    sleep 0.2
  done
  run() { echo "+ $*" >&2; timeout "${T_STEP:-120}" "$@" 2>&1 | tee -a "$OUT/bulk_$BACKEND.txt"; }
  common=(--target="127.0.0.1:$PORT" --bytes="$BYTES" --repeat="$REPEAT" --server_pid="$SERVER")
  run "$BENCH_BIN" "${common[@]}" --stripes=1
  [ "$STRIPES" -gt 1 ] && run "$BENCH_BIN" "${common[@]}" --stripes="$STRIPES"
  pycommon=(--target "127.0.0.1:$PORT" --bytes "$BYTES" --repeat "$REPEAT" --server-pid "$SERVER")
  run "$PY" bench/bulk_transfer.py "${pycommon[@]}" --stripes 1
  [ "$STRIPES" -gt 1 ] && run "$PY" bench/bulk_transfer.py "${pycommon[@]}" --stripes "$STRIPES"
  for c in ${PY_CHUNKS:-}; do
    run "$PY" bench/bulk_transfer.py "${pycommon[@]}" --chunk-bytes "$c" --upload-chunk-bytes "$c" \
      --label "python-chunk-$c"
  done
  [ -n "${PY_CHUNKS:-}" ] && run "$PY" bench/bulk_transfer.py "${pycommon[@]}" \
    --upload-chunk-bytes 16777216 --label python-upload-chunk-16777216
  for c in ${PY_CHUNKS:+262144 1048576}; do
    run "$PY" bench/bulk_transfer.py "${pycommon[@]}" --keep-freed-memory --chunk-bytes "$c" \
      --label "python-keep-freed-memory-chunk-$c"
  done
  true
)

# streaming_pass BIN_DIR BACKEND [BYTES] [CLI_BYTES]: a fresh server, then discount
# product over BYTES of float32 input two ways, through the Python client
# (bench/streaming_ops.py) and the C++ CLI on .npy files in /dev/shm:
#   streaming   one StreamingCompute call (stream_discount_product / `cli stream`);
#               Python also with $STRIPES stripes (default "1 8": calls over row ranges);
#   round trip  upload, compute on the stored buffer, result back (Python: in 1 GiB
#               parts; CLI: upload + discount-product --values=buffer:ID --out).
# Each line: GB/s of input and the server's core-seconds per GB of input. The CLI's two
# result files are compared byte for byte.
streaming_pass() (
  BIN=${1:?BIN_DIR}
  BACKEND=${2:?cpu or cuda}
  BYTES=${3:-8589934592}
  CLI_BYTES=${4:-$BYTES}
  REPEAT=${REPEAT:-3}
  STRIPES=${STRIPES:-1 8}  # the Python streamed runs' stripe counts
  PORT=${PORT:-50175}
  OUT=${OUT:-streaming-out}
  SHM=${SHM:-/dev/shm/gpucompute-streaming}
  mkdir -p "$OUT" "$SHM"
  PY=${PYTHON:-python3}
  find_bin() { for p in "$BIN/$1" "$BIN"/*/"$1"; do [ -x "$p" ] && { echo "$p"; return; }; done; }
  SERVER_BIN=$(find_bin gpucompute-server)
  CLI_BIN=$(find_bin gpucompute-cli)

  "$SERVER_BIN" --backend="$BACKEND" --address=127.0.0.1:$PORT --metrics_address=127.0.0.1:0 \
    --buffer_quota_bytes=$((CLI_BYTES * 3 + (4 << 30))) --stream_idle_timeout=120s \
    > "$OUT/server_streaming_$BACKEND.log" 2>&1 &
  SERVER=$!
  trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$SHM"' EXIT
  await_health $PORT 600
  report="$OUT/streaming_$BACKEND.txt"
  run() { echo "+ $*" >&2; timeout "${T_STEP:-200}" "$@" 2>&1 | tee -a "$report"; }

  # shellcheck disable=SC2086  # STRIPES is a list of stripe counts
  run "$PY" bench/streaming_ops.py --target 127.0.0.1:$PORT --bytes "$BYTES" --repeat "$REPEAT" \
    --server-pid "$SERVER" --stripes $STRIPES

  # The C++ CLI, .npy files mapped from /dev/shm (input and output).
  "$PY" - "$SHM" "$CLI_BYTES" <<'EOF'
import sys
import numpy as np
shm, nbytes = sys.argv[1], int(sys.argv[2])
row = 4096
rows = nbytes // 4 // row
rng = np.random.default_rng(1)
np.save(f"{shm}/factors.npy", rng.uniform(0.5, 1.0, row).astype(np.float32))
values = np.lib.format.open_memmap(f"{shm}/values.npy", mode="w+", dtype=np.float32,
                                   shape=(rows, row))
for begin in range(0, rows, 4096):
    values[begin:begin + 4096] = rng.standard_normal((min(4096, rows - begin), row),
                                                     dtype=np.float32)
values.flush()
EOF
  cpu() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
  clk=$(getconf CLK_TCK)
  cli_line() {  # what, nanoseconds, server ticks
    awk -v what="$1" -v s="$(( $2 ))e-9" -v t="$3" -v b="$CLI_BYTES" -v clk="$clk" 'BEGIN {
      s += 0; gb = b / 1e9; printf "cli    %-10s %6.2f GiB in+out each  %7.3f s %6.2f GB/s  server %.2f core-s/GB\n",
      what, b / 2^30, s, gb / s, t / clk / gb }' | tee -a "$report"
  }
  C=("$CLI_BIN" --target="127.0.0.1:$PORT")
  c0=$(cpu); t0=$(date +%s%N)
  if timeout "${T_STEP:-200}" "${C[@]}" stream discount-product --factors="$SHM/factors.npy" \
      --values="$SHM/values.npy" --out="$SHM/streamed.npy" > "$OUT/cli_stream.txt" 2>&1; then
    cli_line streaming "$(date +%s%N) - $t0" "$(( $(cpu) - c0 ))"
  else
    echo "cli stream failed:"; cat "$OUT/cli_stream.txt"
  fi
  c0=$(cpu); t0=$(date +%s%N)
  ID=$(timeout "${T_STEP:-200}" "${C[@]}" upload "$SHM/values.npy" 2> "$OUT/cli_upload.txt")
  if timeout "${T_STEP:-200}" "${C[@]}" discount-product --factors="$SHM/factors.npy" \
      --values="buffer:$ID" --out="$SHM/unary.npy" > "$OUT/cli_unary.txt" 2>&1; then
    cli_line "round trip" "$(date +%s%N) - $t0" "$(( $(cpu) - c0 ))"
  else
    echo "cli round trip failed:"; cat "$OUT/cli_upload.txt" "$OUT/cli_unary.txt"
  fi
  "${C[@]}" delete "$ID" > /dev/null 2>&1
  if cmp -s "$SHM/streamed.npy" "$SHM/unary.npy"; then
    echo "cli    streamed and round-trip results are byte-identical" | tee -a "$report"
  else
    echo "cli    streamed and round-trip results DIFFER" | tee -a "$report"
  fi
  true
)

# A server for the stream_* and seed000_cpp sections, each on a port of its own.
PORT=50300
start_stream_server() {  # flags...
  PORT=$((PORT + 1))
  "$SERVER_BIN" --backend="$BACKEND" --address=127.0.0.1:$PORT --metrics_address=127.0.0.1:0 \
    --stream_idle_timeout=120s "$@" > "$OUT/server_$PORT.log" 2>&1 &
  SERVER=$!
  await_health $PORT 600
}
stop_stream_server() { kill -TERM "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null; }

section_ceilings() (
  step "plain TCP over loopback, 1 and 8 connections (limit 120 s)"
  timeout 120 "$PYTHON" bench/tcp_ceiling.py --bytes "$BULK_BYTES" 2>&1 | tee "$OUT/tcp_ceiling.txt"
  step "gRPC on one stream doing no work (limit 120 s)"
  CEILING=$(find_bin grpc-ceiling)
  "$CEILING" --serve --port=50600 > "$OUT/grpc_ceiling_server.log" 2>&1 &
  S=$!
  sleep 1
  timeout 120 "$CEILING" --target=127.0.0.1:50600 --bytes="$BULK_BYTES" 2>&1 | tee "$OUT/grpc_ceiling.txt"
  kill -TERM $S 2>/dev/null; wait $S 2>/dev/null
)

section_bulk() (
  "$PYTHON" -c "import grpc, numpy, sys; print('grpcio', grpc.__version__, 'numpy', numpy.__version__, 'python', sys.version.split()[0])"
  # What a Python client's receive costs depends on (bench/NOTES.md, Transfers): huge pages
  # for the result arrays, the CPU, glibc.
  echo "THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null), defrag" \
    "$(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null); $(ldd --version 2>/dev/null | head -1)"
  step "$BACKEND backend, $BULK_BYTES bytes, 1 and 8 stripes"
  OUT=$OUT/$BACKEND T_STEP=100 PY_CHUNKS="262144 1048576 4194304" REPEAT=2 \
    limited 260 bulk_pass "$BUNDLE" "$BACKEND" "$BULK_BYTES" 8
  if [ "$BACKEND" != cpu ]; then
    step "CPU backend, $BULK_BYTES bytes, 1 and 8 stripes"
    OUT=$OUT/cpu T_STEP=60 REPEAT=2 PORT=50181 limited 150 bulk_pass "$BUNDLE" cpu "$BULK_BYTES" 8
  fi
  step "bulk: GB/s and server core-s per GB"
  grep -h "GB/s" "$OUT/$BACKEND/bulk_$BACKEND.txt" "$OUT"/cpu/bulk_cpu.txt 2>/dev/null | awk '!seen[$0]++' | sed 's/^/  /'
)

section_seed000() (
  step "seed 000 full case (80 GB each way) through the Python client, 8 stripes"
  "$SERVER_BIN" --backend="$BACKEND" --address=127.0.0.1:50191 --metrics_address=127.0.0.1:0 \
    --buffer_quota_bytes=100000000000 > "$OUT/seed000_server.log" 2>&1 &
  SERVER=$!
  sleep 3
  timeout 150 "$PYTHON" examples/seed000_discount.py --target 127.0.0.1:50191 --stripes 8 2>&1 \
    | tail -8 | tee "$OUT/seed000.txt"
  kill -TERM $SERVER; wait $SERVER
)

section_streaming() (
  step "StreamingCompute suite on the $BACKEND backend"
  GPUCOMPUTE_TEST_BACKEND=$BACKEND timeout 120 "$(find_bin streaming_compute_test)" 2>&1 \
    | tee "$OUT/streaming_compute_test_$BACKEND.txt" | grep -E "^\[ +(FAILED|PASSED) +\]|Failure" -A3
  step "StreamingCompute vs upload-compute-download, $BACKEND, $STREAM_BYTES bytes (CLI $CLI_STREAM_BYTES)"
  OUT=$OUT/$BACKEND T_STEP=150 limited 280 streaming_pass "$BUNDLE" "$BACKEND" "$STREAM_BYTES" "$CLI_STREAM_BYTES"
  step "seed 000 full case, batches of 16 slices (6.4 GB) as 8 StreamingCompute calls each, first 3"
  "$SERVER_BIN" --backend="$BACKEND" --address=127.0.0.1:50192 --metrics_address=127.0.0.1:0 \
    --buffer_quota_bytes=100000000000 > "$OUT/seed000_streaming_server.log" 2>&1 &
  SERVER=$!
  sleep 3
  # shellcheck disable=SC2086  # SEED_ARGS is a list of arguments
  timeout 150 "$PYTHON" examples/seed000_discount.py --target 127.0.0.1:50192 --streaming ${SEED_ARGS:-} \
    --stripes 8 --batch 16 --max-batches 3 2>&1 | tail -8 | tee "$OUT/seed000_streaming.txt"
  kill -TERM $SERVER; wait $SERVER
  step "streaming: GB/s each way and server core-s per GB"
  grep -h "GB/s\|identical\|DIFFER" "$OUT/$BACKEND/streaming_$BACKEND.txt" 2>/dev/null | sed 's/^/  /'
  grep -h "full case" "$OUT/seed000_streaming.txt" 2>/dev/null | sed "s/^/  streaming /"
)

section_stream_stripes() (
  step "C++ client, $CPP_STREAM_BYTES bytes of float64 values each way, default server"
  : > "$OUT/stream_stripes.txt"
  start_stream_server
  for s in 1 2 4 8; do
    timeout 100 "$BENCH" --target=127.0.0.1:$PORT --streaming --bytes="$CPP_STREAM_BYTES" --repeat=3 \
      --stripes=$s --server_pid=$SERVER 2>&1 | tee -a "$OUT/stream_stripes.txt"
  done
  stop_stream_server

  step "the CLI: stream discount-product between .npy files in /dev/shm, 1 and 8 stripes"
  SHM=/dev/shm/gc-streaming
  mkdir -p $SHM
  "$PYTHON" - $SHM "$CPP_STREAM_BYTES" <<'PY'
import sys
import numpy as np
shm, nbytes = sys.argv[1], int(sys.argv[2])
n = 1_000_000
d = nbytes // (n * 5 * 8)
np.save(f"{shm}/factors.npy", np.linspace(0.5, 1.0, n * 5).reshape(n, 5))
values = np.lib.format.open_memmap(f"{shm}/values.npy", mode="w+", dtype=np.float64, shape=(d, n, 5))
for k in range(d):
    values[k] = np.arange(k * n * 5, (k + 1) * n * 5, dtype=np.float64).reshape(n, 5)
values.flush()
PY
  start_stream_server
  clk=$(getconf CLK_TCK)
  for s in 1 8; do
    cpu0=$(awk '{print $14 + $15}' /proc/$SERVER/stat); t0=$(date +%s%N)
    timeout 100 "$CLI" --target=127.0.0.1:$PORT --stripes=$s stream discount-product \
      --factors=$SHM/factors.npy --values=$SHM/values.npy --out=$SHM/out$s.npy > "$OUT/cli$s.txt" 2>&1 \
      || { echo "cli stream failed"; cat "$OUT/cli$s.txt"; }
    t1=$(date +%s%N); cpu1=$(awk '{print $14 + $15}' /proc/$SERVER/stat)
    b=$(stat -c %s $SHM/values.npy)
    awk -v s=$s -v b="$b" -v ns=$((t1 - t0)) -v t=$((cpu1 - cpu0)) -v clk="$clk" 'BEGIN {
      printf "cli stripes=%d stream %.2f GB each way in %.3f s: %.2f GB/s each way, server %.2f core-s/GB\n",
        s, b / 1e9, ns / 1e9, b / ns, t / clk / (b / 1e9) }' | tee -a "$OUT/stream_stripes.txt"
  done
  cmp $SHM/out1.npy $SHM/out8.npy && echo "cli: 1 and 8 stripes byte-identical" | tee -a "$OUT/stream_stripes.txt"
  stop_stream_server
  rm -rf $SHM
  step "stream_stripes"
  cat "$OUT/stream_stripes.txt"
)

section_stream_processes() (
  step "Python client: one call, and K processes at once over 1/K of the values each"
  start_stream_server
  cat > "$OUT/py_stream.py" <<'PY'
import sys, time
import numpy as np
import gpucompute
target, nbytes, k, parts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
n = 1_000_000
d = max(1, nbytes // (n * 5 * 8) // parts)
with gpucompute.Client(target) as client:
    factors = np.linspace(0.5, 1.0, n * 5).reshape(n, 5)
    values = np.arange(k * d * n * 5, (k + 1) * d * n * 5, dtype=np.float64).reshape(d, n, 5)
    with client.upload(factors) as f_dev:
        client.stream_discount_product(f_dev, values[:1])  # warm
        print("ready", flush=True)
        sys.stdin.readline()  # all processes start together
        t0 = time.perf_counter()
        out = client.stream_discount_product(f_dev, values)
        t = time.perf_counter() - t0
    ok = np.array_equal(out, factors * values)
    print(f"part {k}/{parts}: {values.nbytes / 1e9:.2f} GB each way in {t:.3f} s "
          f"({values.nbytes / 1e9 / t:.2f} GB/s), check {'ok' if ok else 'MISMATCH'}", flush=True)
PY
  clk=$(getconf CLK_TCK)
  : > "$OUT/stream_processes.txt"
  for parts in 1 4 8; do
    cpu0=$(awk '{print $14 + $15}' /proc/$SERVER/stat)
    pids=(); fifos=()
    for k in $(seq 0 $((parts - 1))); do
      mkfifo "$OUT/go$k"
      (timeout 150 "$PYTHON" "$OUT/py_stream.py" 127.0.0.1:$PORT "$CPP_STREAM_BYTES" "$k" $parts < "$OUT/go$k" \
        > "$OUT/py_$parts.$k.txt" 2>&1) &
      pids+=($!)
    done
    for k in $(seq 0 $((parts - 1))); do exec {fd}>"$OUT/go$k"; fifos+=("$fd"); done
    for _ in $(seq 600); do
      [ "$(cat "$OUT"/py_$parts.*.txt 2>/dev/null | grep -c ready)" -ge "$parts" ] && break; sleep 0.1
    done
    for fd in "${fifos[@]}"; do echo go >&"$fd"; exec {fd}>&-; done
    wait "${pids[@]}"
    cpu1=$(awk '{print $14 + $15}' /proc/$SERVER/stat)
    cat "$OUT"/py_$parts.*.txt | grep -v ready
    # Together: the bytes of every part over the slowest part's time (they start at once).
    cat "$OUT"/py_$parts.*.txt | grep "each way in" | awk -v p=$parts -v t=$((cpu1 - cpu0)) \
      -v clk="$clk" '{ b += $3; s = $8 + 0; if (s > m) m = s } END {
      printf "python processes=%d streaming %.2f GB each way, slowest %.3f s: %.2f GB/s each way, server %.2f core-s/GB\n",
        p, b, m, b / m, t / clk / b }' | tee -a "$OUT/stream_processes.txt"
    rm -f "$OUT"/go*
  done
  stop_stream_server
)

section_seed000_cpp() (
  step "seed 000's full case, C++ client: 80 GB of values each way as 10 calls of 8 GB, 8 stripes"
  for inflight in 4 16; do
    start_stream_server --streaming_chunks_in_flight=$inflight
    timeout 200 "$BENCH" --target=127.0.0.1:$PORT --streaming --bytes=8000000000 \
      --streaming_total_bytes=80000000000 --repeat=1 --stripes=8 --server_pid=$SERVER \
      --label=cpp-seed000-inflight$inflight 2>&1 | tee -a "$OUT/seed000_cpp.txt"
    stop_stream_server
  done
)

# Goal: seed 000's 80 GB each way in <= 25 s, >= 3.2 GB/s each way at once. Separate
# Python processes streaming parts at once (stream_processes) are the ceiling to compare with.
section_python_stripes() (
  OUT=$OUT/python_stripes
  BATCH=${BATCH:-16}
  SEED_STRIPES=${SEED_STRIPES:-8}
  SEED_ARGS=${SEED_ARGS:-}
  TARGET=127.0.0.1:${PORT_STRIPES:-50231}
  mkdir -p "$OUT"
  "$PYTHON" -c "import grpc, numpy, sys; print('grpcio', grpc.__version__, 'numpy', numpy.__version__, 'python', sys.version.split()[0])"
  echo "$(nproc) CPUs, $(free -g | awk '/Mem:/ {print $2}') GiB memory"

  "$SERVER_BIN" --backend="$BACKEND" --address=$TARGET --metrics_address=127.0.0.1:0 \
    --buffer_quota_bytes=100000000000 > "$OUT/server.log" 2>&1 &
  SERVER=$!
  trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
  for _ in $(seq 50); do grep -q "(port" "$OUT/server.log" && break; sleep 0.2; done
  grep -q "(port" "$OUT/server.log" || { echo "server did not start:"; cat "$OUT/server.log"; exit 1; }
  # The server's CPU seconds (utime + stime) so far.
  server_cpu() { awk -v hz="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); print ($12 + $13) / hz}' \
    "/proc/$SERVER/stat"; }

  bulk() {  # ARGS...: bench/bulk_transfer.py, BULK_BYTES, 2 repeats
    timeout 60 "$PYTHON" bench/bulk_transfer.py --target $TARGET --bytes "$BULK_BYTES" --repeat 2 \
      --server-pid $SERVER "$@" 2>&1 | tee -a "$OUT/bulk.txt"
  }
  step "Buffers upload/download, $BULK_BYTES bytes"
  : > "$OUT/bulk.txt"
  bulk
  bulk --stripes 8
  bulk --stripes 4 --processes
  bulk --stripes 8 --processes
  bulk --stripes 8 --processes --stripe-array

  step "stream_discount_product, $STREAM_BYTES bytes float32"
  timeout 130 "$PYTHON" bench/streaming_ops.py --target $TARGET --bytes "$STREAM_BYTES" --repeat 2 \
    --server-pid $SERVER --stripes 1 --processes 4 8 --no-round-trip 2>&1 | tee "$OUT/streaming.txt"
  timeout 100 "$PYTHON" bench/streaming_ops.py --target $TARGET --bytes "$STREAM_BYTES" --repeat 2 \
    --server-pid $SERVER --stripes --processes 8 16 --stripe-array --no-round-trip 2>&1 \
    | sed 's/procs x\([0-9]*\) /procs x\1 stripe_array /' | tee "$OUT/streaming_array.txt"

  step "seed 000 full case streamed, $SEED_STRIPES process stripes, first 3 batches of $BATCH slices"
  CPU0=$(server_cpu)
  # shellcheck disable=SC2086  # SEED_ARGS is a list of arguments
  timeout 100 "$PYTHON" examples/seed000_discount.py --target $TARGET --streaming $SEED_ARGS \
    --stripes "$SEED_STRIPES" --processes --batch "$BATCH" --max-batches 3 2>&1 | tail -8 | tee "$OUT/seed000.txt"
  CPU1=$(server_cpu)

  step "python_stripes (GB/s each way; core-s per GB of input)"
  {
    printf "%-48s %9s %9s %11s %11s\n" run GB/s best "server c/GB" "client c/GB"
    # bulk_transfer.py: "LABEL stripes=K upload|download X GiB median S s R GB/s (best B) server C client D core-s/GB ..."
    grep -h " stripes=.* median " "$OUT/bulk.txt" | awk '{
      for (i = 1; i <= NF; i++) { if ($i == "median") m = i; if ($i == "server") s = i }
      name = ""; for (i = 2; i < m - 2; i++) name = name $i " "
      best = $(m + 6); sub(/\)/, "", best)
      printf "%-48s %9s %9s %11s %11s\n", "bulk " name, $(m + 3), best, $(s + 1), $(s + 3) }'
    # streaming_ops.py: "python streaming ... X GiB in+out each  median S s R GB/s (best B) server C client D core-s/GB"
    grep -h "in+out each" "$OUT/streaming.txt" "$OUT/streaming_array.txt" | awk '{
      for (i = 1; i <= NF; i++) { if ($i == "GiB") g = i; if ($i == "median") m = i; if ($i == "server") s = i }
      name = ""; for (i = 2; i < g - 1; i++) name = name $i " "
      best = $(m + 6); sub(/\)/, "", best)
      printf "%-48s %9s %9s %11s %11s\n", name, $(m + 3), best, $(s + 1), $(s + 3) }'
    # seed000: "full case: X GB in and out in T s, of which the calls C s (R GB/s each way); ..."
    awk -v cpu0="$CPU0" -v cpu1="$CPU1" -v k="$SEED_STRIPES" '/^full case:/ {
      cpu = cpu1 - cpu0
      for (i = 1; i <= NF; i++) if ($i == "calls") c = i
      gb = $3 * ($4 == "GB" ? 1 : $4 == "MB" ? 1e-3 : 1e-6)
      printf "%-48s %9s %9s %11.2f %11s\n", "seed000 streamed procs x" k " (" $3 " " $4 ")",
        substr($(c + 3), 2), "-", cpu / gb, "-" }' "$OUT/seed000.txt"
  } | tee "$OUT/table.txt"
  grep -h "workers started" "$OUT"/*.txt
  grep -h "CHECK FAIL\|MISMATCH\|differs\|Error" "$OUT"/*.txt | head -5
)

run_sections "ceilings bulk" "$@"
