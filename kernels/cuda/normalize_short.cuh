// Very short rows (up to ShortRowsPolicy::kMaxCols columns) read as the flat array
// they are (normalize.cu, its only includer; NormalizeVariant::kShortRows): a warp
// takes a tile of whole rows, loads it with 16-byte loads on the array's own 16-byte
// grid (all kVectorsPerLane of a lane issued before any is used; lane l's k-th load is
// vector 32 k + l of the tile, so every load instruction of the warp is one contiguous
// 512 bytes), reduces each row across the lanes holding its elements with a segmented
// scan of shuffles, and stores the scaled rows with 16-byte stores. No shared memory:
// the tile path's copy through it (cp.async, barrier, reduce, barrier, scale) left f32
// 1e7 x 10 at 0.80 of D2D.
//
// A tile's first and last vectors may hold the neighbouring tiles' elements: both
// tiles load them (the second load mostly from L2), each stores only its own elements.
// Rows touching the array's elements before its first or after its last 16-byte
// boundary (a few, at either end), rows shorter than a vector (float32 1 to 3 columns,
// float64 1) and rows whose norm has no reciprocal in T are done by single threads
// (EdgeRow).
// Norms, the compensated SUM, the reciprocal rule and the bad rows are those of
// normalize_ops.cuh, as on the other paths; each row's norm is computed once, by the
// lane holding its last element, and shuffled to the others, so every element of a
// row is scaled by the same value.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/normalize_ops.cuh"
#include "kernels/cuda/normalize_short_layout.h"

namespace gpucompute::cuda {
namespace {

template <typename T>
__device__ __forceinline__ T VecElem(const typename Vec16<T>::type& v, int k) {
  if constexpr (Vec16<T>::kCount == 4) return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
  else return k == 0 ? v.x : v.y;
}

template <typename T, NormKind kNorm>
struct ShortRowsAgent {
  using Op = NormOp<kNorm>;
  using Acc = typename Op::Acc;
  using VT = typename Vec16<T>::type;
  static constexpr int V = Vec16<T>::kCount;
  static constexpr int U = ShortRowsPolicy::kVectorsPerLane;
  const T* in;
  T* out;
  int64_t rows, cols;
  ShortRowsLayout layout;
  NormalizeResult* result;

  __device__ void Run() const {
    const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t e = thread; e < layout.EdgeRows(rows); e += threads) EdgeRow(in, out, cols, layout.EdgeRow(e), result);
    for (int64_t tile = thread / 32; tile < layout.tiles; tile += threads / 32) Tile(tile);
  }

  __device__ static void Report(NormalizeResult* result, int64_t row) {
    atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
  }

  // Row `row` read and written element by element, divided where its norm has no
  // reciprocal in T (WithRowScale).
  __device__ static __noinline__ void EdgeRow(const T* in, T* out, int64_t cols, int64_t row,
                                              NormalizeResult* result) {
    const T* src = in + row * cols;
    T* dst = out + row * cols;
    Acc acc = Op::Identity();
    for (int64_t c = 0; c < cols; ++c) acc = Op::Add(acc, Op::Transform(src[c]));
    const double norm = Op::Finalize(acc);
    if (!FastNorm<T, kNorm>(norm)) return Report(result, row);
    bool overflow = false;
    WithRowScale<T>(norm, [&](auto scale) {
      for (int64_t c = 0; c < cols; ++c) {
        dst[c] = scale(src[c]);
        if constexpr (kNorm == NormKind::kSum) overflow |= isinf(dst[c]);
      }
    });
    if (overflow) Report(result, row);
  }

  __device__ void Tile(int64_t tile) const {
    const int lane = threadIdx.x % 32;
    const int ncols = static_cast<int>(cols);
    const ShortRowsTile t = ShortRowsTileAt<V>(layout, tile, cols);
    const int64_t row0 = t.row0;
    const int nrows = t.rows;
    const VT* src = reinterpret_cast<const VT*>(in + layout.head) + t.first_vector;
    VT* dst = reinterpret_cast<VT*>(out + layout.head) + t.first_vector;
    VT x[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int v = u * 32 + lane;
      x[u] = v < t.vectors ? src[v] : VT{};
    }
    // Element 0 of the lane's first vector, and the step from one load to the next (32 V
    // elements).
    const RowPos first = LaneFirst<V>(lane, t.skip, ncols);
    const RowPos step{(32 * V) / ncols, (32 * V) % ncols};
    const int span = (V - 1 + ncols + V - 1) / V;  // the most vectors a row touches
    // Load u is reduced, then load u - 1 scaled: a row ends at most one load later, and
    // only two loads' norms are live at once.
    double norm_first[U];
    T inv_first[U];
    Acc carry = Op::Identity();  // the scan at lane 31 of the previous load
    RowPos reduce_pos = first, scale_pos = first;
    unsigned divide = 0;  // loads whose first row ends here and has no reciprocal in T
#pragma unroll
    for (int u = 0; u <= U; ++u) {
      if (u < U) {
        Reduce(x[u], reduce_pos, lane, ncols, nrows, span, carry, norm_first[u], inv_first[u]);
        reduce_pos = reduce_pos.Plus(step.row, step.col, ncols);
      }
      if (u > 0) {
        const int k = u - 1, next = u < U ? u : k;
        Scale(x[k], scale_pos, k, lane, ncols, nrows, norm_first[k], inv_first[k], norm_first[next],
              inv_first[next], row0, dst + k * 32 + lane, &divide);
        scale_pos = scale_pos.Plus(step.row, step.col, ncols);
      }
    }
    if (divide == 0) return;
    RowPos pos = first;
#pragma unroll 1
    for (int u = 0; u < U; ++u, pos = pos.Plus(step.row, step.col, ncols)) {
      if (divide >> u & 1) EdgeRow(in, out, cols, row0 + pos.row, result);
    }
  }

  // One load, one vector a lane (element 0 at `pos`): the norm of the row holding the
  // vector's first element where that row ends in the vector (its segmented inclusive
  // scan to there), and its reciprocal. `carry`: the scan at lane 31 of the previous
  // load, updated to this one's.
  __device__ __forceinline__ static void Reduce(const VT& x, RowPos pos, int lane, int ncols, int nrows, int span,
                                                Acc& carry, double& norm_first, T& inv_first) {
    Acc run = Op::Identity(), head = Op::Identity();  // the last row's run, the first row's
    const int first_end = ncols - 1 - pos.col;         // element where the first row ends
    RowPos a = pos;
    int last_col = 0;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (k > 0 && a.col == 0) run = Op::Identity();
      if (a.row >= 0 && a.row < nrows) run = Op::Add(run, Op::Transform(VecElem<T>(x, k)));
      if (k == first_end) head = run;
      last_col = a.col;
      a = a.Plus(0, 1, ncols);
    }
    if (first_end >= V) head = run;
    // Segmented inclusive scan of the last row's runs over the lanes (Hillis-Steele:
    // lane - d still in the row means its row is this one).
    const int start = RowStartLane<V>(lane, last_col);
    Acc scan = run;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      if (d >= span) break;
      const Acc up = ShuffleUp(scan, d);
      if (lane >= d && lane - d >= start) scan = Op::Combine(up, scan);
    }
    if (start < 0) scan = Op::Combine(carry, scan);
    Acc before = ShuffleUp(scan, 1);  // the first row up to the previous vector
    if (lane == 0) before = carry;
    carry = ShuffleIdx(scan, 31);
    norm_first = Op::Finalize(pos.col > 0 ? Op::Combine(before, head) : head);
    inv_first = static_cast<T>(1.0 / norm_first);
  }

  // One load's vector scaled and stored (`dst`): an element's norm is its vector's
  // first-row norm where that row ends in the vector, else the norm from the lane where
  // its row ends, in this load or the next (`norm_next`).
  __device__ __forceinline__ void Scale(const VT& x, RowPos pos, int u, int lane, int ncols, int nrows,
                                        double norm_first, T inv_first, double norm_next, T inv_next, int64_t row0,
                                        VT* dst, unsigned* divide) const {
    RowPos last = pos;
#pragma unroll
    for (int k = 1; k < V; ++k) last = last.Plus(0, 1, ncols);
    const int end = RowEndLane<V>(lane, last.col, ncols);
    const double norm_here = ShuffleIdx(norm_first, end % 32), norm_later = ShuffleIdx(norm_next, end % 32);
    const T inv_here = ShuffleIdx(inv_first, end % 32), inv_later = ShuffleIdx(inv_next, end % 32);
    const double norm_last = end < 32 ? norm_here : norm_later;
    const T inv_last = end < 32 ? inv_here : inv_later;
    const int first_end = ncols - 1 - pos.col;  // >= V: the first row is the last
    const bool ends = first_end < V;
    // Elements of the first row where it ends here, else of the last row (cols >= V: a
    // vector holds at most two rows, and only the first can end in it). Bad rows are
    // left unwritten and reported once, by the lane holding their last element; rows
    // without a reciprocal in T are left to EdgeRow (once, by that lane), which divides.
    const bool good_first = FastNorm<T, kNorm>(norm_first), good_last = FastNorm<T, kNorm>(norm_last);
    const bool ok_first = good_first && !isinf(inv_first), ok_last = good_last && !isinf(inv_last);
    if (ends && pos.row >= 0 && pos.row < nrows) {
      if (!good_first) Report(result, row0 + pos.row);
      else if (!ok_first) *divide |= 1u << u;
    }
    T y[V];
    bool ok[V], all = true;
    RowPos a = pos;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const bool first_row = ends && k <= first_end;
      y[k] = VecElem<T>(x, k) * (first_row ? inv_first : inv_last);
      ok[k] = a.row >= 0 && a.row < nrows && (first_row ? ok_first : ok_last);
      if constexpr (kNorm == NormKind::kSum) {
        if (ok[k] && isinf(y[k])) Report(result, row0 + a.row);
      }
      all &= ok[k];
      a = a.Plus(0, 1, ncols);
    }
    if (all) {
      VT packed;
      T* p = reinterpret_cast<T*>(&packed);
#pragma unroll
      for (int k = 0; k < V; ++k) p[k] = y[k];
      *dst = packed;
      return;
    }
    T* o = reinterpret_cast<T*>(dst);  // the tile's first or last vector, or a bad row
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (ok[k]) o[k] = y[k];
    }
  }
};

template <typename T, NormKind kNorm>
__global__ void __launch_bounds__(ShortRowsPolicy::kThreads, ShortRowsPolicy::kMinBlocksPerSm)
    ShortRowsKernel(const T* in, T* out, int64_t rows, int64_t cols, ShortRowsLayout layout,
                    NormalizeResult* result) {
  ShortRowsAgent<T, kNorm>{in, out, rows, cols, layout, result}.Run();
}

// Launches the flat path where it applies: rows up to kMaxCols, in and out on the same
// 16-byte phase (else a vector of one is not a vector of the other); *launched false
// otherwise (the caller runs the default's plan).
template <typename T, NormKind kNorm>
cudaError_t LaunchShortRows(const T* in, T* out, int64_t rows, int64_t cols, NormalizeResult* result,
                            const LaunchEnv& env, bool* launched) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
  *launched = cols <= ShortRowsPolicy::kMaxCols && a % sizeof(T) == 0 && a % 16 == b % 16;
  if (!*launched) return cudaSuccess;
  constexpr int V = Vec16<T>::kCount;
  const ShortRowsLayout layout = ShortRowsLayoutFor<V>(static_cast<int>(a % 16 / sizeof(T)), rows, cols);
  auto kernel = ShortRowsKernel<T, kNorm>;
  static const int resident = ResidentBlocksPerSm(kernel, ShortRowsPolicy::kThreads);
  const int64_t work = std::max(CeilDiv(layout.tiles, ShortRowsPolicy::kThreads / 32),
                                CeilDiv(layout.EdgeRows(rows), ShortRowsPolicy::kThreads));
  const unsigned grid = GridFor(work, env.sm_count, resident);
  kernel<<<grid, ShortRowsPolicy::kThreads, 0, env.stream>>>(in, out, rows, cols, layout, result);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

}  // namespace
}  // namespace gpucompute::cuda
