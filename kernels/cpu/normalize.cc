// Each row along the last axis divided by its norm, accumulated in float64.
//
// Rows that fit in a core's L2 are done whole by one thread: the norm pass
// leaves the row in cache for the scaling pass. Longer rows are done one at a
// time, split into segments over all threads: partial norms first, combined in
// segment order (so the result does not depend on the thread count), then the
// scaling. Sums are compensated (see CompensatedSum), so long rows keep float64
// accuracy.
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/shape_rules.h"

namespace gpucompute::cpu {
namespace {

// Rows up to this many bytes are normalized by one thread in one go (L2 sized).
constexpr int64_t kWholeRowBytes = int64_t{1} << 20;
// Elements per parallel segment of a long row, and per summation block.
constexpr int64_t kSegment = int64_t{1} << 16;
constexpr int64_t kSumBlock = 1024;
// Independent accumulators per block: lets the compiler vectorize the loop.
// BlockNorm folds exactly eight.
constexpr int kLanes = 8;

// Neumaier's compensated sum of block totals.
struct CompensatedSum {
  double sum = 0;
  double compensation = 0;

  void Add(double value) {
    const double total = sum + value;
    compensation +=
        std::abs(sum) >= std::abs(value) ? (sum - total) + value : (value - total) + sum;
    sum = total;
  }
  // An infinite sum leaves a NaN compensation (inf - inf); report the infinity.
  double Total() const { return std::isfinite(sum) ? sum + compensation : sum; }
};

// The running norm of part of a row: a compensated sum, or a maximum for
// MAX_ABS. A NaN element makes the norm NaN (std::max would drop it).
struct PartialNorm {
  CompensatedSum sum;
  double max_abs = 0;

  void Merge(const PartialNorm& other) {
    sum.Add(other.sum.Total());
    max_abs = MaxKeepNaN(max_abs, other.max_abs);
  }
  static double MaxKeepNaN(double a, double b) { return (b > a || std::isnan(b)) ? b : a; }
};

template <typename T, NormKind kNorm>
double Term(T x) {
  const double v = static_cast<double>(x);
  if constexpr (kNorm == NormKind::kSum) return v;
  if constexpr (kNorm == NormKind::kL1 || kNorm == NormKind::kMaxAbs) return std::abs(v);
  return v * v;  // kL2
}

// Within a block MAX_ABS uses a plain maximum, which vectorizes but drops NaN;
// BlockNorm rescans a block that holds NaN or infinity.
template <NormKind kNorm>
double Combine(double accumulated, double term) {
  if constexpr (kNorm == NormKind::kMaxAbs) return term > accumulated ? term : accumulated;
  return accumulated + term;
}

template <typename T>
double MaxAbsKeepNaN(const T* x, int64_t n) {
  double norm = 0;
  for (int64_t i = 0; i < n; ++i) norm = PartialNorm::MaxKeepNaN(norm, std::abs(double{x[i]}));
  return norm;
}

// The norm of at most kSumBlock elements: kLanes interleaved accumulators
// (vectorized) folded pairwise, plus the leftover elements.
template <typename T, NormKind kNorm>
double BlockNorm(const T* x, int64_t n) {
  double lanes[kLanes] = {};
  double non_finite[kLanes] = {};  // MAX_ABS: term * 0 is NaN only for NaN or infinity
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      const double term = Term<T, kNorm>(x[i + lane]);
      lanes[lane] = Combine<kNorm>(lanes[lane], term);
      if constexpr (kNorm == NormKind::kMaxAbs) non_finite[lane] += term * 0;
    }
  }
  double leftover = 0;
  for (; i < n; ++i) {
    const double term = Term<T, kNorm>(x[i]);
    leftover = Combine<kNorm>(leftover, term);
    if constexpr (kNorm == NormKind::kMaxAbs) non_finite[0] += term * 0;
  }
  if constexpr (kNorm == NormKind::kMaxAbs) {
    for (double flag : non_finite) {
      if (flag != 0) return MaxAbsKeepNaN(x, n);
    }
  }
  const double low =
      Combine<kNorm>(Combine<kNorm>(lanes[0], lanes[4]), Combine<kNorm>(lanes[2], lanes[6]));
  const double high =
      Combine<kNorm>(Combine<kNorm>(lanes[1], lanes[5]), Combine<kNorm>(lanes[3], lanes[7]));
  return Combine<kNorm>(Combine<kNorm>(low, high), leftover);
}

// Accumulates x[0, n) into `norm`, block by block.
template <typename T, NormKind kNorm>
void Accumulate(const T* x, int64_t n, PartialNorm& norm) {
  for (int64_t block = 0; block < n; block += kSumBlock) {
    const double block_norm = BlockNorm<T, kNorm>(x + block, std::min(kSumBlock, n - block));
    if constexpr (kNorm == NormKind::kMaxAbs) {
      norm.max_abs = PartialNorm::MaxKeepNaN(norm.max_abs, block_norm);
    } else {
      norm.sum.Add(block_norm);
    }
  }
}

template <NormKind kNorm>
double Finish(const PartialNorm& norm) {
  if constexpr (kNorm == NormKind::kMaxAbs) return norm.max_abs;
  if constexpr (kNorm == NormKind::kL2) return std::sqrt(norm.sum.Total());
  return norm.sum.Total();
}

bool Usable(double norm) { return norm != 0 && std::isfinite(norm); }

template <typename T>
void Scale(const T* x, int64_t n, double norm, T* out) {
  const double inverse = 1.0 / norm;
  if (!std::isfinite(inverse)) {
    // A subnormal norm: its reciprocal overflows, so divide (found by the fuzzer).
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<double>(x[i]) / norm);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<double>(x[i]) * inverse);
}

template <typename T, NormKind kNorm>
double RowNorm(const T* row, int64_t length) {
  PartialNorm norm;
  Accumulate<T, kNorm>(row, length, norm);
  return Finish<kNorm>(norm);
}

absl::Status BadRowError(int64_t row, NormKind kind, double norm) {
  return absl::InvalidArgumentError(absl::StrCat("input row ", row, " has ", NormName(kind),
                                                 " norm ", norm,
                                                 "; rows must have a finite, non-zero norm"));
}

// Short rows: each block of rows is normalized by one thread. The first row
// with an unusable norm is the lowest index any block reports.
template <typename T, NormKind kNorm>
absl::Status NormalizeShortRows(ThreadPool& pool, const T* in, int64_t rows, int64_t length, T* out,
                                const OpContext& ctx) {
  std::atomic<int64_t> first_bad{rows};
  GC_RETURN_IF_ERROR(
      pool.ParallelFor(rows, GrainFor(length), ctx, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          if (row > first_bad.load(std::memory_order_relaxed)) return;
          const T* x = in + row * length;
          const double norm = RowNorm<T, kNorm>(x, length);
          if (!Usable(norm)) {
            int64_t seen = first_bad.load(std::memory_order_relaxed);
            while (row < seen && !first_bad.compare_exchange_weak(seen, row)) {
            }
            return;
          }
          Scale(x, length, norm, out + row * length);
        }
      }));
  const int64_t bad = first_bad.load();
  if (bad < rows) return BadRowError(bad, kNorm, RowNorm<T, kNorm>(in + bad * length, length));
  return absl::OkStatus();
}

// Long rows: one row at a time, its segments spread over the pool.
template <typename T, NormKind kNorm>
absl::Status NormalizeLongRows(ThreadPool& pool, const T* in, int64_t rows, int64_t length, T* out,
                               const OpContext& ctx) {
  const int64_t segments = (length + kSegment - 1) / kSegment;
  std::vector<PartialNorm> partials(segments);
  for (int64_t row = 0; row < rows; ++row) {
    const T* x = in + row * length;
    T* y = out + row * length;
    GC_RETURN_IF_ERROR(pool.ParallelFor(length, kSegment, ctx, [&](int64_t begin, int64_t end) {
      PartialNorm& partial = partials[begin / kSegment];
      partial = PartialNorm();
      Accumulate<T, kNorm>(x + begin, end - begin, partial);
    }));
    PartialNorm total;
    for (const PartialNorm& partial : partials) total.Merge(partial);
    const double norm = Finish<kNorm>(total);
    if (!Usable(norm)) return BadRowError(row, kNorm, norm);
    GC_RETURN_IF_ERROR(pool.ParallelFor(length, kSegment, ctx, [&](int64_t begin, int64_t end) {
      Scale(x + begin, end - begin, norm, y + begin);
    }));
  }
  return absl::OkStatus();
}

template <typename T, NormKind kNorm>
absl::Status Run(ThreadPool& pool, const Array& in, Array& out, const OpContext& ctx) {
  const int64_t length = in.shape().back();
  const int64_t rows = in.size() / length;
  if (length * static_cast<int64_t>(sizeof(T)) <= kWholeRowBytes) {
    return NormalizeShortRows<T, kNorm>(pool, in.data_as<T>(), rows, length, out.data_as<T>(), ctx);
  }
  return NormalizeLongRows<T, kNorm>(pool, in.data_as<T>(), rows, length, out.data_as<T>(), ctx);
}

template <typename T>
absl::Status RunNorm(ThreadPool& pool, const Array& in, NormKind norm, Array& out,
                     const OpContext& ctx) {
  switch (norm) {
    case NormKind::kSum:
      return Run<T, NormKind::kSum>(pool, in, out, ctx);
    case NormKind::kL1:
      return Run<T, NormKind::kL1>(pool, in, out, ctx);
    case NormKind::kL2:
      return Run<T, NormKind::kL2>(pool, in, out, ctx);
    case NormKind::kMaxAbs:
      return Run<T, NormKind::kMaxAbs>(pool, in, out, ctx);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("norm kind ", static_cast<int>(norm), " is not one of SUM, L1, L2, MAX_ABS"));
}

}  // namespace

absl::Status Normalize(ThreadPool& pool, const Array& in, NormKind norm, Array& out,
                       const OpContext& ctx) {
  GC_RETURN_IF_ERROR(CheckNormalizeShape(in.shape(), "input"));
  GC_RETURN_IF_ERROR(CheckDType(out, "out", in.dtype()));
  GC_RETURN_IF_ERROR(CheckShape(out, "out", in.shape()));
  if (in.size() == 0) return absl::OkStatus();
  if (in.dtype() == DType::kFloat32) return RunNorm<float>(pool, in, norm, out, ctx);
  return RunNorm<double>(pool, in, norm, out, ctx);
}

}  // namespace gpucompute::cpu
