#!/usr/bin/env bash
# First request vs steady state (the goal: every operation's first request on a fresh
# server <= 1.2x its steady state), in one device call, ~4 minutes: a freshly started
# CUDA server per client, examples/seed002_first_call.py through the Python client,
# then through the C++ CLI (one process per request), each printing per operation and
# dtype the first request's server time, the median of later ones sent after the same
# 0.2 s pause (and of as many back to back), the ratio and where a first request's extra
# time went by phase, and whether each first result is right. A third fresh server runs
# with LD_BIND_NOW=1 (symbols bound at start, not at first call), a fourth takes the
# same request after idle times (bench/after_idle.py); then the end-to-end suite on the
# CUDA backend (result chunks copied off the GPU into the prefilled, size-classed
# ChunkMemory blocks), when its binary is in the bundle.
#
# Here (no GPU needed):
#   cmake -S . -B build-cuda -DGPUCOMPUTE_ENABLE_CUDA=ON -DCMAKE_BUILD_TYPE=Release
#   nice cmake --build build-cuda -j2 --target gpucompute-server gpucompute-cli server_test
#   /work/shared/tools/device-bundle .device/first build-cuda/server/gpucompute-server \
#       build-cuda/client/gpucompute-cli build-cuda/tests/server_test
#   (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# On the GPU machine (device tool: carry [".device", "client/python/gpucompute/_proto"]):
#   bash bench/run_gpu_first.sh     # logs under $OUT (or ./gpu-out)
set -u
BUNDLE=${BUNDLE:-.device/first}
BACKEND=${BACKEND:-cuda}  # cpu: a dry run of this script without a GPU
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
CLI="$PWD/$BUNDLE/gpucompute-cli"
T_RUN=${T_RUN:-100}
PYTHON=${PYTHON:-python3}
step() { echo; echo "=== $* ($(date +%T))"; }

fresh_server() {  # port, log: starts it, waits for SERVING
  "$BUNDLE/gpucompute-server" --backend=$BACKEND --address=127.0.0.1:$1 --metrics_address=127.0.0.1:$(($1 + 1000)) \
    --buffer_quota_bytes=100000000000 > "$OUT/$2" 2>&1 &
  SERVER=$!
  for _ in $(seq 300); do
    "$CLI" --target=127.0.0.1:$1 --timeout=1s health > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "server on port $1 did not come up:"; cat "$OUT/$2"; return 1
}
stop_server() { kill -TERM "$SERVER"; wait "$SERVER"; echo "server exit code $?"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>&1 | tee "$OUT/summary.txt"

step "1. fresh server, Python client (limit ${T_RUN}s)"
if fresh_server 50161 server_python.log; then
  cat "$OUT/server_python.log"
  timeout "$T_RUN" "$PYTHON" examples/seed002_first_call.py --target 127.0.0.1:50161 2>&1 | tee "$OUT/first_python.txt"
  stop_server
fi

step "2. fresh server, C++ CLI (limit ${T_RUN}s)"
if fresh_server 50163 server_cli.log; then
  timeout "$T_RUN" "$PYTHON" examples/seed002_first_call.py --target 127.0.0.1:50163 --cli "$CLI" 2>&1 | tee "$OUT/first_cli.txt"
  stop_server
fi

# Lazy symbol binding: a first request resolves hundreds of gRPC, protobuf and Abseil
# functions through the dynamic linker (~70 us on the CPU here); LD_BIND_NOW=1 binds
# them all at start. Measured on its own, so the two runs above stay the plain binary.
step "3. fresh server started with LD_BIND_NOW=1, Python client (limit ${T_RUN}s)"
if LD_BIND_NOW=1 fresh_server 50165 server_bind_now.log; then
  timeout "$T_RUN" "$PYTHON" examples/seed002_first_call.py --target 127.0.0.1:50165 2>&1 | tee "$OUT/first_bind_now.txt"
  stop_server
fi

# What a first request pays beyond a later one is the host's wake-up from idle, which
# any request after a pause pays (bench/NOTES.md, First requests): the same request after idle times.
step "4. fresh server, requests after idle (bench/after_idle.py, limit ${T_RUN}s)"
if fresh_server 50167 server_after_idle.log; then
  timeout "$T_RUN" "$PYTHON" bench/after_idle.py --target 127.0.0.1:50167 2>&1 | tee "$OUT/after_idle.txt"
  stop_server
fi

if [ -x "$BUNDLE/server_test" ]; then
  step "5. end-to-end suite on the CUDA backend (limit 180s)"
  GPUCOMPUTE_TEST_BACKEND=cuda timeout 180 "$BUNDLE/server_test" --gtest_color=no > "$OUT/server_test_cuda.log" 2>&1
  echo "rc=$?" >> "$OUT/server_test_cuda.log"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^rc=' "$OUT/server_test_cuda.log"
  grep -B2 -A10 'Failure' "$OUT/server_test_cuda.log" | head -40
fi

step "summary"
{
  for f in first_python first_cli first_bind_now; do
    echo "$f: $(grep -c 'CHECK PASS' "$OUT/$f.txt" 2>/dev/null) passed, $(grep -c 'CHECK FAIL' "$OUT/$f.txt" 2>/dev/null) failed" \
         "(first <= 1.2 x later median + 0.3 ms; first results right)"
    grep -E 'CHECK FAIL' "$OUT/$f.txt" 2>/dev/null | sed 's/^/  /'
  done
} | tee -a "$OUT/summary.txt"
