// Lomb-Scargle's NUFFT method on the CPU (kernels/lombscargle_nufft.h has the
// algorithm): per batch row three type-1 transforms, each a task that spreads
// the row's samples onto its own grid and runs FFTW on it; then the powers (or
// amplitudes) from the deconvolved modes. Everything in float64.
#include <fftw3.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <complex>
#include <cstdint>
#include <memory>
#include <numbers>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/lombscargle_rows.h"

namespace gpucompute::cpu {
namespace {

using Complex = std::complex<double>;

// FFTW's planner is not thread-safe (its execute functions are).
absl::Mutex fftw_planner_mutex;

struct FftwFree {
  void operator()(void* memory) const { fftw_free(memory); }
};
using FftwGrid = std::unique_ptr<Complex[], FftwFree>;

// fftw_malloc'd, so that every grid has the alignment the plan was made for.
FftwGrid AllocateGrid(int64_t points) {
  return FftwGrid(static_cast<Complex*>(fftw_malloc(sizeof(Complex) * points)));
}

// One in-place backward (e^{+i}) transform of `points`, shared by every task.
class FftwPlan {
 public:
  static absl::StatusOr<std::unique_ptr<FftwPlan>> Create(int64_t points) {
    FftwGrid scratch = AllocateGrid(points);
    if (scratch == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate an FFT grid of ", points, " points"));
    }
    absl::MutexLock lock(&fftw_planner_mutex);
    auto* data = reinterpret_cast<fftw_complex*>(scratch.get());
    fftw_plan plan = fftw_plan_dft_1d(static_cast<int>(points), data, data, FFTW_BACKWARD,
                                      FFTW_ESTIMATE);
    if (plan == nullptr) return absl::InternalError("FFTW could not plan the NUFFT's transform");
    return std::unique_ptr<FftwPlan>(new FftwPlan(plan));
  }
  ~FftwPlan() {
    absl::MutexLock lock(&fftw_planner_mutex);
    fftw_destroy_plan(plan_);
  }
  FftwPlan(const FftwPlan&) = delete;
  FftwPlan& operator=(const FftwPlan&) = delete;

  void Execute(Complex* grid) const {
    auto* data = reinterpret_cast<fftw_complex*>(grid);
    fftw_execute_dft(plan_, data, data);
  }

 private:
  explicit FftwPlan(fftw_plan plan) : plan_(plan) {}
  fftw_plan plan_;
};

// Adds value * kernel around grid position u in [0, n), wrapping around the ends.
void Spread(Complex value, double u, const NufftPlan& plan, Complex* grid) {
  const double half_width = plan.width / 2.0;
  const int64_t first = static_cast<int64_t>(std::ceil(u - half_width));
  const double inverse_half_width = 1 / half_width;
  const bool inside = first >= 0 && first + plan.width <= plan.grid;
  for (int l = 0; l < plan.width; ++l) {
    const double z = std::min(1.0, std::abs((first + l - u) * inverse_half_width));
    const int64_t index = first + l;
    grid[inside ? index : (index + plan.grid) % plan.grid] += value * NufftKernel(z, plan.beta);
  }
}

// Host memory the modes, powers and bounds of one chunk of rows may take.
constexpr int64_t kChunkBytes = int64_t{256} << 20;

// A window of frequencies to redo is recomputed whole where at least 1 in this many
// of its frequencies need it: turning cos and sin on costs a few multiply-adds a
// term, taking them afresh a sin and a cos.
constexpr int64_t kWholeWindowRedoFraction = 8;

// Which of a row's three transforms: the sums of w and of w y at f_k, of w at 2 f_k.
enum Transform { kWeights = 0, kWeightedY = 1, kWeightsDouble = 2, kTransforms = 3 };

// F(m) for one transform of row b, written to modes[k] for frequency k = m + h.
void RunTransform(const NufftPlan& plan, const FftwPlan& fft, const std::vector<double>& inverse_p,
                  const EvenFrequencies& freqs, const double* x, const double* w,
                  const double* wy, int64_t samples, Transform transform, Complex* grid,
                  Complex* modes) {
  std::fill(grid, grid + plan.grid, Complex{});
  const double n = static_cast<double>(plan.grid);
  const double shift = freqs.start + static_cast<double>(plan.half) * freqs.step;
  const double turns_per_x = freqs.step / (2 * std::numbers::pi);
  for (int64_t j = 0; j < samples; ++j) {
    if (w[j] == 0) continue;  // padding, or a zero weight: no contribution
    // t_j / 2 pi = df x_j / 2 pi mod 1 (doubled for 2 f_k), as a grid position.
    double turns = turns_per_x * x[j];
    if (transform == kWeightsDouble) turns *= 2;
    turns -= std::floor(turns);
    const double phase = shift * x[j];
    Complex rotation(std::cos(phase), std::sin(phase));
    if (transform == kWeightsDouble) rotation *= rotation;
    const double coefficient = transform == kWeightedY ? wy[j] : w[j];
    Spread(coefficient * rotation, std::min(turns * n, std::nextafter(n, 0.0)), plan, grid);
  }
  fft.Execute(grid);
  for (int64_t k = 0; k < plan.modes; ++k) {
    const int64_t m = k - plan.half;
    modes[k] = grid[m < 0 ? m + plan.grid : m] * inverse_p[m < 0 ? -m : m];
  }
}

}  // namespace

template <typename T>
absl::Status LombScargleNufft(ThreadPool& pool, const LombScargleShape& shape,
                              const PreparedRows& rows, const EvenFrequencies& freqs,
                              const LombScargleOptions& options, T* out, const OpContext& ctx) {
  const NufftPlan plan = PlanNufft(shape.frequencies, options.accuracy);
  const std::vector<double> inverse_p = NufftDeconvolution(plan);
  GC_ASSIGN_OR_RETURN(const std::unique_ptr<FftwPlan> fft, FftwPlan::Create(plan.grid));
  const int64_t m = shape.frequencies;
  const int64_t padded = rows.vectors * kLanes;
  const double sum_error = NufftSumError(plan);
  // Rows in chunks, so that the modes of a large batch never need more than about
  // kChunkBytes at once.
  const int64_t chunk_rows =
      std::clamp<int64_t>(kChunkBytes / (m * (kTransforms * sizeof(Complex) +
                                              sizeof(PeriodogramValue) + sizeof(double))),
                          1, shape.batch);
  // modes[(row * 3 + transform) * M + k]: that transform's sum at frequency k; value and
  // bound per (row, k); rows of the chunk from `first`.
  std::vector<Complex> modes(chunk_rows * kTransforms * m);
  std::vector<PeriodogramValue> value(chunk_rows * m);
  std::vector<double> bound(chunk_rows * m);
  for (int64_t first = 0; first < shape.batch; first += chunk_rows) {
    const int64_t count = std::min(chunk_rows, shape.batch - first);
    std::atomic<bool> out_of_memory = false;
    GC_RETURN_IF_ERROR(
        pool.ParallelFor(count * kTransforms, 1, ctx, [&](int64_t begin, int64_t end) {
          FftwGrid grid = AllocateGrid(plan.grid);
          if (grid == nullptr) {
            out_of_memory = true;
            return;
          }
          for (int64_t task = begin; task < end; ++task) {
            const int64_t b = first + task / kTransforms;
            RunTransform(plan, *fft, inverse_p, freqs, rows.XRow(b, shape.x_batched), rows.WRow(b),
                         rows.WyRow(b), padded, static_cast<Transform>(task % kTransforms),
                         grid.get(), modes.data() + task * m);
          }
        }));
    if (out_of_memory) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate an FFT grid of ", plan.grid, " points"));
    }
    // Each row's |w y| sum scales the error of its w y transform.
    std::vector<double> wy_abs_sum(count, 0.0);
    for (int64_t r = 0; r < count; ++r) {
      for (int64_t j = 0; j < padded; ++j) wy_abs_sum[r] += std::abs(rows.WyRow(first + r)[j]);
    }
    GC_RETURN_IF_ERROR(pool.ParallelFor(count * m, GrainFor(64), ctx, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t r = i / m, k = i % m;
        const Complex* row = modes.data() + r * kTransforms * m;
        const Complex sum_w = row[kWeights * m + k], sum_wy = row[kWeightedY * m + k];
        const Complex sum_w2 = row[kWeightsDouble * m + k];
        const Sums sums = SumsFromTransforms(sum_w.real(), sum_w.imag(), sum_wy.real(),
                                             sum_wy.imag(), sum_w2.real(), sum_w2.imag());
        const SumErrors errors{sum_error, sum_error * wy_abs_sum[r]};
        value[i] = ValueOf(sums, SettingsFor(rows, shape, first + r, options), &errors, &bound[i]);
      }
    }));
    // Frequencies whose bound passes the accuracy, on the scale of the row's largest
    // resolved power (or amplitude), again by the direct sums.
    std::vector<int64_t> redo;
    for (int64_t r = 0; r < count; ++r) {
      double largest = 0;
      for (int64_t i = r * m; i < (r + 1) * m; ++i) {
        largest = std::max(largest, ResolvedMagnitude(value[i], options.amplitude, bound[i]));
      }
      for (int64_t k = 0; k < m; ++k) {
        if (!(bound[r * m + k] <= kNufftRedoFraction * options.accuracy * largest)) {
          redo.push_back(r * m + k);
        }
      }
    }
    // By windows of kMaxDirectValues consecutive frequencies of one row: a window
    // with many to redo is recomputed whole, cos and sin turned from one frequency
    // to the next (a few multiply-adds a term), the others one frequency at a time
    // (a sin and a cos a term). Short rows of noise come back almost whole, and one
    // frequency at a time they cost over ten times the direct method.
    std::vector<size_t> window_starts;  // ranges of `redo` in one window each
    const auto window_of = [&](int64_t i) { return (i / m) * m + (i % m) / kMaxDirectValues; };
    for (size_t e = 0; e < redo.size(); ++e) {
      if (window_starts.empty() || window_of(redo[e]) != window_of(redo[window_starts.back()])) {
        window_starts.push_back(e);
      }
    }
    window_starts.push_back(redo.size());
    const int64_t windows = static_cast<int64_t>(window_starts.size()) - 1;
    GC_RETURN_IF_ERROR(pool.ParallelFor(
        windows, GrainFor(padded * kMaxDirectValues), ctx, [&](int64_t begin, int64_t end) {
          std::array<double, kMaxDirectValues> f{};
          std::array<PeriodogramValue, kMaxDirectValues> values;
          for (int64_t w = begin; w < end; ++w) {
            const size_t from = window_starts[w], to = window_starts[w + 1];
            const int64_t r = redo[from] / m;
            const int64_t k0 = (redo[from] % m) / kMaxDirectValues * kMaxDirectValues;
            const int64_t span = std::min<int64_t>(kMaxDirectValues, m - k0);
            if (static_cast<int64_t>(to - from) * kWholeWindowRedoFraction >= span) {
              for (int64_t k = 0; k < span; ++k) f[k] = freqs.start + static_cast<double>(k0 + k) * freqs.step;
              DirectValues(rows, shape, first + r, f.data(), span, options, values.data());
              for (size_t e = from; e < to; ++e) value[redo[e]] = values[redo[e] % m - k0];
              continue;
            }
            for (size_t e = from; e < to; ++e) {
              f[0] = freqs.start + static_cast<double>(redo[e] % m) * freqs.step;
              DirectValues(rows, shape, first + r, f.data(), 1, options, values.data());
              value[redo[e]] = values[0];
            }
          }
        }));
    for (int64_t i = 0; i < count * m; ++i) {
      StoreValue(value[i], options.amplitude, first * m + i, out);
    }
  }
  return absl::OkStatus();
}

template absl::Status LombScargleNufft<float>(ThreadPool&, const LombScargleShape&,
                                              const PreparedRows&, const EvenFrequencies&,
                                              const LombScargleOptions&, float*, const OpContext&);
template absl::Status LombScargleNufft<double>(ThreadPool&, const LombScargleShape&,
                                               const PreparedRows&, const EvenFrequencies&,
                                               const LombScargleOptions&, double*,
                                               const OpContext&);

}  // namespace gpucompute::cpu
