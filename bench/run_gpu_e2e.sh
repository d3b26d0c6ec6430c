#!/usr/bin/env bash
# The seeds end to end: the service as its users meet it, a fresh CUDA server and the
# Python client, each section one table.
#
# Here (no GPU needed):
#   cmake -S . -B build-cuda -DGPUCOMPUTE_ENABLE_CUDA=ON -DCMAKE_BUILD_TYPE=Release
#   nice cmake --build build-cuda -j2 --target gpucompute-server gpucompute-cli server_test
#   /work/shared/tools/device-bundle .device/e2e build-cuda/server/gpucompute-server \
#       build-cuda/client/gpucompute-cli build-cuda/tests/server_test
#   (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# On the GPU machine (device tool: carry [".device", "client/python/gpucompute/_proto"]):
#   bash bench/run_gpu_e2e.sh [SECTION...]     # logs under $OUT (or ./gpu-out)
#
# Sections (default: seeds suite faults, one device call; first, about 3 minutes, in a
# call of its own):
#   seeds   a freshly started server (start-up and warm-up), then the five seed
#           walkthroughs of examples/ through the Python client at the seeds' sizes
#   first   each operation's first request on a fresh server against later ones
#           (examples/seed002_first_call.py, goal: first <= 1.2 x later): through the
#           Python client, through the C++ CLI (one process per request), with
#           LD_BIND_NOW=1, and the same request after idle times (bench/after_idle.py);
#           BACKEND=cpu BUNDLE=build runs it without a GPU
#   suite   the end-to-end C++ suite (server_test) on the CUDA backend, filling the
#           device through kept results and recovering included
#   faults  not a benchmark: the restart drill, a CUDA server with
#           --inject_sticky_error_after=1 answers one request, fails the next, turns
#           NOT_SERVING and exits with status 3
set -u
BUNDLE=${BUNDLE:-.device/e2e}
# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
SERVER_BIN=$(find_bin gpucompute-server)
CLI=$(realpath -m "$(find_bin gpucompute-cli)")

section_seeds() (
  PORT=50151
  step "fresh $BACKEND server"
  "$SERVER_BIN" --backend="$BACKEND" --address=127.0.0.1:$PORT --metrics_address=127.0.0.1:9565 \
    --buffer_quota_bytes=100000000000 > "$OUT/server.log" 2>&1 &
  SERVER=$!
  await_health $PORT 100
  cat "$OUT/server.log"
  "$CLI" --target=127.0.0.1:$PORT info | tee "$OUT/info.txt"

  step "seed 002: first request vs steady state (fresh server)"
  timeout 120 "$PYTHON" examples/seed002_first_call.py --target 127.0.0.1:$PORT 2>&1 | tee "$OUT/seed002.txt"
  step "seed 001: haversine 1000 x 1000 mesh generated on the GPU"
  timeout 60 "$PYTHON" examples/seed001_haversine.py --target 127.0.0.1:$PORT 2>&1 | tee "$OUT/seed001.txt"
  step "seed 003: ten 10M-element float32 arrays, batched and concurrent"
  timeout 120 "$PYTHON" examples/seed003_normalize.py --target 127.0.0.1:$PORT 2>&1 | tee "$OUT/seed003.txt"
  step "seed 004: Lomb-Scargle, 2^10 samples x 2^20 frequencies"
  timeout 150 "$PYTHON" examples/seed004_lombscargle.py --target 127.0.0.1:$PORT 2>&1 | tee "$OUT/seed004.txt"
  step "seed 000: discount products, the thread's case then the full case in batches"
  timeout 150 "$PYTHON" examples/seed000_discount.py --target 127.0.0.1:$PORT --max-batches 2 2>&1 | tee "$OUT/seed000.txt"
  curl -s http://127.0.0.1:9565/metrics > "$OUT/metrics.txt" 2>/dev/null || true
  kill -TERM $SERVER; wait $SERVER; echo "server exit code $?"
)

section_first() (
  T_RUN=${T_RUN:-100}
  fresh_server() {  # port, log: starts it, waits for SERVING
    "$SERVER_BIN" --backend="$BACKEND" --address=127.0.0.1:"$1" --metrics_address=127.0.0.1:$(($1 + 1000)) \
      --buffer_quota_bytes=100000000000 > "$OUT/$2" 2>&1 &
    SERVER=$!
    await_health "$1" 300 && return 0
    echo "server on port $1 did not come up:"; cat "$OUT/$2"; return 1
  }
  stop_server() { kill -TERM "$SERVER"; wait "$SERVER"; echo "server exit code $?"; }

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

  step "first requests: checks"
  for f in first_python first_cli first_bind_now; do
    echo "$f: $(grep -c 'CHECK PASS' "$OUT/$f.txt" 2>/dev/null) passed, $(grep -c 'CHECK FAIL' "$OUT/$f.txt" 2>/dev/null) failed" \
         "(first <= 1.2 x later median + 0.3 ms; first results right)"
    grep -E 'CHECK FAIL' "$OUT/$f.txt" 2>/dev/null | sed 's/^/  /'
  done | tee -a "$OUT/summary.txt"
)

section_suite() (
  step "end-to-end suite on the $BACKEND backend (limit 300s)"
  GPUCOMPUTE_TEST_BACKEND=$BACKEND timeout 300 "$(find_bin server_test)" --gtest_color=no > "$OUT/server_test_$BACKEND.log" 2>&1
  echo "rc=$?" >> "$OUT/server_test_$BACKEND.log"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^rc=|Filling' "$OUT/server_test_$BACKEND.log"
  grep -B2 -A10 'Failure' "$OUT/server_test_$BACKEND.log" | head -60
)

section_faults() (
  step "restart drill: $BACKEND server with --inject_sticky_error_after=1"
  "$SERVER_BIN" --backend="$BACKEND" --address=127.0.0.1:50161 --metrics_address= --inject_sticky_error_after=1 \
    --grace_period=5s > "$OUT/drill.log" 2>&1 &
  P=$!
  await_health 50161 100
  "$CLI" --target=127.0.0.1:50161 haversine --lat=0:1:100 --lon=0:1:100 --ref=0,0 --out="$OUT/drill_a.npy"
  echo "first request rc=$? (want 0)"
  "$CLI" --target=127.0.0.1:50161 haversine --lat=0:1:100 --lon=0:1:100 --ref=0,0 --out="$OUT/drill_b.npy"
  echo "second request rc=$? (want non-zero)"
  sleep 0.3
  "$CLI" --target=127.0.0.1:50161 --timeout=1s health
  echo "health rc=$? (NOT_SERVING, or refused once the server has exited)"
  wait $P; echo "server exit status $? (want 3)"
  cat "$OUT/drill.log"
)

run_sections "seeds suite faults" "$@"
