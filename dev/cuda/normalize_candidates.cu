// The normalize candidates: the paths the shipped policy (kernels/cuda/normalize_plan.cuh)
// was chosen from, forced by name (normalize_variants.h). They reuse the shipped kernels'
// headers; what only a candidate runs is here: rows past a lane group's registers read
// twice (kTwoReads), tiles and lane groups of any width for both dtypes, the pipeline
// without cache hints or row by row, and TMA clusters of half slices.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "dev/cuda/normalize_variants.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/normalize_chunks.cuh"
#include "kernels/cuda/normalize_plan.cuh"

namespace gpucompute::cuda::lab {
namespace {

// kTwoReads' rows: up to kMaxCols a lane group, 4 lanes up to kSmallCols, else 32.
struct TwoReadsPolicy {
  static constexpr int64_t kMaxCols = 4096;
  static constexpr int64_t kSmallCols = 32;
};
// kClusterBulkHalf: slices up to this, two blocks an SM (one's reduction overlaps the other's).
constexpr int64_t kHalfSliceBytes = 50 << 10;

// Rows longer than the group's registers: two passes, the second from L1/L2.
template <typename T, NormKind kNorm, int kGroup>
struct TwoReadRowGroupAgent {
  using Op = NormOp<kNorm>;
  const T* in;
  T* out;
  int64_t rows, cols;
  NormalizeResult* result;

  __device__ void Run() { TwoPassRows(LaneGroup<kGroup>::OfThisThread()); }

  // Longer rows: two passes, the second from L1/L2; four loads in flight per lane.
  __device__ void TwoPassRows(const LaneGroup<kGroup>& g) const {
    const int lane = g.lane;
    for (int64_t row = g.first; row < rows; row += g.groups) {
      const T* src = in + row * cols;
      T* dst = out + row * cols;
      typename Op::Acc acc0 = Op::Identity(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
      int64_t c = lane;
      for (; c + 3 * kGroup < cols; c += 4 * kGroup) {
        const T a = src[c], b = src[c + kGroup], d = src[c + 2 * kGroup], e = src[c + 3 * kGroup];
        acc0 = Op::Add(acc0, Op::Transform(a));
        acc1 = Op::Add(acc1, Op::Transform(b));
        acc2 = Op::Add(acc2, Op::Transform(d));
        acc3 = Op::Add(acc3, Op::Transform(e));
      }
      for (; c < cols; c += kGroup) acc0 = Op::Add(acc0, Op::Transform(src[c]));
      const double norm = GroupReduce(Op::Combine(Op::Combine(acc0, acc1), Op::Combine(acc2, acc3)), g.mask);
      if (!FastNorm<T, kNorm>(norm)) {
        if (lane == 0) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
        continue;
      }
      bool overflow = false;
      WithRowScale<T>(norm, [&](auto scale) {
        for (int64_t c2 = lane; c2 < cols; c2 += kGroup) {
          dst[c2] = scale(src[c2]);
          if constexpr (kNorm == NormKind::kSum) overflow |= isinf(dst[c2]);
        }
      });
      if (overflow) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
    }
  }

  __device__ static double GroupReduce(typename Op::Acc acc, unsigned mask) {
    return Op::Finalize(ButterflyCombine<Op, kGroup>(acc, mask));
  }
};

template <typename T, NormKind kNorm, int kGroup>
__global__ void __launch_bounds__(RowGroupPolicy::kThreads, RowGroupPolicy::kMinBlocksPerSm)
    TwoReadRowGroupKernel(const T* in, T* out, int64_t rows, int64_t cols, NormalizeResult* result) {
  TwoReadRowGroupAgent<T, kNorm, kGroup>{in, out, rows, cols, result}.Run();
}

template <typename T, NormKind kNorm>
cudaError_t LaunchGroups(const T* in, T* out, int64_t rows, int64_t cols, int group, NormalizeResult* result,
                         const LaunchEnv& env) {
  if (cols <= group * RowGroupPolicy::kPerLane) return LaunchRowGroups<T, kNorm>(in, out, rows, cols, group, result, env);
  const int64_t rows_per_block = RowGroupPolicy::kThreads / group;
  const unsigned grid = GridFor(CeilDiv(rows, rows_per_block), env.sm_count, RowGroupPolicy::kMinBlocksPerSm * 2);
  auto launch = [&](auto kernel) {
    kernel<<<grid, RowGroupPolicy::kThreads, 0, env.stream>>>(in, out, rows, cols, result);
  };
  group == 4 ? launch(TwoReadRowGroupKernel<T, kNorm, 4>) : launch(TwoReadRowGroupKernel<T, kNorm, 32>);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

// A plan and what only the candidates add to it.
struct LabPlan {
  NormalizePlan plan;
  bool two_reads = false;   // kRowGroups: rows past the registers read twice
  bool streaming = true;    // kPipeline: cache hints
  bool row_by_row = false;  // kPipeline: the order for rows past a quarter of L2
};

// kClusterBulkHalf: half slices where the row has them, else the shipped slices.
template <typename T>
cudaError_t PlanBulkHalf(int64_t cols, NormalizePlan* plan) {
  GC_TRY(PlanClusterBulk<T>(cols, plan, kHalfSliceBytes));
  if (plan->path != NormalizePath::kClusterBulk) GC_TRY(PlanClusterBulk<T>(cols, plan));
  return cudaSuccess;
}

template <typename T>
cudaError_t PlanVariant(int64_t cols, NormalizeVariant variant, LabPlan* lab) {
  NormalizePlan* plan = &lab->plan;
  GC_TRY(PlanFor<T>(cols, plan));
  if (variant == NormalizeVariant::kDefault) return cudaSuccess;
  const NormalizePlan shipped = *plan;
  *plan = NormalizePlan{};
  GC_TRY(TileSharedLimit(&plan->limit));
  const bool fits_tile = TileFits<T>(cols, plan->limit);
  switch (variant) {
    case NormalizeVariant::kTwoReads:
      if (cols <= TwoReadsPolicy::kMaxCols) {
        plan->path = NormalizePath::kRowGroups;
        plan->group = cols <= TwoReadsPolicy::kSmallCols ? 4 : 32;
        lab->two_reads = true;
      }
      return cudaSuccess;
    case NormalizeVariant::kTile:
      if (fits_tile) PlanTile<T>(cols, true, plan);
      return cudaSuccess;
    case NormalizeVariant::kNarrowGroups:
      if (cols <= NormalizePolicy<T>::kRegisterCols) {
        PlanNarrowGroups(cols, plan);
        return cudaSuccess;
      }
      break;
    case NormalizeVariant::kCluster:
    case NormalizeVariant::kCluster16:
      if (!fits_tile) return PlanCluster<T>(cols, plan, variant == NormalizeVariant::kCluster16);
      break;
    case NormalizeVariant::kPipelined:
    case NormalizeVariant::kPipelinedPlain:
    case NormalizeVariant::kPipelinedLagged:
    case NormalizeVariant::kPipelinedRowByRow:
      if (!fits_tile) {
        plan->path = NormalizePath::kPipeline;
        lab->streaming = variant != NormalizeVariant::kPipelinedPlain;
        lab->row_by_row = variant == NormalizeVariant::kPipelinedRowByRow;
        if (variant == NormalizeVariant::kPipelined || variant == NormalizeVariant::kPipelinedPlain) {
          GC_TRY(PipelineRowByRow<T>(cols, &lab->row_by_row));
        }
        return cudaSuccess;
      }
      break;
    case NormalizeVariant::kClusterBulk:
    case NormalizeVariant::kClusterBulkV4:
    case NormalizeVariant::kClusterBulkHalf:
      if (variant == NormalizeVariant::kClusterBulkHalf) {
        GC_TRY(PlanBulkHalf<T>(cols, plan));
      } else {
        GC_TRY(PlanClusterBulk<T>(cols, plan));
      }
      if (plan->path == NormalizePath::kClusterBulk) {
        plan->bulk_store = variant != NormalizeVariant::kClusterBulkV4;
        return cudaSuccess;
      }
      break;
    case NormalizeVariant::kHeld:
      if (!fits_tile) {
        plan->path = NormalizePath::kHeld;
        return cudaSuccess;
      }
      break;
    case NormalizeVariant::kDefault:
      break;
  }
  *plan = shipped;
  return cudaSuccess;
}

// What only the candidates launch (rows read twice, tiles of any group, either dtype's
// lane groups, the pipeline's other hints and order); the other paths as shipped.
template <typename T, NormKind kNorm>
cudaError_t LaunchLabPlan(const LabPlan& lab, const T* in, T* out, int64_t rows, int64_t cols,
                          NormalizeResult* result, const LaunchEnv& env) {
  const NormalizePlan& plan = lab.plan;
  switch (plan.path) {
    case NormalizePath::kRowGroups:
      if (lab.two_reads) return LaunchGroups<T, kNorm>(in, out, rows, cols, plan.group, result, env);
      return LaunchRowGroups<T, kNorm>(in, out, rows, cols, plan.group, result, env);
    case NormalizePath::kTile:
      return LaunchTile<T, kNorm, /*kEveryGroup=*/true>(in, out, rows, cols, plan.group, result, env, plan.limit);
    case NormalizePath::kPipeline:
      if (lab.streaming) return LaunchPipeline<T, kNorm, true>(in, out, rows, cols, lab.row_by_row, result, env);
      return LaunchPipeline<T, kNorm, false>(in, out, rows, cols, lab.row_by_row, result, env);
    default: return LaunchPlanned<T, kNorm>(plan, in, out, rows, cols, result, env);
  }
}

template <typename T>
cudaError_t DispatchNorm(const T* in, T* out, int64_t rows, int64_t cols, NormKind norm, NormalizeResult* result,
                         const LaunchEnv& env, NormalizeVariant variant) {
  LabPlan lab;
  GC_TRY(PlanVariant<T>(cols, variant, &lab));
  switch (norm) {
    case NormKind::kSum: return LaunchLabPlan<T, NormKind::kSum>(lab, in, out, rows, cols, result, env);
    case NormKind::kL1: return LaunchLabPlan<T, NormKind::kL1>(lab, in, out, rows, cols, result, env);
    case NormKind::kL2: return LaunchLabPlan<T, NormKind::kL2>(lab, in, out, rows, cols, result, env);
    case NormKind::kMaxAbs: return LaunchLabPlan<T, NormKind::kMaxAbs>(lab, in, out, rows, cols, result, env);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
std::string DescribePlan(int64_t rows, int64_t cols, NormalizeVariant variant) {
  LabPlan lab;
  if (PlanVariant<T>(cols, variant, &lab) != cudaSuccess) return "no device";
  const NormalizePlan& plan = lab.plan;
  switch (plan.path) {
    case NormalizePath::kRowGroups:
      return "row groups of " + std::to_string(plan.group) + (lab.two_reads ? ", two reads" : "");
    case NormalizePath::kTile: {
      const int64_t tile_rows = TileRowsFor<T>(rows, cols);
      const std::string lanes = plan.group < 32 || tile_rows >= TilePolicy::kWarpRowsFrom
                                    ? std::to_string(plan.group) + " lanes/row"
                                    : std::string("the block/row");
      return "tile, " + std::to_string(tile_rows) + " rows/tile, " + lanes + ", " +
             std::to_string(TileSharedBytes<T>(tile_rows, cols) / 1024) + " KiB";
    }
    case NormalizePath::kCluster:
      return "cluster of " + std::to_string(plan.blocks) + " blocks/row, " + std::to_string(plan.slice) +
             " elements each";
    case NormalizePath::kClusterBulk:
      return "persistent clusters of " + std::to_string(plan.blocks) + " blocks/row, " +
             std::to_string(plan.slice) + "-element TMA loads, 2 buffers, " +
             (plan.bulk_store ? "TMA store" : "16-byte stores") + " (default where unaligned)";
    case NormalizePath::kPipeline:
      return "pipeline of " + std::to_string(kPipelineChunk<T>) + "-element chunks, " +
             (lab.row_by_row ? "row by row" : "lagged") + (lab.streaming ? ", evict-first hints" : "");
    case NormalizePath::kHeld:
      return "held items of " + std::to_string(kHeldItem<T>) + " elements (default where unaligned)";
    case NormalizePath::kChunks: break;
  }
  return "chunks of " + std::to_string(ChunkPolicy::kChunk) + ", one pass";
}

}  // namespace

cudaError_t LaunchNormalizeVariant(DType dtype, const void* in, void* out, int64_t rows, int64_t cols, NormKind norm,
                                   NormalizeResult* result, const LaunchEnv& env, NormalizeVariant variant) {
  GC_REQUIRE(rows >= 0 && cols >= 1 && result != nullptr);
  GC_REQUIRE(static_cast<int>(norm) >= 0 && static_cast<int>(norm) <= 3);
  GC_TRY(cudaMemsetAsync(result, 0xff, sizeof(NormalizeResult), env.stream));
  if (rows == 0) return cudaSuccess;
  GC_REQUIRE(in != nullptr && out != nullptr);
  if (dtype == DType::kFloat32) {
    return DispatchNorm<float>(static_cast<const float*>(in), static_cast<float*>(out), rows, cols, norm, result, env,
                               variant);
  }
  return DispatchNorm<double>(static_cast<const double*>(in), static_cast<double*>(out), rows, cols, norm, result,
                              env, variant);
}

std::string DescribeNormalizePolicy(DType dtype, int64_t rows, int64_t cols, NormalizeVariant variant) {
  return dtype == DType::kFloat32 ? DescribePlan<float>(rows, cols, variant) : DescribePlan<double>(rows, cols, variant);
}

}  // namespace gpucompute::cuda::lab
