// What the CPU's two Lomb-Scargle methods share: the rows prepared in float64
// (normalized weights, centred w y), the per-frequency sums, and the power they
// give. The direct sums live in lombscargle.cc, the NUFFT in lombscargle_nufft.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/array.h"
#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/lombscargle_nufft.h"
#include "kernels/lombscargle_power.h"
#include "kernels/shape_rules.h"

namespace gpucompute::cpu {

// Samples per vector; rows are padded with zero-weight samples to whole vectors.
// Four with AVX's 256-bit registers; two on plain SSE2, where four would spill
// the seven accumulators of the direct sums out of its sixteen registers.
#ifdef __AVX__
constexpr int64_t kLanes = 4;
#else
constexpr int64_t kLanes = 2;
#endif
using Lanes = double __attribute__((vector_size(kLanes * sizeof(double))));

// Row data in float64, each row `vectors` Lanes long; padding samples have x = w = 0.
struct PreparedRows {
  int64_t vectors = 0;
  std::vector<Lanes> x;        // one row, or one per batch row when x is batched
  std::vector<Lanes> w;        // normalized weights, per batch row
  std::vector<Lanes> wy;       // w * y (y centered when precenter), per batch row
  std::vector<double> y_sum;   // Y = sum w y
  std::vector<double> yy_sum;  // YY = sum w y y
  std::vector<int64_t> samples;  // N of each row (ragged rows differ; the rest is padding)

  // Row b's samples as plain doubles, vectors * kLanes of them.
  const double* XRow(int64_t b, bool x_batched) const {
    return reinterpret_cast<const double*>(x.data() + (x_batched ? b * vectors : 0));
  }
  const double* WRow(int64_t b) const { return reinterpret_cast<const double*>(w.data() + b * vectors); }
  const double* WyRow(int64_t b) const {
    return reinterpret_cast<const double*>(wy.data() + b * vectors);
  }
};

// Checks the weights and fills PreparedRows from T arrays.
template <typename T>
absl::StatusOr<PreparedRows> PrepareRows(ThreadPool& pool, const LombScargleShape& shape,
                                         const Array& x, const Array& y, const Array* weights,
                                         const LombScargleOptions& options, const OpContext& ctx);

// The settings Power needs for batch row b.
PowerSettings SettingsFor(const PreparedRows& rows, const LombScargleShape& shape, int64_t b,
                          const LombScargleOptions& options);

// Frequencies one DirectValues call takes: the rotation from one to the next adds
// about one rounding each (after 128, ~1e-14, the rounding of a phase f x ~ 100).
inline constexpr int64_t kMaxDirectValues = 128;

// The values at frequencies f[0, count) (count <= kMaxDirectValues) of batch row b by
// the direct sums: cos and sin of f x turned from one frequency to the next where
// the gaps between them take few values, else taken at each.
void DirectValues(const PreparedRows& rows, const LombScargleShape& shape, int64_t b,
                  const double* f, int64_t count, const LombScargleOptions& options,
                  PeriodogramValue* values);

// The NUFFT method: out (T, B x M, or B x M x 2 for an amplitude) at the evenly
// spaced frequencies.
template <typename T>
absl::Status LombScargleNufft(ThreadPool& pool, const LombScargleShape& shape,
                              const PreparedRows& rows, const EvenFrequencies& freqs,
                              const LombScargleOptions& options, T* out, const OpContext& ctx);

}  // namespace gpucompute::cpu
