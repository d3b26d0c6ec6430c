// The pieces of the normalize kernels (normalize.cu, its only includer): launch
// policies, the norm as a float64 reduction (compensated for SUM), the row scaling
// and the block-wide walk and reduction over a range of a row.
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda {
namespace {

struct RowGroupPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
  static constexpr int64_t kMaxCols = 4096;
  static constexpr int64_t kSmallCols = 32;  // rows this short get 4 lanes, not 32
  static constexpr int kPerLane = 8;         // rows <= group * 8 are held in registers
  static constexpr int64_t kLineBytes = 128;  // float32 rows not made of whole lines prefetch
};
struct ChunkPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
  static constexpr int64_t kChunk = 16384;  // elements per block work item
  static constexpr int kUnroll = 4;
  // Grid cap: blocks an SM, several waves, so the hardware hands the chunks out and
  // no SM waits on a last round of a few.
  // H200, 10 x 1e7 f32 SUM: 0.314-0.319 ms vs 8 blocks an SM's 0.321-0.322.
  static constexpr int kGridBlocksPerSm = 32;
};
struct BadRowPolicy {
  static constexpr int kThreads = 256;
};
struct RescuePolicy {  // one block per row
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
};

// float64 L2 rows with a norm outside [kMinFastL2, DBL_MAX] (sum of squares below
// 2^-600, or inf) go to the rescue. It redoes every row from the first left whose own
// norm lies outside [kMinPlainL2, kMaxPlainL2]: a superset, whatever either
// summation order rounded.
constexpr double kMinFastL2 = 0x1p-300;
constexpr double kMinPlainL2 = 0x1p-299;
constexpr double kMaxPlainL2 = 0x1p511;
// Scaling exponents stay where 2^-exponent is a normal double (the CPU backend's).
constexpr int kMaxScaleExponent = 1020;

// A float64 sum and the rounding errors of the additions that made it.
struct TwoSumAcc {
  double sum;
  double error;
};

// The exact rounding error of a + b, rounded to `total`, two ways. Knuth's TwoSum:
// six float64 operations, no order needed, the fewest instructions and registers
// (row groups and chunks, which issue or wait on memory, keep it).
__device__ __forceinline__ double TwoSumError(double a, double b, double total) {
  const double b_part = total - a;
  return (a - (total - b_part)) + (b - b_part);
}
// Dekker's Fast2Sum on the operands ordered by magnitude: three float64 operations, a
// compare and selects, for loops that the float64 pipe bounds (rows summed from shared
// memory, where TwoSum left SUM a third slower than L1). An infinite total leaves a NaN
// error, as TwoSum's does.
__device__ __forceinline__ double FastTwoSumError(double a, double b, double total) {
  const bool a_larger = fabs(a) >= fabs(b);
  const double larger = a_larger ? a : b;
  const double smaller = a_larger ? b : a;
  return smaller - (total - larger);
}

__device__ __forceinline__ TwoSumAcc TwoSum(TwoSumAcc a, double b, double b_error) {
  const double total = a.sum + b;
  return {total, a.error + b_error + TwoSumError(a.sum, b, total)};
}

// ---- the norm as a float64 reduction -----------------------------------------------
// Acc is the accumulator: a compensated pair for SUM, else a double. Add folds in one
// element's term, Combine two accumulators.
template <NormKind kNorm>
struct NormOp {
  using Acc = std::conditional_t<kNorm == NormKind::kSum, TwoSumAcc, double>;
  __device__ static Acc Identity() { return Acc{}; }
  template <typename T>
  __device__ static double Transform(T x) {
    const double v = static_cast<double>(x);
    if constexpr (kNorm == NormKind::kSum) return v;
    else if constexpr (kNorm == NormKind::kL2) return v * v;
    else return fabs(v);
  }
  __device__ static Acc Add(Acc a, double term) {
    if constexpr (kNorm == NormKind::kSum) {
      const double total = a.sum + term;
      return {total, a.error + TwoSumError(a.sum, term, total)};
    } else {
      return Combine(a, term);
    }
  }
  // Add with fewer float64 operations (the same sum and error), for the loops whose
  // float64 pipe is the bound: FastTwoSumError.
  __device__ static Acc AddFloat64Bound(Acc a, double term) {
    if constexpr (kNorm == NormKind::kSum) {
      const double total = a.sum + term;
      return {total, a.error + FastTwoSumError(a.sum, term, total)};
    } else {
      return Combine(a, term);
    }
  }
  __device__ static Acc Combine(Acc a, Acc b) {
    if constexpr (kNorm == NormKind::kSum) return TwoSum(a, b.sum, b.error);
    else if constexpr (kNorm == NormKind::kMaxAbs) return (a > b || a != a) ? a : b;  // NaN sticks
    else return a + b;
  }
  // An infinite sum leaves a NaN error (inf - inf): the CPU reports the infinity.
  __device__ static double Finalize(Acc a) {
    if constexpr (kNorm == NormKind::kSum) return isfinite(a.sum) ? a.sum + a.error : a.sum;
    else if constexpr (kNorm == NormKind::kL2) return sqrt(a);
    else return a;
  }
  struct Functor {
    __device__ Acc operator()(Acc a, Acc b) const { return Combine(a, b); }
  };
};

__device__ __forceinline__ double ShuffleXor(double v, unsigned mask, int offset, int width) {
  return __shfl_xor_sync(mask, v, offset, width);
}
__device__ __forceinline__ TwoSumAcc ShuffleXor(TwoSumAcc v, unsigned mask, int offset, int width) {
  return {__shfl_xor_sync(mask, v.sum, offset, width), __shfl_xor_sync(mask, v.error, offset, width)};
}
// acc combined across groups of kWidth lanes by a butterfly (offsets kFirst, kFirst / 2,
// ..., 1): a fixed tree, so the result does not depend on timing, and every lane of a
// group holds it where the combines commute.
template <typename Op, int kWidth, int kFirst = kWidth / 2>
__device__ __forceinline__ typename Op::Acc ButterflyCombine(typename Op::Acc acc, unsigned mask) {
#pragma unroll
  for (int offset = kFirst; offset > 0; offset /= 2) acc = Op::Combine(acc, ShuffleXor(acc, mask, offset, kWidth));
  return acc;
}
__device__ __forceinline__ double LoadGlobal(const double* p) { return __ldcg(p); }
__device__ __forceinline__ TwoSumAcc LoadGlobal(const TwoSumAcc* p) {
  return {__ldcg(&p->sum), __ldcg(&p->error)};
}

__device__ __forceinline__ bool GoodNorm(double n) { return isfinite(n) && n != 0.0; }

// A norm the fast kernels divide by: good, and for float64 L2 not from squares that
// underflowed (those rows go to the rescue).
template <typename T, NormKind kNorm>
__device__ __forceinline__ bool FastNorm(double n) {
  if constexpr (kNorm == NormKind::kL2 && sizeof(T) == 8) return n >= kMinFastL2 && isfinite(n);
  else return GoodNorm(n);
}

// x / norm as x * (1 / norm), the reciprocal rounded to T once per row. float64: the
// CPU backend's arithmetic exactly; float32: within 1 ulp of it (the CPU multiplies in
// float64), without two float<->double conversions per element (16/clk/SM on Hopper,
// which limited short rows). A norm below 1 / max(T) (subnormal in float64, under
// ~2.9e-39 in float32) has no finite reciprocal in T: such a row is divided in float64,
// as the CPU backend does. WithRowScale picks one of the two per row, so the element
// loops carry no branch.
template <typename T>
struct MultiplyBy {
  T inv;
  __device__ __forceinline__ T operator()(T x) const { return x * inv; }
};
template <typename T>
struct DivideBy {
  double norm;
  __device__ __forceinline__ T operator()(T x) const {
    return static_cast<T>(static_cast<double>(x) / norm);
  }
};
template <typename T, typename Body>
__device__ __forceinline__ void WithRowScale(double norm, Body&& body) {
  const T inv = static_cast<T>(1.0 / norm);
  if (isinf(inv)) {
    body(DivideBy<T>{norm});
  } else {
    body(MultiplyBy<T>{inv});
  }
}

template <typename T, typename Op>
__device__ __forceinline__ typename Op::Acc AccumulateVec(typename Op::Acc acc,
                                                          const typename Vec16<T>::type& v) {
  if constexpr (Vec16<T>::kCount == 4) {
    acc = Op::Add(acc, Op::Transform(v.x));
    acc = Op::Add(acc, Op::Transform(v.y));
    acc = Op::Add(acc, Op::Transform(v.z));
    return Op::Add(acc, Op::Transform(v.w));
  } else {
    acc = Op::Add(acc, Op::Transform(v.x));
    return Op::Add(acc, Op::Transform(v.y));
  }
}

// float4 bitwise (every test made, no branch between them), double2 with ||: each the
// faster on its paths.
// H200: f32 tile rows of 512 / 1e3 1.5-2% faster bitwise; f64 TMA cluster rows of 1e5 2-3% faster with ||.
__device__ __forceinline__ bool AnyInf(float4 v) {
  return isinf(v.x) | isinf(v.y) | isinf(v.z) | isinf(v.w);
}
__device__ __forceinline__ bool AnyInf(double2 v) { return isinf(v.x) || isinf(v.y); }

// A load or store; `streaming` marks its L2 line evict-first (an input line read for
// the last time, an output line nobody reads back soon), so it does not push out the
// lines a later pass still wants from L2 (normalize_pipeline.cuh).
template <typename V>
__device__ __forceinline__ V LoadHinted(const V* p, bool streaming) {
  return streaming ? __ldcs(p) : *p;
}
template <typename V>
__device__ __forceinline__ void StoreHinted(V* p, V v, bool streaming) {
  if (streaming) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}

// One block walks in[s, e): a scalar head up to 16-byte alignment, the aligned body as
// 16-byte vectors (kUnroll loads in flight per thread before any is used), a scalar
// tail; without kVec, every element as a scalar. element(i, x) gets each scalar
// in[i]; vector(first, v) each vector, whose first element is in[first]. `streaming`:
// the loads are the last use of their lines (LoadHinted).
template <typename T, bool kVec, typename Element, typename Vector>
__device__ __forceinline__ void BlockWalk(const T* in, int64_t s, int64_t e, Element&& element,
                                          Vector&& vector, bool streaming = false) {
  if constexpr (kVec) {
    using VT = typename Vec16<T>::type;
    constexpr int64_t V = Vec16<T>::kCount;
    const int64_t aligned = (s + V - 1) / V * V;
    const int64_t head_end = aligned < e ? aligned : e;
    const int64_t body_end = head_end + (e - head_end) / V * V;
    for (int64_t i = s + threadIdx.x; i < head_end; i += blockDim.x) element(i, LoadHinted(in + i, streaming));
    const VT* body = reinterpret_cast<const VT*>(in + head_end);
    const int64_t nv = (body_end - head_end) / V;
    constexpr int U = ChunkPolicy::kUnroll;
    int64_t k = threadIdx.x;
    for (; k + (U - 1) * static_cast<int64_t>(blockDim.x) < nv; k += U * blockDim.x) {
      VT v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = LoadHinted(body + k + u * blockDim.x, streaming);
#pragma unroll
      for (int u = 0; u < U; ++u) vector(head_end + (k + u * blockDim.x) * V, v[u]);
    }
    for (; k < nv; k += blockDim.x) vector(head_end + k * V, LoadHinted(body + k, streaming));
    for (int64_t i = body_end + threadIdx.x; i < e; i += blockDim.x) element(i, LoadHinted(in + i, streaming));
  } else {
    for (int64_t i = s + threadIdx.x; i < e; i += blockDim.x) element(i, LoadHinted(in + i, streaming));
  }
}

template <NormKind kNorm>
using BlockReduceFor = cub::BlockReduce<typename NormOp<kNorm>::Acc, ChunkPolicy::kThreads>;

// Block-wide accumulation of in[s, e) (all threads receive nothing useful; thread 0 the total).
template <typename T, NormKind kNorm, bool kVec>
__device__ typename NormOp<kNorm>::Acc BlockRangeReduce(
    const T* in, int64_t s, int64_t e, typename BlockReduceFor<kNorm>::TempStorage& tmp) {
  using Op = NormOp<kNorm>;
  typename Op::Acc acc = Op::Identity();
  BlockWalk<T, kVec>(
      in, s, e, [&](int64_t, T x) { acc = Op::Add(acc, Op::Transform(x)); },
      [&](int64_t, const typename Vec16<T>::type& v) { acc = AccumulateVec<T, Op>(acc, v); });
  return BlockReduceFor<kNorm>(tmp).Reduce(acc, typename Op::Functor{});
}

// Rows reduced a piece a block (the chunks, the pipeline, the held items): each piece's
// partial is stored, and the row's norm is their sum in a fixed order, so it is the same
// in whatever order the blocks ran. Add: the block whose ticket completes a row sums it;
// with `announce`, the ticket then moves on to n + 1 (NormOut) for blocks that wait.
// Post / AllPosted / WarpNorm (the held items): no ticket handed back, every block that
// needs the norm sums it.
template <typename T, NormKind kNorm>
struct RowPartials {
  using Op = NormOp<kNorm>;
  using Acc = typename Op::Acc;
  Acc* partials;      // n a row
  unsigned* tickets;  // a row, zeroed by the launcher
  double* norms;      // a row
  NormalizeResult* result;

  // Piece k of row's n, its block-reduced partial `part` on thread 0; every thread
  // calls it. `tmp` and `last` are reused only after a barrier of the caller's.
  __device__ void Add(int64_t row, int64_t k, int64_t n, Acc part, typename BlockReduceFor<kNorm>::TempStorage& tmp,
                      bool& last, bool announce) const {
    if (threadIdx.x == 0) {
      partials[row * n + k] = part;
      __threadfence();
      last = atomicAdd(&tickets[row], 1u) == static_cast<unsigned>(n - 1);
      if (last) __threadfence();  // the other blocks' partials are read after their tickets
    }
    __syncthreads();
    if (!last) return;
    Acc acc = Op::Identity();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) acc = Op::Combine(acc, LoadGlobal(partials + row * n + j));
    __syncthreads();  // tmp may hold the caller's reduction
    acc = BlockReduceFor<kNorm>(tmp).Reduce(acc, typename Op::Functor{});
    if (threadIdx.x == 0) {
      const double norm = Op::Finalize(acc);
      norms[row] = norm;
      if (!FastNorm<T, kNorm>(norm)) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
      if (announce) {
        __threadfence();
        atomicAdd(&tickets[row], 1u);
      }
    }
  }

  // Whether row's norm is out (announced; n pieces); then the norm may be read.
  __device__ bool NormOut(int64_t row, int64_t n) const {
    if (*reinterpret_cast<const volatile unsigned*>(tickets + row) != static_cast<unsigned>(n + 1)) return false;
    __threadfence();  // the norm is read after its ticket
    return true;
  }
  __device__ double Norm(int64_t row) const { return LoadGlobal(norms + row); }  // from L2: L1 may predate it

  // Without tickets handed back (the held items): piece k's partial, then the row's
  // count raised by a release reduction, which waits for no answer; every block that
  // needs the norm sums the partials itself once all n are in (WarpNorm). One thread.
  __device__ void Post(int64_t row, int64_t k, int64_t n, Acc part) const {
    partials[row * n + k] = part;
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(tickets + row) : "memory");
  }
  __device__ bool AllPosted(int64_t row, int64_t n) const {
    unsigned count;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(count) : "l"(tickets + row) : "memory");
    return count == static_cast<unsigned>(n);
  }
  // One whole warp, after AllPosted(row) held on one of its lanes: the row's norm from
  // its n partials, each lane's in order and then a fixed shuffle tree, so every block
  // gets the same bits. A bad norm is reported (result->bad_row, idempotent).
  __device__ double WarpNorm(int64_t row, int64_t n) const {
    __syncwarp();  // the lane that saw the count acquired the partials for the warp
    const int lane = static_cast<int>(threadIdx.x % 32);
    // Each lane's partials j = lane, lane + 32, ... loaded kBatch at a time before any is
    // added: one round trip to L2 for every 32 kBatch partials, not one for every 32;
    // 8 where a partial is one double, 4 for SUM's pairs (registers).
    // H200, f32 SUM 2e6: 0.262-0.266 ms vs one at a time's 0.321-0.330; f64 L2 1e6 at 8: 0.246-0.253 vs 4's 0.257-0.259.
    constexpr int kBatch = sizeof(Acc) == 8 ? 8 : 4;
    const Acc* p = partials + row * n;
    Acc acc = Op::Identity();
    for (int64_t first = lane; first < n; first += 32 * kBatch) {
      Acc batch[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) batch[u] = first + 32 * u < n ? LoadGlobal(p + first + 32 * u) : Op::Identity();
#pragma unroll
      for (int u = 0; u < kBatch; ++u) acc = Op::Combine(acc, batch[u]);
    }
    acc = ButterflyCombine<Op, 32>(acc, ~0u);
    const double norm = __shfl_sync(~0u, Op::Finalize(acc), 0);
    if (lane == 0 && !FastNorm<T, kNorm>(norm)) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
    return norm;
  }
};

// The scratch of RowPartials for `rows` of n pieces, tickets zeroed on env.stream; for
// the persistent paths also a zeroed work counter and `extra_bytes` (8-byte aligned).
// Freed in stream order when it goes out of scope, after the launches that use it.
template <typename T, NormKind kNorm>
struct RowPartialsScratch {
  Scratch scratch;
  RowPartials<T, kNorm> parts{};
  unsigned long long* counter = nullptr;
  void* extra = nullptr;

  cudaError_t Allocate(int64_t rows, int64_t n, bool with_counter, size_t extra_bytes, NormalizeResult* result,
                       const LaunchEnv& env) {
    using Acc = typename NormOp<kNorm>::Acc;
    const size_t counter_bytes = with_counter ? sizeof(unsigned long long) : 0;
    const size_t norms_bytes = static_cast<size_t>(rows) * sizeof(double);
    const size_t partials_bytes = static_cast<size_t>(rows * n) * sizeof(Acc);
    extra_bytes = (extra_bytes + 7) / 8 * 8;
    const size_t tickets_bytes = static_cast<size_t>(rows) * sizeof(unsigned);
    GC_TRY(scratch.Allocate(counter_bytes + norms_bytes + partials_bytes + extra_bytes + tickets_bytes, env));
    char* p = scratch.as<char>();
    if (with_counter) counter = reinterpret_cast<unsigned long long*>(p);
    parts.norms = reinterpret_cast<double*>(p + counter_bytes);
    parts.partials = reinterpret_cast<Acc*>(p + counter_bytes + norms_bytes);
    if (extra_bytes > 0) extra = p + counter_bytes + norms_bytes + partials_bytes;
    parts.tickets = reinterpret_cast<unsigned*>(p + counter_bytes + norms_bytes + partials_bytes + extra_bytes);
    parts.result = result;
    if (with_counter) GC_TRY(cudaMemsetAsync(counter, 0, counter_bytes, env.stream));
    return cudaMemsetAsync(parts.tickets, 0, tickets_bytes, env.stream);
  }
};

template <typename T, typename Scale>
__device__ __forceinline__ typename Vec16<T>::type ScaleVec(const typename Vec16<T>::type& x, Scale scale) {
  if constexpr (Vec16<T>::kCount == 4) {
    return make_float4(scale(x.x), scale(x.y), scale(x.z), scale(x.w));
  } else {
    return make_double2(scale(x.x), scale(x.y));
  }
}

// dst[k] = scale(src[k]) for n 16-byte vectors from shared memory, kThreads apart
// (dst may be src: scaled in place); stores hinted `kStreaming` (StoreHinted). Whether
// a quotient overflowed T (only a SUM norm can make one).
template <typename T, NormKind kNorm, int kThreads, bool kStreaming, typename Scale>
__device__ __forceinline__ bool SharedVectorsScale(const typename Vec16<T>::type* src, typename Vec16<T>::type* dst,
                                                   int n, Scale scale) {
  using VT = typename Vec16<T>::type;
  bool overflow = false;
#pragma unroll 4
  for (int k = threadIdx.x; k < n; k += kThreads) {
    const VT y = ScaleVec<T>(src[k], scale);
    StoreHinted(dst + k, y, kStreaming);
    if constexpr (kNorm == NormKind::kSum) overflow |= AnyInf(y);
  }
  return overflow;
}

// One block writes out[i] = scale(in[i]) for i in [s, e) (16-byte loads and stores
// with kVec: both pointers aligned); kStreaming hints both as last uses (LoadHinted).
// Returns whether a quotient overflowed T (only a SUM norm can make one).
template <typename T, bool kVec, bool kStreaming = false, typename Scale>
__device__ __forceinline__ bool BlockScaleRange(const T* in, T* out, int64_t s, int64_t e, Scale scale) {
  constexpr bool streaming = kStreaming;
  using VT = typename Vec16<T>::type;
  bool overflow = false;
  BlockWalk<T, kVec>(
      in, s, e,
      [&](int64_t i, T x) {
        const T y = scale(x);
        StoreHinted(out + i, y, streaming);
        overflow |= isinf(y);
      },
      [&](int64_t first, const VT& v) {
        const VT y = ScaleVec<T>(v, scale);
        StoreHinted(reinterpret_cast<VT*>(out + first), y, streaming);
        overflow |= AnyInf(y);
      },
      streaming);
  return overflow;
}

}  // namespace
}  // namespace gpucompute::cuda
