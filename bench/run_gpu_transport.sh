#!/usr/bin/env bash
# Transport settings against one-stream bulk transfers (issue #12): for each setting, a
# fresh server with it (--grpc_channel_args) and bulk-transfer-bench with it on the
# client's channels (--channel_args), one 2 GiB float32 Upload and Download, median of
# 3, one stream, with server and client CPU per GB. One line per setting.
#
#   BIN=DIR BACKEND=cuda bash bench/run_gpu_transport.sh
# DIR holds gpucompute-server and bulk-transfer-bench (a build dir or a device bundle);
# on the CPU backend here: BIN=build-cpu BACKEND=cpu BYTES=268435456.
set -u
BIN=${BIN:?BIN}
BACKEND=${BACKEND:-cuda}
BYTES=${BYTES:-2147483648}
STRIPES=${STRIPES:-1}
PORT=${PORT:-50175}
find_bin() { for p in "$BIN/$1" "$BIN"/*/"$1"; do [ -x "$p" ] && { echo "$p"; return; }; done; }
SERVER_BIN=$(find_bin gpucompute-server)
BENCH_BIN=$(find_bin bulk-transfer-bench)
MiB=1048576
FRAME=grpc.http2.max_frame_size=16777215
WINDOW=grpc.http2.lookahead_bytes=$((64 * MiB))
# name | server arguments | client arguments (comma-separated grpc.NAME=VALUE) | bench flags
SETTINGS=(
  "defaults||"
  "frame 16M|$FRAME|$FRAME"
  "window 64M|$WINDOW|$WINDOW"
  "frame+window|$FRAME,$WINDOW|$FRAME,$WINDOW"
  "frame+window, no BDP probe|$FRAME,$WINDOW,grpc.http2.bdp_probe=0|$FRAME,$WINDOW,grpc.http2.bdp_probe=0"
  "frame+window, reads 1M|$FRAME,$WINDOW,grpc.experimental.tcp_max_read_chunk_size=$MiB|$FRAME,$WINDOW,grpc.experimental.tcp_read_chunk_size=$MiB,grpc.experimental.tcp_min_read_chunk_size=$((256 * 1024)),grpc.experimental.tcp_max_read_chunk_size=$((4 * MiB))"
  "frame+window, write buffer 8M|$FRAME,$WINDOW,grpc.http2.write_buffer_size=$((8 * MiB))|$FRAME,$WINDOW,grpc.http2.write_buffer_size=$((8 * MiB))"
  "frame+window, 4M download chunks|$FRAME,$WINDOW|$FRAME,$WINDOW|--download_chunk_bytes=$((4 * MiB))"
  "frame+window, 16M upload messages|$FRAME,$WINDOW|$FRAME,$WINDOW|--upload_chunk_bytes=$((16 * MiB))"
)
for setting in "${SETTINGS[@]}"; do
  IFS='|' read -r name server_args client_args bench_flags <<< "$setting"
  "$SERVER_BIN" --backend="$BACKEND" --address=127.0.0.1:$PORT --metrics_address=127.0.0.1:0 \
    --buffer_quota_bytes=$((BYTES * 4 + (1 << 30))) ${server_args:+--grpc_channel_args=$server_args} \
    > /tmp/transport_server.log 2>&1 &
  server=$!
  for _ in $(seq 100); do
    timeout 2 "$BENCH_BIN" --target=127.0.0.1:$PORT --bytes=4096 --repeat=1 > /dev/null 2>&1 && break
    sleep 0.2
  done
  timeout 120 "$BENCH_BIN" --target=127.0.0.1:$PORT --bytes=$BYTES --repeat=3 --stripes=$STRIPES \
    --server_pid=$server --label="[$name]" ${client_args:+--channel_args=$client_args} $bench_flags \
    2>&1 | grep -v threads
  kill -TERM $server; wait $server 2>/dev/null
  PORT=$((PORT + 1))
done
