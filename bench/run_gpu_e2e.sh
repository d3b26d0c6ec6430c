#!/usr/bin/env bash
# The service end to end on a GPU machine, in one device call, after bench/run_gpu.sh:
# a freshly started CUDA server (start-up and warm-up time, first request vs steady
# state), the end-to-end C++ suite on the CUDA backend, and the five seed
# walkthroughs through the Python client at the seeds' sizes.
#
# Here:   cmake --build build-cuda --target gpucompute-server gpucompute-cli server_test
#         /work/shared/tools/device-bundle .device/gpu build-cuda/server/gpucompute-server \
#             build-cuda/client/gpucompute-cli build-cuda/tests/server_test
#         /usr/bin/python3 -m gpucompute._build_proto --force   (in client/python)
# There:  bash bench/run_gpu_e2e.sh   (carry .device and client/python/gpucompute/_proto)
set -u
BUNDLE=${BUNDLE:-.device/gpu}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PORT=50151
step() { echo; echo "=== $* ($(date +%T))"; }

step "fresh CUDA server"
"$BUNDLE/gpucompute-server" --backend=cuda --address=127.0.0.1:$PORT --metrics_address=127.0.0.1:9565 \
  --buffer_quota_bytes=100000000000 > "$OUT/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do
  "$BUNDLE/gpucompute-cli" --target=127.0.0.1:$PORT --timeout=1s health > /dev/null 2>&1 && break
  sleep 0.1
done
cat "$OUT/server.log"
"$BUNDLE/gpucompute-cli" --target=127.0.0.1:$PORT info | tee "$OUT/info.txt"

step "seed 002: first request vs steady state (fresh server)"
timeout 120 python3 examples/seed002_first_call.py --target 127.0.0.1:$PORT 2>&1 | tee "$OUT/seed002.txt"
step "seed 001: haversine 1000 x 1000 mesh generated on the GPU"
timeout 60 python3 examples/seed001_haversine.py --target 127.0.0.1:$PORT 2>&1 | tee "$OUT/seed001.txt"
step "seed 003: ten 10M-element float32 arrays, batched and concurrent"
timeout 120 python3 examples/seed003_normalize.py --target 127.0.0.1:$PORT 2>&1 | tee "$OUT/seed003.txt"
step "seed 004: Lomb-Scargle, 2^10 samples x 2^20 frequencies"
timeout 150 python3 examples/seed004_lombscargle.py --target 127.0.0.1:$PORT 2>&1 | tee "$OUT/seed004.txt"
step "seed 000: discount products, the thread's case then the full case in batches"
timeout 150 python3 examples/seed000_discount.py --target 127.0.0.1:$PORT --max-batches 2 2>&1 | tee "$OUT/seed000.txt"
curl -s http://127.0.0.1:9565/metrics > "$OUT/metrics.txt" 2>/dev/null || true
kill -TERM $SERVER; wait $SERVER; echo "server exit code $?"

step "end-to-end suite on the CUDA backend"
GPUCOMPUTE_TEST_BACKEND=cuda timeout 180 "$BUNDLE/server_test" --gtest_color=no > "$OUT/server_test_cuda.log" 2>&1
echo "rc=$?" >> "$OUT/server_test_cuda.log"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^rc=' "$OUT/server_test_cuda.log"
grep -B2 -A10 'Failure' "$OUT/server_test_cuda.log" | head -60
