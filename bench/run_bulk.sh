#!/usr/bin/env bash
# Bulk transfer benchmark: a fresh server, then one large Upload and Download
# through the C++ client (bulk-transfer-bench) and the Python client
# (bench/bulk_transfer.py), one stream and striped; each line reports GB/s and the
# server's core-seconds per GB moved.
#
#   bash bench/run_bulk.sh BIN_DIR BACKEND [BYTES] [STRIPES]
#   e.g. bash bench/run_bulk.sh build-cpu cpu 536870912 4
# BIN_DIR holds gpucompute-server and bulk-transfer-bench (a build dir or a bundle).
# PY_CHUNKS="262144 1048576 4194304": then one Python stream per message size (uploads
# and downloads), uploads of 16 MiB messages, and downloads of 256 KiB and 1 MiB with
# glibc keeping freed memory mapped (bulk_transfer.py --keep-freed-memory).
# SERVER_FLAGS: more server flags (e.g. --grpc_channel_args=... to compare transport settings).
set -u
BIN=${1:?BIN_DIR}
BACKEND=${2:?cpu or cuda}
BYTES=${3:-2147483648}
STRIPES=${4:-8}
REPEAT=${REPEAT:-3}
PORT=${PORT:-50171}
OUT=${OUT:-bulk-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
find_bin() { for p in "$BIN/$1" "$BIN"/*/"$1"; do [ -x "$p" ] && { echo "$p"; return; }; done; }
SERVER_BIN=$(find_bin gpucompute-server)
BENCH_BIN=$(find_bin bulk-transfer-bench)

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
common=(--target=127.0.0.1:$PORT --bytes=$BYTES --repeat=$REPEAT --server_pid=$SERVER)
run "$BENCH_BIN" "${common[@]}" --stripes=1
[ "$STRIPES" -gt 1 ] && run "$BENCH_BIN" "${common[@]}" --stripes=$STRIPES
pycommon=(--target 127.0.0.1:$PORT --bytes $BYTES --repeat $REPEAT --server-pid $SERVER)
run "$PY" bench/bulk_transfer.py "${pycommon[@]}" --stripes 1
[ "$STRIPES" -gt 1 ] && run "$PY" bench/bulk_transfer.py "${pycommon[@]}" --stripes $STRIPES
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
