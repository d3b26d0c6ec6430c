#!/usr/bin/env bash
# Faults on a real GPU, in one device call: the end-to-end suite on the CUDA backend
# (it includes filling the device through kept results, then recovering) and a
# restart drill (a CUDA server with --inject_sticky_error_after=1 must answer one
# request, fail the next, turn NOT_SERVING and exit with status 3).
# Here:   cmake --build build-cuda --target gpucompute-server gpucompute-cli server_test
#         /work/shared/tools/device-bundle .device/e2e build-cuda/server/gpucompute-server \
#             build-cuda/client/gpucompute-cli build-cuda/tests/server_test
# There:  bash bench/run_gpu_faults.sh   (carry .device/e2e)
set -u
S=${BUNDLE:-.device/e2e}; export LD_LIBRARY_PATH=$S/lib
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "=== server_test on the CUDA backend"
GPUCOMPUTE_TEST_BACKEND=cuda timeout 300 $S/server_test --gtest_color=no > $OUT/server_test_cuda.log 2>&1; echo "rc=$?" >> $OUT/server_test_cuda.log
grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^rc=|Filling' $OUT/server_test_cuda.log
grep -B2 -A10 'Failure' $OUT/server_test_cuda.log | head -40
echo "=== restart drill: CUDA server with --inject_sticky_error_after=1"
$S/gpucompute-server --backend=cuda --address=127.0.0.1:50161 --metrics_address= --inject_sticky_error_after=1 --grace_period=5s > $OUT/drill.log 2>&1 & P=$!
for i in $(seq 100); do $S/gpucompute-cli --target=127.0.0.1:50161 --timeout=1s health >/dev/null 2>&1 && break; sleep 0.1; done
$S/gpucompute-cli --target=127.0.0.1:50161 haversine --lat=0:1:100 --lon=0:1:100 --ref=0,0 --out=/tmp/a.npy; echo "first request rc=$?"
$S/gpucompute-cli --target=127.0.0.1:50161 haversine --lat=0:1:100 --lon=0:1:100 --ref=0,0 --out=/tmp/b.npy; echo "second request rc=$?"
sleep 0.3; $S/gpucompute-cli --target=127.0.0.1:50161 --timeout=1s health; echo "health rc=$?"
wait $P; echo "server exit status $?"
cat $OUT/drill.log
