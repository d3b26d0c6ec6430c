#!/usr/bin/env bash
# Same host: a client on the server's host hands its arrays over through shared memory or
# CUDA IPC instead of gRPC; against local CuPy from the same NumPy arrays; each section
# one table.
#
# Here (no GPU needed):
#   cmake -S . -B build-cuda -DGPUCOMPUTE_ENABLE_CUDA=ON -DCMAKE_BUILD_TYPE=Release
#   nice cmake --build build-cuda -j2 --target gpucompute-server gpucompute-cli \
#       shared_memory_test gpu_shared_memory_test
#   /work/shared/tools/device-bundle .device/shm build-cuda/server/gpucompute-server \
#       build-cuda/client/gpucompute-cli build-cuda/tests/shared_memory_test \
#       build-cuda/tests/gpu_shared_memory_test
#   (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# On the GPU machine (device tool: carry [".device", "client/python/gpucompute/_proto"]):
#   bash bench/run_gpu_shm.sh [SECTION...]     # logs under $OUT (or ./gpu-out)
#
# Sections (default: tests shm seeds, about 3 minutes; numpy dask in another call):
#   tests  shared_memory_test on the CUDA backend (system regions, CUDA IPC from another
#          process), gpu_shared_memory_test, tests/python/test_shared_memory.py (CuPy
#          included) where pytest is installed
#   shm    bench/shm_bench.py: shared memory and CUDA IPC against local CuPy, with the
#          pinned PCIe ceiling measured in the same run
#   seeds  the five seed walkthroughs, each printing its gRPC and its shared-memory variant
#   numpy  bench/same_host.py: the seeds from plain NumPy arrays through the client's
#          shared-memory pool, over gRPC, and local CuPy, median of 5
#   dask   bench/dask_seeds.py: seeds 000 and 003 as Dask arrays of 4 GB through one and
#          three servers sharing the GPU, against the plain client (DASK_PATH: a folder
#          holding a Dask that imports there, e.g. Debian's, put after client/python)
set -u
BUNDLE=${BUNDLE:-.device/shm}
# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
SERVER_BIN=$(find_bin gpucompute-server)
PORT=50161

start_shm_server() {  # a server that maps its clients' memory; sets SERVER
  "$SERVER_BIN" --backend="$BACKEND" --address=127.0.0.1:$PORT --metrics_address= \
    --allow_shared_memory --buffer_quota_bytes=100000000000 > "$OUT/shm_server.log" 2>&1 &
  SERVER=$!
  await_health $PORT 150
  cat "$OUT/shm_server.log"
}

section_tests() (
  nvidia-smi --query-gpu=pcie.link.gen.current,pcie.link.width.current --format=csv 2>&1
  step "shared_memory_test on the $BACKEND backend, gpu_shared_memory_test (CUDA IPC)"
  GPUCOMPUTE_TEST_BACKEND=$BACKEND timeout 120 "$(find_bin shared_memory_test)" --gtest_color=no > "$OUT/shm_test_$BACKEND.log" 2>&1
  echo "rc=$?" >> "$OUT/shm_test_$BACKEND.log"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^rc=' "$OUT/shm_test_$BACKEND.log"
  grep -B2 -A10 ': Failure' "$OUT/shm_test_$BACKEND.log" | head -40
  timeout 90 "$(find_bin gpu_shared_memory_test)" --gtest_color=no > "$OUT/gpu_shm_test.log" 2>&1
  echo "rc=$?" >> "$OUT/gpu_shm_test.log"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^rc=' "$OUT/gpu_shm_test.log"
  grep -B2 -A10 ': Failure' "$OUT/gpu_shm_test.log" | head -40

  step "Python shared-memory tests on the $BACKEND backend, CuPy IPC included (limit 120s)"
  if "$PYTHON" -c "import pytest" 2>/dev/null; then
    GPUCOMPUTE_TEST_BACKEND=$BACKEND GPUCOMPUTE_SERVER="$SERVER_BIN" \
      timeout 120 "$PYTHON" -m pytest -q -p no:cacheprovider tests/python/test_shared_memory.py 2>&1 | tail -15
  else
    echo "pytest not installed: skipped (the shm section checks every CUDA IPC result)"
  fi
)

section_shm() (
  step "$BACKEND server with --allow_shared_memory"
  start_shm_server
  step "shm_bench: gpucompute (shared memory, CUDA IPC) vs local CuPy (limit 150s)"
  timeout 150 "$PYTHON" bench/shm_bench.py --target 127.0.0.1:$PORT 2>&1 | tee "$OUT/shm_bench.txt"
  kill -TERM "$SERVER"; wait "$SERVER"; echo "server exit code $?"
  step "shm"
  sed -n '/^case /,$p' "$OUT/shm_bench.txt"
)

section_seeds() (
  step "$BACKEND server with --allow_shared_memory"
  start_shm_server
  step "seed walkthroughs, gRPC and shared-memory variants (limit 60s each)"
  for seed in seed001_haversine seed003_normalize seed004_lombscargle seed002_first_call; do
    echo "--- $seed"
    timeout 60 "$PYTHON" examples/$seed.py --target 127.0.0.1:$PORT 2>&1 | tail -25 | tee "$OUT/$seed.txt"
  done
  echo "--- seed000_discount"
  timeout 60 "$PYTHON" examples/seed000_discount.py --target 127.0.0.1:$PORT --small 2>&1 | tail -25 | tee "$OUT/seed000_discount.txt"
  kill -TERM "$SERVER"; wait "$SERVER"; echo "server exit code $?"
)

section_numpy() (
  step "same_host.py: plain NumPy through the shared-memory pool, over gRPC, local CuPy (limit 240s)"
  timeout 240 "$PYTHON" bench/same_host.py --server "$SERVER_BIN" --reps "${REPS:-5}" 2>&1 | tee "$OUT/same_host.txt"
)

section_dask() (
  step "dask_seeds.py: ${DASK_GB:-4} GB through one and three servers (limit 300s)"
  PYTHONPATH=$PYTHONPATH${DASK_PATH:+:$DASK_PATH} timeout 300 "$PYTHON" bench/dask_seeds.py --server "$SERVER_BIN" \
    --gb "${DASK_GB:-4}" --servers 3 --reps 2 --no-distributed -- --backend="$BACKEND" 2>&1 | tee "$OUT/dask_seeds.txt"
)

run_sections "tests shm seeds" "$@"
