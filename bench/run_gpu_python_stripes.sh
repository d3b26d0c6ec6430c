#!/usr/bin/env bash
# The Python client's stripes in worker processes (Client(stripe_processes=True))
# on a GPU machine, one CUDA server, about 4 minutes; prints one table:
#   Buffers upload/download of 2 GiB: one stream, 8 thread stripes, 4 and 8 process
#     stripes (the input copied into shared memory by the call), 8 process stripes with
#     the input made in Client.stripe_array (no copy);
#   stream_discount_product of 8 GiB float32: one call, 4 and 8 process stripes (input
#     copied, a new result each call), 8 and 16 process stripes with the input and the
#     reused result in stripe_array (as a caller after speed has them);
#   seed 000's full case streamed with $SEED_STRIPES (8) process stripes, the first 3
#     batches of $BATCH (16) slices, 6.4 GB each way per batch (its calls timed apart from
#     making and checking the values);
# each with the server's CPU per GB moved (and the client's, its workers included; the
# workers' start-up, paid by a first striped call, is printed apart). Timeouts bound it
# to about 10 minutes if everything hangs.
# Goal: seed 000's 80 GB each way in <= 25 s, >= 3.2 GB/s each way at once.
# Separate Python processes streaming parts at once (bench/run_gpu_streaming.sh) are
# the ceiling to compare with.
#
# Here:   cmake --build build-cuda --target gpucompute-server
#         /work/shared/tools/device-bundle .device/pystripes/b build-cuda/server/gpucompute-server
#         (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# There:  bash bench/run_gpu_python_stripes.sh
#         (carry .device/pystripes and client/python/gpucompute/_proto; BUNDLE= another
#         bundle: its gpucompute-server in BUNDLE/bin/ or BUNDLE/, libraries in BUNDLE/lib)
set -u
BUNDLE=${BUNDLE:-.device/pystripes/b}
OUT=${OUT:-gpu-out/python_stripes}
BATCH=${BATCH:-16}
SEED_STRIPES=${SEED_STRIPES:-8}
PORT=${PORT:-50231}
# A dry run elsewhere: BACKEND=cpu BULK_BYTES=268435456 STREAM_BYTES=268435456
# SEED_ARGS="--n 400000" PYTHON=/usr/bin/python3 BUNDLE=build-cpu/server bash bench/run_gpu_python_stripes.sh
BACKEND=${BACKEND:-cuda}
BULK_BYTES=${BULK_BYTES:-2147483648}
STREAM_BYTES=${STREAM_BYTES:-8589934592}
SEED_ARGS=${SEED_ARGS:-}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
SERVER_BIN=$BUNDLE/bin/gpucompute-server
[ -x "$SERVER_BIN" ] || SERVER_BIN=$BUNDLE/gpucompute-server
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
TARGET=127.0.0.1:$PORT
step() { echo; echo "=== $* ($(date +%T))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
"$PYTHON" -c "import grpc, numpy, sys; print('grpcio', grpc.__version__, 'numpy', numpy.__version__, 'python', sys.version.split()[0])"
echo "$(nproc) CPUs, $(free -g | awk '/Mem:/ {print $2}') GiB memory"

"$SERVER_BIN" --backend=$BACKEND --address=$TARGET --metrics_address=127.0.0.1:0 \
  --buffer_quota_bytes=100000000000 > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 50); do grep -q "(port" "$OUT/server.log" && break; sleep 0.2; done
grep -q "(port" "$OUT/server.log" || { echo "server did not start:"; cat "$OUT/server.log"; exit 1; }
# The server's CPU seconds (utime + stime) so far.
server_cpu() { awk -v hz="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); print ($12 + $13) / hz}' \
  "/proc/$SERVER/stat"; }

bulk() {  # ARGS...: bench/bulk_transfer.py, 2 GiB, 2 repeats
  timeout 60 "$PYTHON" bench/bulk_transfer.py --target $TARGET --bytes $BULK_BYTES --repeat 2 \
    --server-pid $SERVER "$@" 2>&1 | tee -a "$OUT/bulk.txt"
}
step "Buffers upload/download, 2 GiB"
: > "$OUT/bulk.txt"
bulk
bulk --stripes 8
bulk --stripes 4 --processes
bulk --stripes 8 --processes
bulk --stripes 8 --processes --stripe-array

step "stream_discount_product, 8 GiB float32"
timeout 130 "$PYTHON" bench/streaming_ops.py --target $TARGET --bytes $STREAM_BYTES --repeat 2 \
  --server-pid $SERVER --stripes 1 --processes 4 8 --no-round-trip 2>&1 | tee "$OUT/streaming.txt"
timeout 100 "$PYTHON" bench/streaming_ops.py --target $TARGET --bytes $STREAM_BYTES --repeat 2 \
  --server-pid $SERVER --stripes --processes 8 16 --stripe-array --no-round-trip 2>&1 \
  | sed 's/procs x\([0-9]*\) /procs x\1 stripe_array /' | tee "$OUT/streaming_array.txt"

step "seed 000 full case streamed, $SEED_STRIPES process stripes, first 3 batches of $BATCH slices"
CPU0=$(server_cpu)
timeout 100 "$PYTHON" examples/seed000_discount.py --target $TARGET --streaming $SEED_ARGS \
  --stripes "$SEED_STRIPES" --processes --batch "$BATCH" --max-batches 3 2>&1 | tail -8 | tee "$OUT/seed000.txt"
CPU1=$(server_cpu)

step "table (GB/s each way; core-s per GB of input)"
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
