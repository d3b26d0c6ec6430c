#!/usr/bin/env bash
# Stateless throughput with 1, 2 and 3 replicas sharing one GPU, through one target and
# gpucompute.ReplicatedClient (bench/replicas_bench.py): three CUDA servers on
# 127.0.0.2, .3 and .4 (one port), each with its own CUDA context on GPU 0. Prints a
# table: calls/s, p50/p99 latency, GPU utilization and each replica's share of the calls
# (from its /metrics). Expect throughput to grow with replicas until the GPU saturates.
#
# Here:   cmake --build build-cuda --target gpucompute-server
#         /work/shared/tools/device-bundle .device/replicas build-cuda/server/gpucompute-server
#         /usr/bin/python3 -m gpucompute._build_proto --force   (in client/python)
# There:  bash bench/run_gpu_replicas.sh   (carry .device and client/python/gpucompute/_proto)
# Without a GPU (a dry run): PYTHON=/usr/bin/python3 BACKEND=cpu BUNDLE=build-cpu/server \
#   WORKLOADS=normalize SECONDS_PER_RUN=2 bash bench/run_gpu_replicas.sh
set -u
BUNDLE=${BUNDLE:-.device/replicas}
BACKEND=${BACKEND:-cuda}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
PROCESSES=${PROCESSES:-8}
THREADS=${THREADS:-4}
WORKLOADS=${WORKLOADS:-lombscargle normalize}
OUT=${OUT:-gpu-out}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PORT=50161
HOSTS=(127.0.0.2 127.0.0.3 127.0.0.4)
step() { echo; echo "=== $* ($(date +%T))"; }

# Requests each replica has finished, from its /metrics.
served() {
  "$PYTHON" - "$@" <<'PY'
import re, sys, urllib.request
counts = []
for port in sys.argv[1:]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    counts.append(sum(float(v) for v in re.findall(
        r'^gpucompute_requests_total\{[^}]*operation="(?:lombscargle|normalize)"[^}]*\} (\S+)',
        text, re.M)))
print(" / ".join(f"{c:.0f}" for c in counts))
PY
}

step "three $BACKEND servers on ${HOSTS[*]}:$PORT"
PIDS=()
for i in 0 1 2; do
  "$BUNDLE/gpucompute-server" --backend="$BACKEND" --address="${HOSTS[$i]}:$PORT" \
    --metrics_address="127.0.0.1:$((9571 + i))" --pool_prewarm_bytes=268435456 \
    > "$OUT/replica$i.log" 2>&1 &
  PIDS+=($!)
done
for i in 0 1 2; do
  for _ in $(seq 300); do grep -q "serving gRPC on" "$OUT/replica$i.log" && break; sleep 0.1; done
  grep -E "backend|serving" "$OUT/replica$i.log"
done

printf '\n%-9s %-12s %s\n' replicas workload result > "$OUT/table.txt"
for workload in $WORKLOADS; do
  for n in 1 2 3; do
    target="ipv4:$(printf "%s:$PORT," "${HOSTS[@]:0:$n}" | sed 's/,$//')"
    step "$workload through $n replica(s): $target"
    before=$(served 9571 9572 9573)
    (sleep $((SECONDS_PER_RUN / 2 + 2)); nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader \
      > "$OUT/util_${workload}_$n.txt" 2>/dev/null) &
    sampler=$!
    line=$(timeout $((SECONDS_PER_RUN + 90)) "$PYTHON" bench/replicas_bench.py --target "$target" \
      --workload "$workload" --seconds "$SECONDS_PER_RUN" --processes "$PROCESSES" \
      --threads "$THREADS" --label "$n")
    wait "$sampler"
    echo "$line"
    echo "requests per replica before: $before; after: $(served 9571 9572 9573)"
    echo "$line  gpu util $(cat "$OUT/util_${workload}_$n.txt" 2>/dev/null | tr -d '\n')" >> "$OUT/table.txt"
  done
done

step "stop"
for pid in "${PIDS[@]}"; do kill -TERM "$pid"; done
for pid in "${PIDS[@]}"; do wait "$pid"; echo "server $pid exit code $?"; done
cat "$OUT/table.txt"
