// Lomb-Scargle periodogram, SciPy 1.15's generalized form, in float64 for both
// dtypes. Per batch row, with w the weights normalized to sum 1:
//
//   CC = sum w c c, SS = sum w s s, CS = sum w c s, YC = sum w y c, YS = sum w y s
//   (minus the products of the means C = sum w c, S = sum w s, Y = sum w y
//    when floating_mean), c = cos(f x), s = sin(f x)
//   D = CC SS - CS^2, a = (YC SS - YS CS) / D, b = (YS CC - YC CS) / D
//   p = 2 (a YC + b YS), then scaled by N/4, or by 1 / (2 weighted variance);
//   or SciPy's "amplitude", a + ib turned back from the frame where CS = 0
//   (lombscargle_power.h Amplitude), stored as two values.
//
// The work is split over (batch row, block of up to 128 frequencies). When the
// gaps between a block's consecutive frequencies take a few distinct values (a
// grid, numpy.linspace or arange output of either dtype), cos and sin of f x
// are advanced from one frequency to the next by a rotation through gap * x,
// recomputed exactly at each block start: a few multiply-adds per (frequency,
// sample) instead of a sin and a cos. Other frequencies call sin and cos for
// every (frequency, sample). Evenly spaced frequencies may go through the NUFFT
// instead (lombscargle_nufft.cc; ChooseLombScargleMethod decides).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/lombscargle_rows.h"
#include "kernels/lombscargle_nufft.h"
#include "kernels/preconditions.h"
#include "kernels/shape_rules.h"

namespace gpucompute::cpu {
namespace {

// Frequencies per task, at most one DirectValues call.
constexpr int64_t kMinFrequencyBlock = 32;
constexpr int64_t kMaxFrequencyBlock = kMaxDirectValues;

// Distinct gaps between consecutive frequencies that one block follows by
// rotation. numpy.linspace rounds its points to the dtype, so the gaps of one
// take a few values per binade the block spans: a grid from near zero (0.01 to 5
// takes 8 in its first block of 128) as much as one far from it. Tables past the
// first cost a small rotation each (RotationsFor), far less than the sin and cos
// of every term that a block with more gaps than this pays.
constexpr int kMaxGaps = 32;

// Largest |angle| whose cos and sin are taken from their Taylor series to the
// fifth power: the first term left out is below 1e-17.
constexpr double kSmallAngle = 1.0 / 256;

// Sample `index` of padded rows stored back to back.
void SetSample(std::vector<Lanes>& rows, int64_t index, double value) {
  rows[index / kLanes][index % kLanes] = value;
}

double HorizontalSum(const Lanes& v) {
  double total = 0;
  for (int64_t lane = 0; lane < kLanes; ++lane) total += v[lane];
  return total;
}

// Weighted sums at one frequency from c = cos(f x), s = sin(f x). With
// kAdvance, then turns (c, s) on to the next frequency: a rotation by the angle
// gap * x, whose cosine and sine are (dc, ds).
template <bool kAdvance>
Sums Accumulate(const Lanes* w, const Lanes* wy, Lanes* c, Lanes* s, const Lanes* dc,
                const Lanes* ds, int64_t vectors) {
  Lanes cc{}, ss{}, cs{}, yc{}, ys{}, c_sum{}, s_sum{};
  for (int64_t i = 0; i < vectors; ++i) {
    const Lanes ci = c[i];
    const Lanes si = s[i];
    const Lanes wc = w[i] * ci;
    const Lanes ws = w[i] * si;
    cc += wc * ci;
    ss += ws * si;
    cs += wc * si;
    yc += wy[i] * ci;
    ys += wy[i] * si;
    c_sum += wc;
    s_sum += ws;
    if constexpr (kAdvance) {
      c[i] = ci * dc[i] - si * ds[i];
      s[i] = si * dc[i] + ci * ds[i];
    }
  }
  return {HorizontalSum(cc), HorizontalSum(ss),    HorizontalSum(cs),   HorizontalSum(yc),
          HorizontalSum(ys), HorizontalSum(c_sum), HorizontalSum(s_sum)};
}

// c = cos(f x), s = sin(f x) for every sample, of the exact product f x: of the rounded
// p, turned by e = f x - p (a rounded f x is off by up to 1e-4 rad at 1e12; the CUDA
// kernels take the exact product too). Second order in e is exact to 1e-16 for
// |e| < 2^-20, the phases below ~2^33; past that sin and cos of e.
void SinCos(double f, const Lanes* x, Lanes* c, Lanes* s, int64_t vectors) {
  for (int64_t i = 0; i < vectors; ++i) {
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      const double p = f * x[i][lane];
      const double e = std::fma(f, x[i][lane], -p);
      const double cp = std::cos(p), sp = std::sin(p);
      double ce, se;
      if (std::abs(e) < 0x1p-20) {
        ce = 1 - 0.5 * e * e;
        se = e;
      } else {
        ce = std::cos(e);
        se = std::sin(e);
      }
      c[i][lane] = cp * ce - sp * se;
      s[i][lane] = sp * ce + cp * se;
    }
  }
}

// (c, s) = (c0, s0) turned by the angle delta * x, small enough for Taylor.
void RotateBySmallAngle(double delta, const Lanes* x, const Lanes* c0, const Lanes* s0, Lanes* c,
                        Lanes* s, int64_t vectors) {
  for (int64_t i = 0; i < vectors; ++i) {
    const Lanes t = delta * x[i];
    const Lanes t2 = t * t;
    const Lanes cos_t = 1.0 - t2 * (1.0 / 2 - t2 * (1.0 / 24));
    const Lanes sin_t = t * (1.0 - t2 * (1.0 / 6 - t2 * (1.0 / 120)));
    c[i] = c0[i] * cos_t - s0[i] * sin_t;
    s[i] = s0[i] * cos_t + c0[i] * sin_t;
  }
}

// Fills batch row b of `rows`: its weights normalized to sum 1, y centered when
// precenter (plain mean, as SciPy), w * y, Y and YY. `x_row` is null when the
// row shares x with row 0; `weights` null means equal weights.
template <typename T>
void PrepareRow(int64_t b, const T* x_row, const T* y_row, const T* weights, double weight_sum,
                int64_t samples, bool precenter, PreparedRows& rows) {
  const int64_t row_start = b * rows.vectors * kLanes;
  if (x_row != nullptr) {
    for (int64_t n = 0; n < samples; ++n) SetSample(rows.x, row_start + n, x_row[n]);
  }
  double mean = 0;
  if (precenter) {
    for (int64_t n = 0; n < samples; ++n) mean += y_row[n];
    mean /= static_cast<double>(samples);
  }
  double y_sum = 0;
  double yy_sum = 0;
  for (int64_t n = 0; n < samples; ++n) {
    const double w =
        weights != nullptr ? weights[n] / weight_sum : 1.0 / static_cast<double>(samples);
    const double centered = static_cast<double>(y_row[n]) - mean;
    SetSample(rows.w, row_start + n, w);
    SetSample(rows.wy, row_start + n, w * centered);
    y_sum += w * centered;
    yy_sum += w * centered * centered;
  }
  rows.y_sum[b] = y_sum;
  rows.yy_sum[b] = yy_sum;
}

// Angular frequency k: from the array, or the grid generated here.
struct Frequencies {
  const Array* array;
  Linspace grid;

  template <typename T>
  double At(int64_t k) const {
    return array != nullptr ? static_cast<double>(array->data_as<T>()[k]) : grid.At(k);
  }
};

// The rotations that carry (cos, sin) of f x from each frequency of a block to
// the next: a table of (cos, sin)(gap x) per distinct gap f[k + 1] - f[k].
// Those differences are exact for float32 frequencies and for float64 ones
// within a factor 2 of each other, so the phases follow the frequencies as
// given, not an ideal even spacing that a float32 array misses by its rounding.
struct Rotations {
  int64_t vectors = 0;
  std::vector<Lanes> cos, sin;                      // table j at j * vectors
  std::array<uint8_t, kMaxFrequencyBlock> gap_of{};  // table from f[k] to f[k + 1]

  const Lanes* CosTo(int64_t k) const { return cos.data() + gap_of[k] * vectors; }
  const Lanes* SinTo(int64_t k) const { return sin.data() + gap_of[k] * vectors; }
};

// Rotations for f[0, count), or none when the gaps take more than kMaxGaps
// values or one is not finite. Tables after the first are the first turned by
// the small difference of the gaps where Taylor is exact, saving a sin and cos.
std::optional<Rotations> RotationsFor(const double* f, int64_t count, const Lanes* x,
                                      int64_t vectors) {
  Rotations rotations;
  rotations.vectors = vectors;
  std::array<double, kMaxGaps> gaps{};
  int distinct = 0;
  for (int64_t k = 0; k + 1 < count; ++k) {
    const double gap = f[k + 1] - f[k];
    if (!std::isfinite(gap)) return std::nullopt;
    const int j = static_cast<int>(std::find(gaps.begin(), gaps.begin() + distinct, gap) -
                                   gaps.begin());
    if (j == distinct) {
      if (distinct == kMaxGaps) return std::nullopt;
      gaps[distinct++] = gap;
    }
    rotations.gap_of[k] = static_cast<uint8_t>(j);
  }
  if (distinct == 0) return rotations;
  rotations.cos.resize(distinct * vectors);
  rotations.sin.resize(distinct * vectors);
  Lanes* cos0 = rotations.cos.data();
  Lanes* sin0 = rotations.sin.data();
  SinCos(gaps[0], x, cos0, sin0, vectors);
  double x_max = 0;
  for (int64_t i = 0; i < vectors; ++i) {
    for (int64_t lane = 0; lane < kLanes; ++lane) x_max = std::max(x_max, std::abs(x[i][lane]));
  }
  for (int j = 1; j < distinct; ++j) {
    const double delta = gaps[j] - gaps[0];
    Lanes* cos_j = cos0 + j * vectors;
    Lanes* sin_j = sin0 + j * vectors;
    if (std::abs(delta) * x_max <= kSmallAngle) {
      RotateBySmallAngle(delta, x, cos0, sin0, cos_j, sin_j, vectors);
    } else {
      SinCos(gaps[j], x, cos_j, sin_j, vectors);
    }
  }
  return rotations;
}

// The direct sums over every (sample, frequency).
template <typename T>
absl::Status DirectSums(ThreadPool& pool, const LombScargleShape& shape, const PreparedRows& rows,
                        const Frequencies& freqs, const LombScargleOptions& options, T* result,
                        const OpContext& ctx) {
  const int64_t vectors = rows.vectors;
  const int64_t m = shape.frequencies;
  // Enough blocks for every thread, each long enough to amortize its start.
  const int64_t block_size =
      std::clamp<int64_t>((shape.batch * m + 4 * pool.threads() - 1) / (4 * pool.threads()),
                          kMinFrequencyBlock, kMaxFrequencyBlock);
  const int64_t blocks = (m + block_size - 1) / block_size;
  const auto run_block = [&](int64_t task) {
    const int64_t b = task / blocks;
    const int64_t first = (task % blocks) * block_size;
    const int64_t count = std::min(m, first + block_size) - first;
    std::array<double, kMaxFrequencyBlock> f{};
    for (int64_t k = 0; k < count; ++k) f[k] = freqs.At<T>(first + k);
    std::array<PeriodogramValue, kMaxFrequencyBlock> values;
    DirectValues(rows, shape, b, f.data(), count, options, values.data());
    for (int64_t k = 0; k < count; ++k) {
      StoreValue(values[k], options.amplitude, b * m + first + k, result);
    }
  };
  return pool.ParallelFor(shape.batch * blocks, GrainFor(block_size * shape.samples, 1 << 18), ctx,
                          [&](int64_t begin, int64_t end) {
                            for (int64_t task = begin; task < end; ++task) run_block(task);
                          });
}

}  // namespace

PowerSettings SettingsFor(const PreparedRows& rows, const LombScargleShape& shape, int64_t b,
                          const LombScargleOptions& options) {
  return {rows.y_sum[b],     rows.yy_sum[b],        rows.samples[b],
          options.normalize, options.floating_mean, options.amplitude};
}

void DirectValues(const PreparedRows& rows, const LombScargleShape& shape, int64_t b,
                  const double* f, int64_t count, const LombScargleOptions& options,
                  PeriodogramValue* values) {
  const int64_t vectors = rows.vectors;
  const Lanes* x = rows.x.data() + (shape.x_batched ? b * vectors : 0);
  const Lanes* w = rows.w.data() + b * vectors;
  const Lanes* wy = rows.wy.data() + b * vectors;
  const PowerSettings settings = SettingsFor(rows, shape, b, options);
  const std::optional<Rotations> rotations = RotationsFor(f, count, x, vectors);
  std::vector<Lanes> c(vectors), s(vectors);
  if (rotations.has_value()) SinCos(f[0], x, c.data(), s.data(), vectors);
  for (int64_t k = 0; k < count; ++k) {
    Sums sums;
    if (!rotations.has_value()) {
      SinCos(f[k], x, c.data(), s.data(), vectors);
      sums = Accumulate<false>(w, wy, c.data(), s.data(), nullptr, nullptr, vectors);
    } else if (k + 1 < count) {
      sums = Accumulate<true>(w, wy, c.data(), s.data(), rotations->CosTo(k), rotations->SinTo(k),
                              vectors);
    } else {
      sums = Accumulate<false>(w, wy, c.data(), s.data(), nullptr, nullptr, vectors);
    }
    values[k] = ValueOf(sums, settings);
  }
}

template <typename T>
absl::StatusOr<PreparedRows> PrepareRows(ThreadPool& pool, const LombScargleShape& shape,
                                         const Array& x_array, const Array& y_array,
                                         const Array* weights_array,
                                         const LombScargleOptions& options, const OpContext& ctx) {
  const int64_t batch = shape.batch;
  const int64_t samples = shape.samples;
  // Row b's first element and length in the flat (ragged) or rectangular arrays.
  const std::vector<int64_t>& offsets = options.row_offsets;
  const auto start = [&](int64_t b) { return shape.ragged ? offsets[b] : b * samples; };
  const auto length = [&](int64_t b) { return shape.ragged ? offsets[b + 1] - offsets[b] : samples; };
  const T* weights = weights_array != nullptr ? weights_array->data_as<T>() : nullptr;
  const int64_t weight_rows = shape.weights_batched ? batch : 1;
  std::vector<double> weight_sums(weight_rows);
  for (int64_t r = 0; weights != nullptr && r < weight_rows; ++r) {
    GC_ASSIGN_OR_RETURN(weight_sums[r], CheckWeightsRow(weights + start(r), r, length(r)));
  }

  PreparedRows rows;
  rows.vectors = (samples + kLanes - 1) / kLanes;
  rows.x.assign((shape.x_batched ? batch : 1) * rows.vectors, Lanes{});
  rows.w.assign(batch * rows.vectors, Lanes{});
  rows.wy.assign(batch * rows.vectors, Lanes{});
  rows.y_sum.resize(batch);
  rows.yy_sum.resize(batch);
  rows.samples.resize(batch);
  const T* x = x_array.data_as<T>();
  const T* y = y_array.data_as<T>();
  GC_RETURN_IF_ERROR(
      pool.ParallelFor(batch, GrainFor(samples), ctx, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const bool own_x = shape.x_batched || b == 0;
          const int64_t w_row = shape.weights_batched ? b : 0;
          rows.samples[b] = length(b);
          PrepareRow(b, own_x ? x + start(b) : nullptr, y + start(b),
                     weights != nullptr ? weights + start(w_row) : nullptr,
                     weights != nullptr ? weight_sums[w_row] : 0, length(b), options.precenter,
                     rows);
        }
      }));
  return rows;
}

template absl::StatusOr<PreparedRows> PrepareRows<float>(ThreadPool&, const LombScargleShape&,
                                                        const Array&, const Array&, const Array*,
                                                        const LombScargleOptions&,
                                                        const OpContext&);
template absl::StatusOr<PreparedRows> PrepareRows<double>(ThreadPool&, const LombScargleShape&,
                                                         const Array&, const Array&, const Array*,
                                                         const LombScargleOptions&,
                                                         const OpContext&);

namespace {

// Prepares the rows once, then runs the method ChooseLombScargleMethod picks.
template <typename T>
absl::Status Run(ThreadPool& pool, const LombScargleShape& shape, const Array& x, const Array& y,
                 const Array* weights, const Array* freqs, const Linspace& grid,
                 const LombScargleOptions& options, Array& out, OpContext& ctx) {
  GC_RETURN_IF_ERROR(CheckNufftAccuracy(options.accuracy, "accuracy"));
  absl::StatusOr<EvenFrequencies> even =
      freqs == nullptr ? EvenGrid(grid)
                       : EvenlySpaced(freqs->data_as<T>(), shape.frequencies,
                                      EvenSpacingTolerance(freqs->dtype(), options.method));
  GC_ASSIGN_OR_RETURN(const LombScargleMethod method,
                      ChooseLombScargleMethod(options, shape, even.status()));
  GC_ASSIGN_OR_RETURN(const PreparedRows rows,
                      PrepareRows<T>(pool, shape, x, y, weights, options, ctx));
  ctx.method = LombScargleMethodName(method);
  if (method == LombScargleMethod::kNufft) {
    return LombScargleNufft(pool, shape, rows, *even, options, out.data_as<T>(), ctx);
  }
  return DirectSums(pool, shape, rows, Frequencies{freqs, grid}, options, out.data_as<T>(), ctx);
}

}  // namespace

absl::Status LombScargle(ThreadPool& pool, const Array& x, const Array& y, const Array* weights,
                         const Array* freqs, const Linspace& grid,
                         const LombScargleOptions& options, Array& out, OpContext& ctx) {
  GC_ASSIGN_OR_RETURN(const LombScargleShape shape,
                      CheckLombScargleArrays(x, y, weights, freqs, grid, out, options));
  if (y.dtype() == DType::kFloat32) {
    return Run<float>(pool, shape, x, y, weights, freqs, grid, options, out, ctx);
  }
  return Run<double>(pool, shape, x, y, weights, freqs, grid, options, out, ctx);
}

}  // namespace gpucompute::cpu
