#!/usr/bin/env bash
# Shipped kernels (new) against an older build (old) on one GPU: tests and sanitizers
# (new), then the kernel bench alternated new/old/new/old, and a table of the backend rows
# with each row's run-to-run noise (new1 against new2).
#
# Here: build gpu_kernels_bench and the GPU test binaries of this checkout (new) and
# gpu_kernels_bench of the older commit (old, e.g. -DCMAKE_CUDA_ARCHITECTURES=90), then
#   /work/shared/tools/device-bundle DIR/new <new binaries...>
#   /work/shared/tools/device-bundle DIR/old <old gpu_kernels_bench>
#   tar -C DIR -cJf .device/ab/bundle.tar.xz new old; cp bench/run_gpu_kernels_ab.sh .device/ab/run.sh
# There: OUT=$OUT bash .device/ab/run.sh   (carry .device/ab)
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
tar -xJf bundle.tar.xz
NEWLIB=$PWD/new/lib:/usr/local/cuda/lib64
OLDLIB=$PWD/old/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/summary.txt"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
t0=$(date +%s)
tests() {
  for spec in "gpu_kernels_test:*" "gpu_backend_test:*" "gpu_chunk_memory_test:*" "gpu_shared_memory_test:*" \
              "backend_conformance_test:*cuda*" "backend_values_test:*cuda*"; do
    bin=${spec%%:*}; filter=${spec#*:}
    lim=90; [ "$bin" = gpu_kernels_test ] && lim=150
    LD_LIBRARY_PATH=$NEWLIB timeout $lim ./new/$bin --gtest_color=no --gtest_filter="$filter" > "$OUT/t_$bin.log" 2>&1
    echo "rc=$? $bin $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]|SKIPPED \] [0-9]' "$OUT/t_$bin.log" | tr '\n' ' ')"
  done > "$OUT/tests.txt"
}
sanitize() {
  [ -n "$SAN" ] || { echo "no compute-sanitizer" > "$OUT/san.txt"; return; }
  s() {  # tool filter args
    LD_LIBRARY_PATH=$NEWLIB GPUCOMPUTE_SANITIZER=1 timeout 110 "$SAN" --tool "$1" --error-exitcode 17 "${@:3}" \
      ./new/gpu_kernels_test --gtest_color=no --gtest_filter="$2" >> "$OUT/san.log" 2>&1
    echo "rc=$? $1 $2 $(tail -c 3000 "$OUT/san.log" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' | tail -1)"
  }
  {
    s memcheck 'GpuKernels.NormalizeBadRows*:GpuKernels.NormalizeRowGroups*:GpuKernels.HaversinePoints*:GpuKernels.HaversineMeshMatchesReference' --leak-check full
    s racecheck 'GpuKernels.NormalizeBadRowsUnderRacecheck' --racecheck-report hazard
  } > "$OUT/san.txt"
}
tests & T=$!
sanitize & S=$!
# At most 240 s for both, then the benches alone on the GPU.
while { kill -0 $T || kill -0 $S; } 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt 240 ]; do sleep 1; done
for p in $T $S; do pkill -P $p 2>/dev/null; kill $p 2>/dev/null; done
wait 2>/dev/null
echo "tests + sanitizers: $(( $(date +%s) - t0 )) s"
cat "$OUT/tests.txt" "$OUT/san.txt"
CASES='--normalize_cases=f32:sum:10x10000000,f64:l2:10x10000000,f32:sum:1000000x100,f32:l1:10000000x10,f32:sum:1562500x64,f64:l2:195312x256,f32:sum:100000x1000,f64:l2:5000x10000,f32:sum:2000x50000,f64:l2:500x100000,f32:sum:250x400000,f64:l2:50x1000000,f32:sum:100x1000000'
for run in new1 old1 new2 old2; do
  b=${run%[12]}
  lib=$NEWLIB; [ "$b" = old ] && lib=$OLDLIB
  lim=70; [ "$b" = old ] && lim=90
  LD_LIBRARY_PATH=$lib timeout $lim ./$b/gpu_kernels_bench "$CASES" --csv "$OUT/$run.csv" > "$OUT/$run.log" 2>&1
  echo "$run rc=$? $(grep -E '^backend warm-up' "$OUT/$run.log")"
done
echo "total: $(( $(date +%s) - t0 )) s"
python3 - "$OUT" <<'PY'
import csv, sys, os
out = sys.argv[1]
def rows(name):
    p = os.path.join(out, name + ".csv")
    if not os.path.exists(p): return {}
    return {(r["op"], r["dtype"], r["size"]): float(r["median_ms"]) for r in csv.DictReader(open(p)) if not r["op"].startswith(" ")}
n1, n2, o1, o2 = rows("new1"), rows("new2"), rows("old1"), rows("old2")
print("%-22s %-4s %-24s %9s %9s %6s %6s" % ("row", "type", "size", "old ms", "new ms", "ratio", "noise"))
worse = 0
for k in o1:
    if k not in n1 or k not in n2 or k not in o2: continue
    old, new = (o1[k] + o2[k]) / 2, (n1[k] + n2[k]) / 2
    noise = max(abs(n1[k] - n2[k]) / new, abs(o1[k] - o2[k]) / old)
    flag = "  SLOWER" if new / old - 1 > max(noise, 0.02) else ""
    worse += bool(flag)
    print("%-22s %-4s %-24s %9.4f %9.4f %6.3f %6.3f%s" % (k[0][:22], k[1], k[2][:24], old, new, new / old, noise, flag))
print("rows slower beyond noise (and 2%%): %d" % worse)
PY
