#!/usr/bin/env bash
# Same-host zero copy on a GPU machine, in one device call: the shared-memory
# tests on the CUDA backend (C++: system regions, and CUDA IPC from another process;
# Python, CuPy included where pytest is installed), then bench/shm_bench.py
# (gpucompute through shared memory and CUDA IPC side by side with local CuPy, with the
# pinned PCIe ceiling measured in the same run), then the five seed walkthroughs, each
# printing its gRPC and its shared-memory variant.
#
# Here:   export CCACHE_BASEDIR=/work
#         cmake --build build-cuda -j2 --target gpucompute-server gpucompute-cli \
#             shared_memory_test gpu_shared_memory_test
#         /work/shared/tools/device-bundle .device/shm build-cuda/server/gpucompute-server \
#             build-cuda/client/gpucompute-cli build-cuda/tests/shared_memory_test \
#             build-cuda/tests/gpu_shared_memory_test
#         (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# There:  BUNDLE=.device/shm bash bench/run_gpu_shm.sh
#         (carry .device and client/python/gpucompute/_proto); about 3 minutes.
set -u
BUNDLE=${BUNDLE:-.device/shm}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PORT=50161
step() { echo; echo "=== $* ($(date +%T))"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv 2>&1

step "1. shared_memory_test on the CUDA backend, gpu_shared_memory_test (CUDA IPC)"
GPUCOMPUTE_TEST_BACKEND=cuda timeout 120 "$BUNDLE/shared_memory_test" --gtest_color=no > "$OUT/shm_test_cuda.log" 2>&1
echo "rc=$?" >> "$OUT/shm_test_cuda.log"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^rc=' "$OUT/shm_test_cuda.log"
grep -B2 -A10 ': Failure' "$OUT/shm_test_cuda.log" | head -40
timeout 90 "$BUNDLE/gpu_shared_memory_test" --gtest_color=no > "$OUT/gpu_shm_test.log" 2>&1
echo "rc=$?" >> "$OUT/gpu_shm_test.log"
grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^rc=' "$OUT/gpu_shm_test.log"
grep -B2 -A10 ': Failure' "$OUT/gpu_shm_test.log" | head -40

step "2. Python shared-memory tests on the CUDA backend, CuPy IPC included (limit 120s)"
if python3 -c "import pytest" 2>/dev/null; then
  GPUCOMPUTE_TEST_BACKEND=cuda GPUCOMPUTE_SERVER="$BUNDLE/gpucompute-server" \
    timeout 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_shared_memory.py 2>&1 | tail -15
else
  echo "pytest not installed: skipped (shm_bench.py below checks every CUDA IPC result)"
fi

step "3. CUDA server with --allow_shared_memory"
"$BUNDLE/gpucompute-server" --backend=cuda --address=127.0.0.1:$PORT --metrics_address= \
  --allow_shared_memory --buffer_quota_bytes=100000000000 > "$OUT/shm_server.log" 2>&1 &
SERVER=$!
for _ in $(seq 150); do
  "$BUNDLE/gpucompute-cli" --target=127.0.0.1:$PORT --timeout=1s health > /dev/null 2>&1 && break
  sleep 0.1
done
cat "$OUT/shm_server.log"

step "4. shm_bench: gpucompute (shared memory, CUDA IPC) vs local CuPy (limit 150s)"
timeout 150 python3 bench/shm_bench.py --target 127.0.0.1:$PORT 2>&1 | tee "$OUT/shm_bench.txt"

step "5. seed walkthroughs, gRPC and shared-memory variants (limit 60s each)"
for seed in seed001_haversine seed003_normalize seed004_lombscargle seed002_first_call; do
  echo "--- $seed"
  timeout 60 python3 examples/$seed.py --target 127.0.0.1:$PORT 2>&1 | tail -25 | tee "$OUT/$seed.txt"
done
echo "--- seed000_discount"
timeout 60 python3 examples/seed000_discount.py --target 127.0.0.1:$PORT --small 2>&1 | tail -25 | tee "$OUT/seed000_discount.txt"

kill -TERM $SERVER; wait $SERVER; echo "server exit code $?"
step "summary"
sed -n '/^case /,$p' "$OUT/shm_bench.txt"
