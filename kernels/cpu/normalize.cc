// Each row along the last axis divided by its norm, accumulated in float64.
//
// Rows that fit in a core's L2 are done whole by one thread: the norm pass
// leaves the row in cache for the scaling pass. Longer rows are done one at a
// time, split into segments over all threads: partial norms first, combined in
// segment order (so the result does not depend on the thread count), then the
// scaling.
//
// Accuracy: SUM, whose terms may cancel, is compensated element by element
// (TwoSum per lane) and across blocks (Neumaier): within about
// 2 eps |sum| + n eps^2 sum |x| of the exact sum, so float64 accurate unless the
// terms cancel by more than ~1e16 (no double-double sum is, past that). L1 and
// L2 add non-negative terms, where a plain sum within a block is already within
// 1024 ulp; their block totals are compensated. L2 scales a block by a power of two when its squares would
// overflow or underflow (as BLAS nrm2 does), so [1e200, 1e200] and
// [1e-200, 1e-200] have their true norms.
#include <algorithm>
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
// A block's plain sum of squares in [2^-600, 2^600] is used as is: what
// underflowed is below 2^-412 of it, and 2^30 such blocks (a 2^40-element row)
// cannot overflow. Outside, the block is rescaled.
constexpr double kMinPlainSquares = 0x1p-600;
constexpr double kMaxPlainSquares = 0x1p600;
// Scaling exponents stay where 2^-exponent is a normal double.
constexpr int kMaxScaleExponent = 1020;

// Neumaier's compensated sum.
struct CompensatedSum {
  double sum = 0;
  double compensation = 0;

  void Add(double value) {
    const double total = sum + value;
    compensation +=
        std::abs(sum) >= std::abs(value) ? (sum - total) + value : (value - total) + sum;
    sum = total;
  }
  void Add(const CompensatedSum& other) {
    Add(other.sum);
    compensation += other.compensation;
  }
  // An infinite sum leaves a NaN compensation (inf - inf); report the infinity.
  double Total() const { return std::isfinite(sum) ? sum + compensation : sum; }
};

// A sum of terms in units of 4^exponent: L2 sums squares of x * 2^-exponent;
// the other norms keep exponent 0.
struct ScaledSum {
  CompensatedSum sum;
  int exponent = 0;

  // Both to the larger exponent; power-of-two scaling is exact but for underflow,
  // which drops only what is negligible next to the larger sum.
  bool IsZero() const { return sum.sum == 0 && sum.compensation == 0; }
  void Add(ScaledSum other) {
    if (other.IsZero()) return;
    if (IsZero()) {
      *this = other;
      return;
    }
    if (other.exponent > exponent) std::swap(*this, other);
    const int shift = 2 * (other.exponent - exponent);
    sum.Add({std::ldexp(other.sum.sum, shift), std::ldexp(other.sum.compensation, shift)});
  }
};

// The running norm of part of a row: a scaled compensated sum, or a maximum for
// MAX_ABS. A NaN element makes the norm NaN (std::max would drop it).
struct PartialNorm {
  ScaledSum sum;
  double max_abs = 0;

  void Merge(const PartialNorm& other) {
    sum.Add(other.sum);
    max_abs = MaxKeepNaN(max_abs, other.max_abs);
  }
  static double MaxKeepNaN(double a, double b) { return (b > a || std::isnan(b)) ? b : a; }
};

template <NormKind kNorm>
double Term(double v) {
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

// Folds the kLanes accumulators pairwise, then the leftover.
template <NormKind kNorm>
double FoldLanes(const double (&lanes)[kLanes], double leftover) {
  const double low =
      Combine<kNorm>(Combine<kNorm>(lanes[0], lanes[4]), Combine<kNorm>(lanes[2], lanes[6]));
  const double high =
      Combine<kNorm>(Combine<kNorm>(lanes[1], lanes[5]), Combine<kNorm>(lanes[3], lanes[7]));
  return Combine<kNorm>(Combine<kNorm>(low, high), leftover);
}

// L1, L2 or MAX_ABS of at most kSumBlock elements, each multiplied by `scale`:
// kLanes interleaved accumulators (vectorized) plus the leftover elements.
template <typename T, NormKind kNorm>
double BlockNorm(const T* x, int64_t n, double scale = 1) {
  double lanes[kLanes] = {};
  double non_finite[kLanes] = {};  // MAX_ABS: term * 0 is NaN only for NaN or infinity
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      const double term = Term<kNorm>(scale * x[i + lane]);
      lanes[lane] = Combine<kNorm>(lanes[lane], term);
      if constexpr (kNorm == NormKind::kMaxAbs) non_finite[lane] += term * 0;
    }
  }
  double leftover = 0;
  for (; i < n; ++i) {
    const double term = Term<kNorm>(scale * x[i]);
    leftover = Combine<kNorm>(leftover, term);
    if constexpr (kNorm == NormKind::kMaxAbs) non_finite[0] += term * 0;
  }
  if constexpr (kNorm == NormKind::kMaxAbs) {
    for (double flag : non_finite) {
      if (flag != 0) return MaxAbsKeepNaN(x, n);
    }
  }
  return FoldLanes<kNorm>(lanes, leftover);
}

// SUM of at most kSumBlock elements: per lane, Knuth's TwoSum keeps each
// addition's rounding error (branch-free, so it vectorizes).
template <typename T>
CompensatedSum BlockSum(const T* x, int64_t n) {
  double lanes[kLanes] = {};
  double errors[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) {
      const double v = static_cast<double>(x[i + lane]);
      const double total = lanes[lane] + v;
      const double v_part = total - lanes[lane];
      errors[lane] += (lanes[lane] - (total - v_part)) + (v - v_part);
      lanes[lane] = total;
    }
  }
  CompensatedSum block;
  for (int lane = 0; lane < kLanes; ++lane) {
    block.Add(lanes[lane]);
    block.Add(errors[lane]);
  }
  for (; i < n; ++i) block.Add(static_cast<double>(x[i]));
  return block;
}

// L2 of at most kSumBlock elements: the plain sum of squares when it is safe,
// else the squares of x * 2^-exponent, with 2^exponent just above max |x|.
template <typename T>
ScaledSum BlockSquares(const T* x, int64_t n) {
  const double plain = BlockNorm<T, NormKind::kL2>(x, n);
  if ((plain >= kMinPlainSquares && plain <= kMaxPlainSquares) || std::isnan(plain)) {
    return {{plain, 0}, 0};
  }
  const double max_abs = BlockNorm<T, NormKind::kMaxAbs>(x, n);
  if (max_abs == 0 || !std::isfinite(max_abs)) return {{plain, 0}, 0};
  const int exponent =
      std::clamp(std::ilogb(max_abs) + 1, -kMaxScaleExponent, kMaxScaleExponent);
  return {{BlockNorm<T, NormKind::kL2>(x, n, std::ldexp(1.0, -exponent)), 0}, exponent};
}

// Accumulates x[0, n) into `norm`, block by block.
template <typename T, NormKind kNorm>
void Accumulate(const T* x, int64_t n, PartialNorm& norm) {
  for (int64_t block = 0; block < n; block += kSumBlock) {
    const T* begin = x + block;
    const int64_t count = std::min(kSumBlock, n - block);
    if constexpr (kNorm == NormKind::kMaxAbs) {
      norm.max_abs = PartialNorm::MaxKeepNaN(norm.max_abs, BlockNorm<T, kNorm>(begin, count));
    } else if constexpr (kNorm == NormKind::kSum) {
      norm.sum.sum.Add(BlockSum(begin, count));
    } else if constexpr (kNorm == NormKind::kL2) {
      norm.sum.Add(BlockSquares(begin, count));
    } else {
      norm.sum.sum.Add(BlockNorm<T, kNorm>(begin, count));
    }
  }
}

template <NormKind kNorm>
double Finish(const PartialNorm& norm) {
  if constexpr (kNorm == NormKind::kMaxAbs) return norm.max_abs;
  if constexpr (kNorm == NormKind::kL2) {
    return std::ldexp(std::sqrt(norm.sum.sum.Total()), norm.sum.exponent);
  }
  return norm.sum.sum.Total();
}

bool Usable(double norm) { return norm != 0 && std::isfinite(norm); }

// out = x / norm. Returns false when a quotient overflows T, which only SUM can
// cause: |sum| may be far below max |x|.
template <typename T, NormKind kNorm>
bool Scale(const T* x, int64_t n, double norm, T* out) {
  const double inverse = 1.0 / norm;
  if (!std::isfinite(inverse)) {
    // A subnormal norm: its reciprocal overflows, so divide (found by the fuzzer).
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<double>(x[i]) / norm);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<double>(x[i]) * inverse);
  }
  if constexpr (kNorm == NormKind::kSum) {
    T overflow = 0;  // inf * 0 is NaN
    for (int64_t i = 0; i < n; ++i) overflow += out[i] * 0;
    return overflow == 0;
  }
  return true;
}

template <typename T, NormKind kNorm>
double RowNorm(const T* row, int64_t length) {
  PartialNorm norm;
  Accumulate<T, kNorm>(row, length, norm);
  return Finish<kNorm>(norm);
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
          if (!Usable(norm) || !Scale<T, kNorm>(x, length, norm, out + row * length)) {
            int64_t seen = first_bad.load(std::memory_order_relaxed);
            while (row < seen && !first_bad.compare_exchange_weak(seen, row)) {
            }
            return;
          }
        }
      }));
  const int64_t bad = first_bad.load();
  if (bad < rows) {
    return BadRowError(bad, kNorm, RowNorm<T, kNorm>(in + bad * length, length), kDType<T>);
  }
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
    if (!Usable(norm)) return BadRowError(row, kNorm, norm, kDType<T>);
    std::atomic<bool> overflow{false};
    GC_RETURN_IF_ERROR(pool.ParallelFor(length, kSegment, ctx, [&](int64_t begin, int64_t end) {
      if (!Scale<T, kNorm>(x + begin, end - begin, norm, y + begin)) overflow = true;
    }));
    if (overflow) return BadRowError(row, kNorm, norm, kDType<T>);
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
