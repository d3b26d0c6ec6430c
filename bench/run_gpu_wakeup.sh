#!/usr/bin/env bash
# Issue #13: what thread wake-ups cost on the device host, and what they cost a small
# request, in one device call:
#   1. host_wakeup_bench as is, with SCHED_IDLE spinners, with /dev/cpu_dma_latency at 0;
#   2. gpu_small_op_bench at 0, 250, 500 and 1000 us between calls (the GPU part of a
#      1024-element request as the request rate falls);
#   3. run_gpu_session.sh's 1-in-flight rows, C++ and Python, CUDA backend, plain and
#      again while host_wakeup_bench --hold_s holds the spinners / the latency request.
#
# Here:   cmake --build build-cuda -j2 --target gpucompute-server gpucompute-cli \
#             gpu_small_op_bench host_wakeup_bench
#         /work/shared/tools/device-bundle .device/wakeup build-cuda/server/gpucompute-server \
#             build-cuda/client/gpucompute-cli build-cuda/bench/gpu_small_op_bench
#         cp build-cuda/bench/host_wakeup_bench .device/wakeup/   (it needs no bundled library,
#             which device-bundle takes for a failure)
#         (cd .device && tar -cJf wakeup.txz wakeup)
#         (cd client/python && /usr/bin/python3 -m gpucompute._build_proto --force)
# There:  bash bench/run_gpu_wakeup.sh   (carry .device/wakeup.txz and client/python/gpucompute/_proto)
set -u
BUNDLE=${BUNDLE:-.device/wakeup}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
[ -d "$BUNDLE" ] || tar -C "$(dirname "$BUNDLE")" -xJf "$BUNDLE.txz" || exit 1
export LD_LIBRARY_PATH="$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
WAKE="$BUNDLE/host_wakeup_bench"
step() { echo; echo "=== $* ($(date +%T))"; }

step "1. wake-ups"
"$WAKE" | tee "$OUT/wakeup.txt"
"$WAKE" --idle_spinners | tail -5 | tee -a "$OUT/wakeup.txt"
"$WAKE" --dma_latency_us=0 | tail -5 | tee -a "$OUT/wakeup.txt"

step "2. the GPU part of a small request, calls spaced"
for gap in 0 250 500 1000; do
  "$BUNDLE/gpu_small_op_bench" --sync=yield --calls=2000 --threads=1 --gap_us=$gap 2>&1 |
    grep -E "^small op|copies|kernel \(|launch only|graph|RunFromHost" | tee -a "$OUT/small_op.txt"
done

step "3. 1 in flight through the server, plain and with the holders"
for holder in none spinners qos; do
  case $holder in
    spinners) "$WAKE" --idle_spinners --hold_s=100 & HOLD=$! ;;
    qos) "$WAKE" --dma_latency_us=0 --hold_s=100 & HOLD=$! ;;
    *) HOLD= ;;
  esac
  sleep 0.5
  TESTS=0 BACKENDS=cuda VARIANTS="$holder:--in_place_work=16384" ROUNDS=2 CURVE="64" CURVE_ROUNDS=1 \
    SECONDS_PER_RUN=3 BUNDLE=$BUNDLE OUT=$OUT/session_$holder bash bench/run_gpu_session.sh > "$OUT/session_$holder.log" 2>&1
  [ -n "$HOLD" ] && kill "$HOLD" 2>/dev/null
  wait 2>/dev/null
  tee -a "$OUT/table.txt" < "$OUT/session_$holder/table.txt"
done
