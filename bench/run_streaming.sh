#!/usr/bin/env bash
# Streaming element-wise operations (inputs larger than the GPU): a fresh
# server, then discount product over BYTES of float32 input two ways, through the Python
# client (bench/streaming_ops.py) and the C++ CLI on .npy files in /dev/shm:
#   streaming   one StreamingCompute call (stream_discount_product / `cli stream`);
#               Python also with $STRIPES stripes (default "1 8": calls over row ranges);
#   round trip  upload, compute on the stored buffer, result back (Python: in 1 GiB
#               parts; CLI: upload + discount-product --values=buffer:ID --out).
# Each line: GB/s of input and the server's core-seconds per GB of input. The CLI's two
# result files are compared byte for byte.
#
#   bash bench/run_streaming.sh BIN_DIR BACKEND [BYTES] [CLI_BYTES]
#   e.g. bash bench/run_streaming.sh build-cpu cpu 536870912 268435456
# BIN_DIR holds gpucompute-server and gpucompute-cli (a build dir or a bundle).
set -u
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
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
find_bin() { for p in "$BIN/$1" "$BIN"/*/"$1"; do [ -x "$p" ] && { echo "$p"; return; }; done; }
SERVER_BIN=$(find_bin gpucompute-server)
CLI_BIN=$(find_bin gpucompute-cli)

"$SERVER_BIN" --backend="$BACKEND" --address=127.0.0.1:$PORT --metrics_address=127.0.0.1:0 \
  --buffer_quota_bytes=$((CLI_BYTES * 3 + (4 << 30))) --stream_idle_timeout=120s \
  > "$OUT/server_streaming_$BACKEND.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$SHM"' EXIT
for _ in $(seq 300); do
  timeout 2 "$CLI_BIN" --target=127.0.0.1:$PORT health > /dev/null 2>&1 && break
  sleep 0.2
done
report="$OUT/streaming_$BACKEND.txt"
run() { echo "+ $*" >&2; timeout "${T_STEP:-200}" "$@" 2>&1 | tee -a "$report"; }

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
C=("$CLI_BIN" --target=127.0.0.1:$PORT)
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
