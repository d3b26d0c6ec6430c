#!/usr/bin/env bash
# Bulk transfer on a GPU machine, in one device call: a CUDA server, then
# 2 GiB uploads and downloads through the C++ client (bulk-transfer-bench) and the
# Python client, one stream and striped, with server CPU per GB (bench/run_bulk.sh);
# then the same on the CPU backend for comparison, and seed 000's full case
# ("transfer", about 8 minutes); then StreamingCompute ("streaming", about 4 minutes):
# its suite on the CUDA backend, and 8 GiB through discount product streamed vs
# upload-compute-download (bench/run_streaming.sh; the CLI with 4 GiB .npy files), the
# Python streamed runs on 1 and 8 stripes.
#
# Here:   cmake --build build-cuda --target gpucompute-server gpucompute-cli \
#             bulk-transfer-bench streaming_compute_test
#         /work/shared/tools/device-bundle .device/bulk build-cuda/server/gpucompute-server \
#             build-cuda/client/gpucompute-cli build-cuda/bench/bulk-transfer-bench \
#             build-cuda/tests/streaming_compute_test
#         (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# There:  bash bench/run_gpu_bulk.sh [all|transfer|streaming]
#         (carry .device and client/python/gpucompute/_proto)
set -u
PARTS=${1:-all}
BUNDLE=${BUNDLE:-.device/bulk}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
step() { echo; echo "=== $* ($(date +%T))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
python3 -c "import grpc, numpy, sys; print('grpcio', grpc.__version__, 'numpy', numpy.__version__, 'python', sys.version.split()[0])"
# What a Python client's receive costs depends on (bench/NOTES.md, Transfers): huge pages
# for the result arrays, the CPU, glibc.
echo "THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null), defrag" \
  "$(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null); $(nproc) CPUs:" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); $(ldd --version 2>/dev/null | head -1)"

if [ "$PARTS" != streaming ]; then
step "CUDA backend, 2 GiB, 1 and 8 stripes"
OUT=$OUT/cuda T_STEP=100 PY_CHUNKS="262144 1048576 4194304" REPEAT=2 timeout 260 \
  bash bench/run_bulk.sh "$BUNDLE" cuda 2147483648 8
step "CPU backend, 2 GiB, 1 and 8 stripes"
OUT=$OUT/cpu T_STEP=60 REPEAT=2 PORT=50181 timeout 150 bash bench/run_bulk.sh "$BUNDLE" cpu 2147483648 8

step "seed 000 full case (80 GB each way) through the Python client, 8 stripes"
"$BUNDLE/gpucompute-server" --backend=cuda --address=127.0.0.1:50191 --metrics_address=127.0.0.1:0 \
  --buffer_quota_bytes=100000000000 > "$OUT/seed000_server.log" 2>&1 &
SERVER=$!
sleep 3
timeout 150 python3 examples/seed000_discount.py --target 127.0.0.1:50191 --stripes 8 2>&1 \
  | tail -8 | tee "$OUT/seed000.txt"
kill -TERM $SERVER; wait $SERVER
fi

if [ "$PARTS" != transfer ]; then
step "StreamingCompute suite on the CUDA backend"
GPUCOMPUTE_TEST_BACKEND=cuda timeout 120 "$BUNDLE/streaming_compute_test" 2>&1 \
  | tee "$OUT/streaming_compute_test_cuda.txt" | grep -E "^\[ +(FAILED|PASSED) +\]|Failure" -A3
step "StreamingCompute vs upload-compute-download, CUDA, 8 GiB (CLI 4 GiB)"
OUT=$OUT/cuda T_STEP=150 timeout 280 bash bench/run_streaming.sh "$BUNDLE" cuda 8589934592 4294967296
step "seed 000 full case, batches of 16 slices (6.4 GB) as 8 StreamingCompute calls each, first 3"
"$BUNDLE/gpucompute-server" --backend=cuda --address=127.0.0.1:50192 --metrics_address=127.0.0.1:0 \
  --buffer_quota_bytes=100000000000 > "$OUT/seed000_streaming_server.log" 2>&1 &
SERVER=$!
sleep 3
timeout 150 python3 examples/seed000_discount.py --target 127.0.0.1:50192 --streaming \
  --stripes 8 --batch 16 --max-batches 3 2>&1 | tail -8 | tee "$OUT/seed000_streaming.txt"
kill -TERM $SERVER; wait $SERVER
fi

step "summary"
grep -h "GB/s" "$OUT"/cuda/bulk_cuda.txt "$OUT"/cpu/bulk_cpu.txt 2>/dev/null | sed 's/^/  /'
grep -h "full case" "$OUT/seed000.txt" 2>/dev/null | sed 's/^/  /'
grep -h "GB/s\|identical\|DIFFER" "$OUT"/cuda/streaming_cuda.txt 2>/dev/null | sed 's/^/  /'
grep -h "full case" "$OUT/seed000_streaming.txt" 2>/dev/null | sed "s/^/  streaming /"
