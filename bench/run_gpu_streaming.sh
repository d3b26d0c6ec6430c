#!/usr/bin/env bash
# StreamingCompute throughput on a GPU machine (seed 000's 80 GB each way in
# <= 25 s needs >= 3.2 GB/s each way at once), in one device call, about 5 minutes:
#  1. the C++ client (bulk-transfer-bench --streaming: float64 discount product, factors
#     (1e6, 5) stored, values (D, 1e6, 5) streamed, result checked exactly) on 1, 2, 4
#     and 8 stripes (calls over ranges of D, one connection each), with the server's CPU
#     per GB by thread;
#  2. the same with more chunks in flight per call (--streaming_chunks_in_flight=16);
#  3. the Python client, one call, and K Python processes streaming 1/K of the values
#     each at once (what process stripes can reach, one GIL each);
#  4. seed 000's full case through the C++ client: 80 GB each way as 10 calls of 8 GB on
#     8 stripes, each call's result checked (untimed) in one reused buffer;
#  5. the CLI streaming between .npy files in /dev/shm on 1 and 8 stripes.
# SECTIONS=45 runs sections 4 and 5 only.
#
# Here:   cmake --build build-cuda --target gpucompute-server gpucompute-cli bulk-transfer-bench
#         /work/shared/tools/device-bundle .device/strm/b build-cuda/server/gpucompute-server \
#             build-cuda/client/gpucompute-cli build-cuda/bench/bulk-transfer-bench
#         (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# There:  BUNDLE=.device/strm/b bash bench/run_gpu_streaming.sh
#         (carry .device and client/python/gpucompute/_proto)
set -u
BUNDLE=${BUNDLE:-.device/strm/b}
BYTES=${BYTES:-4000000000}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
find_bin() { for p in "$BUNDLE/$1" "$BUNDLE"/*/"$1"; do [ -x "$p" ] && { echo "$p"; return; }; done; }
SERVER_BIN=$(find_bin gpucompute-server)
BENCH=$(find_bin bulk-transfer-bench)
CLI=$(find_bin gpucompute-cli)
step() { echo; echo "=== $* ($(date +%T))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
echo "$(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

PORT=50300
start_server() {  # flags...
  PORT=$((PORT + 1))
  "$SERVER_BIN" --backend=${BACKEND:-cuda} --address=127.0.0.1:$PORT --metrics_address=127.0.0.1:0 \
    --stream_idle_timeout=120s "$@" > "$OUT/server_$PORT.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 300); do
    timeout 2 "$CLI" --target=127.0.0.1:$PORT health > /dev/null 2>&1 && return
    sleep 0.2
  done
}
stop_server() { kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; }

SECTIONS=${SECTIONS:-12345}
if [[ $SECTIONS == *1* ]]; then
step "1. C++ client, $BYTES bytes of float64 values each way, default server"
start_server
for s in 1 2 4 8; do
  timeout 100 "$BENCH" --target=127.0.0.1:$PORT --streaming --bytes=$BYTES --repeat=3 \
    --stripes=$s --server_pid=$SERVER 2>&1 | tee -a "$OUT/table.txt"
done
stop_server

fi
if [[ $SECTIONS == *2* ]]; then
step "2. C++ client, --streaming_chunks_in_flight=16"
start_server --streaming_chunks_in_flight=16
for s in 1 4 8; do
  timeout 100 "$BENCH" --target=127.0.0.1:$PORT --streaming --bytes=$BYTES --repeat=3 \
    --stripes=$s --server_pid=$SERVER --label=cpp-inflight16 2>&1 | tee -a "$OUT/table.txt"
done
stop_server

fi
if [[ $SECTIONS == *3* ]]; then
step "3. Python client: one call, and K processes at once over 1/K of the values each"
start_server
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
for parts in 1 4 8; do
  cpu0=$(awk '{print $14 + $15}' /proc/$SERVER/stat)
  pids=(); fifos=()
  for k in $(seq 0 $((parts - 1))); do
    mkfifo "$OUT/go$k"
    (timeout 150 python3 "$OUT/py_stream.py" 127.0.0.1:$PORT $BYTES $k $parts < "$OUT/go$k" \
      > "$OUT/py_$parts.$k.txt" 2>&1) &
    pids+=($!)
  done
  for k in $(seq 0 $((parts - 1))); do exec {fd}>"$OUT/go$k"; fifos+=($fd); done
  for _ in $(seq 600); do
    [ "$(cat "$OUT"/py_$parts.*.txt 2>/dev/null | grep -c ready)" -ge "$parts" ] && break; sleep 0.1
  done
  for fd in "${fifos[@]}"; do echo go >&$fd; exec {fd}>&-; done
  wait "${pids[@]}"
  cpu1=$(awk '{print $14 + $15}' /proc/$SERVER/stat)
  cat "$OUT"/py_$parts.*.txt | grep -v ready
  # Together: the bytes of every part over the slowest part's time (they start at once).
  cat "$OUT"/py_$parts.*.txt | grep "each way in" | awk -v p=$parts -v t=$((cpu1 - cpu0)) \
    -v clk=$clk '{ b += $3; s = $8 + 0; if (s > m) m = s } END {
    printf "python processes=%d streaming %.2f GB each way, slowest %.3f s: %.2f GB/s each way, server %.2f core-s/GB\n",
      p, b, m, b / m, t / clk / b }' | tee -a "$OUT/table.txt"
  rm -f "$OUT"/go*
done
stop_server

fi
if [[ $SECTIONS == *4* ]]; then
step "4. seed 000's full case, C++ client: 80 GB of values each way as 10 calls of 8 GB, 8 stripes"
for inflight in 4 16; do
  start_server --streaming_chunks_in_flight=$inflight
  timeout 200 "$BENCH" --target=127.0.0.1:$PORT --streaming --bytes=8000000000 \
    --streaming_total_bytes=80000000000 --repeat=1 --stripes=8 --server_pid=$SERVER \
    --label=cpp-seed000-inflight$inflight 2>&1 | tee -a "$OUT/table.txt"
  stop_server
done

fi
if [[ $SECTIONS == *5* ]]; then
step "5. the CLI: stream discount-product between .npy files in /dev/shm, 1 and 8 stripes"
SHM=/dev/shm/gc-streaming
mkdir -p $SHM
python3 - $SHM $BYTES <<'PY'
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
start_server
clk=$(getconf CLK_TCK)
for s in 1 8; do
  cpu0=$(awk '{print $14 + $15}' /proc/$SERVER/stat); t0=$(date +%s%N)
  timeout 100 "$CLI" --target=127.0.0.1:$PORT --stripes=$s stream discount-product \
    --factors=$SHM/factors.npy --values=$SHM/values.npy --out=$SHM/out$s.npy > "$OUT/cli$s.txt" 2>&1 \
    || { echo "cli stream failed"; cat "$OUT/cli$s.txt"; }
  t1=$(date +%s%N); cpu1=$(awk '{print $14 + $15}' /proc/$SERVER/stat)
  b=$(stat -c %s $SHM/values.npy)
  awk -v s=$s -v b=$b -v ns=$((t1 - t0)) -v t=$((cpu1 - cpu0)) -v clk=$clk 'BEGIN {
    printf "cli stripes=%d stream %.2f GB each way in %.3f s: %.2f GB/s each way, server %.2f core-s/GB\n",
      s, b / 1e9, ns / 1e9, b / ns, t / clk / (b / 1e9) }' | tee -a "$OUT/table.txt"
done
cmp $SHM/out1.npy $SHM/out8.npy && echo "cli: 1 and 8 stripes byte-identical" | tee -a "$OUT/table.txt"
stop_server
rm -rf $SHM
fi

step "summary"
cat "$OUT/table.txt"
