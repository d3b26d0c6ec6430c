#!/usr/bin/env bash
# Hardware counters of chosen kernels in one device call: for each profile
# (a name, a regex on the demangled kernel name, the gpu_kernels_bench arguments that
# launch it), Nsight Compute on one launch past the warm-ups, with the metrics that
# told the normalize kernels' limits apart: time, DRAM
# throughput and bytes, warps active against the theoretical occupancy, each SM's
# active cycles (least, mean, most: how unevenly the SMs finish), issue slots busy,
# float64 and LSU pipes, warp instructions, lanes active per instruction, and the
# stall reasons per issue.
#
# Here (no GPU needed): build and bundle gpu_kernels_bench as bench/run_gpu_kernels.sh's
# header says (or a lab build's).
# On the GPU machine (device tool: carry the bundle):
#   BUNDLE=.device/kernels bash dev/cuda/ncu.sh           # logs under $OUT (or ./gpu-out)
#   PROFILES='tile_sum|TileKernel<float, [^,]*0, [^,]*32>|--only=normalize --normalize_cases=f32:sum:100000x1000' \
#     BUNDLE=... bash dev/cuda/ncu.sh                     # profiles of your own, one a line
# Demangled names read like TileKernel<float, (gpucompute::NormKind)0, (int)32>: match
# template arguments with [^,]*; a regex holds no '|', which separates the fields (bool
# arguments: [1u]e? for 1 or true, [0s]e? for 0 or false). The clocks are left alone
# (--clock-control none).
set -u
BUNDLE=${BUNDLE:-.device/kernels}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$BUNDLE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$NCU" ] || { echo "ncu not found"; exit 1; }
SKIP=${SKIP:-6}  # launches of the kernel skipped: the backend's warm-up and the first timed ones
PROFILES=${PROFILES:-'tile_sum|TileKernel<float, [^,]*0, [^,]*32>|--only=normalize --normalize_cases=f32:sum:100000x1000
tile_l2|TileKernel<float, [^,]*2, [^,]*32>|--only=normalize --normalize_cases=f32:l2:100000x1000
tile1_l1|TileKernel<float, [^,]*1, [^,]*1>|--only=normalize --normalize_cases=f32:l1:10000000x10
groups16_sum|RowGroupKernel<float, [^,]*0, [^,]*16>|--only=normalize --normalize_cases=f32:sum:1000000x100
bulk_tma_l2|ClusterBulkKernel<double, [^,]*2, [^,]*[1u]e?>|--only=normalize --normalize_cases=f64:l2:500x100000
bulk_v4_l2|ClusterBulkKernel<double, [^,]*2, [^,]*[0s]e?>|--only=normalize --normalize_cases=f64:l2:500x100000'}

STALLS=""
for r in long_scoreboard short_scoreboard barrier membar wait math_pipe_throttle mio_throttle lg_throttle \
         not_selected selected dispatch_stall drain no_instruction sleeping branch_resolving tex_throttle imc_miss; do
  STALLS="$STALLS,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
METRICS="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,\
dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active,\
smsp__issue_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fp64.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,\
smsp__thread_inst_executed_per_inst_executed.ratio,launch__grid_size,launch__block_size,\
launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,\
sm__maximum_warps_per_active_cycle_pct,launch__waves_per_multiprocessor,sm__cycles_active.avg,sm__cycles_active.min,\
sm__cycles_active.max,sm__cycles_elapsed.max$STALLS"

echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); ncu: $NCU"
while IFS='|' read -r name regex args; do
  [ -n "$name" ] || continue
  # shellcheck disable=SC2086  # args are gpu_kernels_bench's words
  timeout 150 "$NCU" --clock-control none --kernel-name-base demangled -k "regex:$regex" \
    --launch-skip "$SKIP" --launch-count 1 --metrics "$METRICS" \
    "$BUNDLE/gpu_kernels_bench" $args > "$OUT/ncu_$name.txt" 2>&1
  rc=$?
  echo
  echo "=== $name (rc=$rc): $args"
  grep -q 'No kernels were profiled' "$OUT/ncu_$name.txt" && echo "  no launch matched '$regex' past $SKIP"
  grep -E 'Kernel<|gpu__time|dram__|sm__|smsp__(issue|inst|thread)|launch__|stalled_[a-z_]+_per_issue_active' \
    "$OUT/ncu_$name.txt" | grep -vE 'stalled.* 0(\.0[0-9])?$' |
    sed 's/smsp__average_warps_issue_stalled_/stall /; s/_per_issue_active.ratio//; s/  */ /g'
done <<< "$PROFILES"
