// CPU backend throughput at the seed sizes, next to a memcpy of the same bytes
// so the distance to this machine's memory bandwidth is visible.
//
// bytes_per_second counts the compulsory traffic: every input byte read once
// plus every output byte written once (memcpy: source + destination). The
// memory-bound operations (DiscountProduct, Normalize) should approach the
// memcpy figure of the same size; Haversine and Lomb-Scargle are bound by
// arithmetic and report items (points, sample-frequency pairs) per second.
//
//   build-cpu/bench/cpu_bench --benchmark_repetitions=5 \
//       --benchmark_report_aggregates_only=true --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace gpucompute {
namespace {

// One backend for every benchmark: all hardware threads, as the server runs it.
Backend& SharedBackend() {
  static const std::unique_ptr<Backend> backend = CreateCpuBackend(0);
  return *backend;
}

template <typename T>
constexpr DType DTypeOf() {
  return sizeof(T) == 4 ? DType::kFloat32 : DType::kFloat64;
}

// An array of uniform random values in [low, high).
template <typename T>
std::shared_ptr<Array> RandomArray(const Shape& shape, double low, double high,
                                   benchmark::State& state) {
  absl::StatusOr<std::shared_ptr<Array>> array =
      SharedBackend().Allocate(DTypeOf<T>(), shape, kHostDevice);
  if (!array.ok()) {
    state.SkipWithError(std::string(array.status().message()).c_str());
    return nullptr;
  }
  std::mt19937_64 random(42);
  std::uniform_real_distribution<double> distribution(low, high);
  std::vector<T> values((*array)->size());
  for (T& v : values) v = static_cast<T>(distribution(random));
  const absl::Status status =
      SharedBackend().CopyToArray(values.data(), 0, (*array)->bytes(), **array);
  if (!status.ok()) {
    state.SkipWithError(std::string(status.message()).c_str());
    return nullptr;
  }
  return *array;
}

template <typename T>
std::shared_ptr<Array> OutputArray(const Shape& shape, benchmark::State& state) {
  return RandomArray<T>(shape, 0, 1, state);  // touched, so page faults are not timed
}

// Wall time (the pool's threads do the work, not only the timing thread), in
// milliseconds, plus the minimum over repetitions: on a machine shared with
// other work the least disturbed run is the best estimate of the cost.
void Configure(benchmark::internal::Benchmark* benchmark) {
  benchmark->UseRealTime()
      ->Unit(benchmark::kMillisecond)
      ->ComputeStatistics("min", [](const std::vector<double>& v) {
        return *std::min_element(v.begin(), v.end());
      });
}

void Report(benchmark::State& state, const absl::Status& status) {
  if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
}

// memcpy of `bytes` between two touched buffers on one thread, then split over
// two threads: the practical ceiling for streaming operations here.
void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  std::vector<char> source(bytes, 1), destination(bytes, 2);
  for (auto _ : state) {
    std::vector<std::thread> helpers;
    const size_t share = bytes / threads;
    for (int t = 1; t < threads; ++t) {
      helpers.emplace_back([&, t] {
        std::memcpy(destination.data() + t * share, source.data() + t * share,
                    t == threads - 1 ? bytes - t * share : share);
      });
    }
    std::memcpy(destination.data(), source.data(), threads == 1 ? bytes : share);
    for (std::thread& helper : helpers) helper.join();
    benchmark::DoNotOptimize(destination.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(bytes));
}
// Sizes of the DiscountProduct and Normalize outputs below.
BENCHMARK(BM_Memcpy)
    ->ArgNames({"bytes", "threads"})
    ->ArgsProduct({{16'000'000, 40'000'000, 800'000'000}, {1, 2}})
    ->Apply(Configure);

template <typename T>
void BM_DiscountProduct(benchmark::State& state) {
  const int64_t d = state.range(0), m = state.range(1), o = state.range(2);
  std::shared_ptr<Array> factors = RandomArray<T>({m, o}, 0.5, 1.0, state);
  std::shared_ptr<Array> values = RandomArray<T>({d, m, o}, -100, 100, state);
  std::shared_ptr<Array> out = OutputArray<T>({d, m, o}, state);
  if (!out) return;
  OpContext ctx;
  for (auto _ : state) {
    Report(state, SharedBackend().DiscountProduct(*factors, *values, *out, ctx));
  }
  state.SetBytesProcessed(state.iterations() * (factors->bytes() + values->bytes() + out->bytes()));
  state.SetItemsProcessed(state.iterations() * out->size());
}
BENCHMARK(BM_DiscountProduct<double>)
    ->ArgNames({"D", "M", "O"})
    ->Args({100, 4000, 5})
    ->Args({20, 1'000'000, 5})
    ->Apply(Configure);

template <typename T>
void BM_HaversineMesh(benchmark::State& state) {
  const int64_t n = state.range(0);
  const LatLonMesh mesh = {{29, 31, n}, {99, 101, n}};
  const std::vector<GeoPoint> refs = {{30, 101}};
  std::shared_ptr<Array> out = OutputArray<T>({1, n, n}, state);
  if (!out) return;
  OpContext ctx;
  for (auto _ : state) {
    Report(state, SharedBackend().HaversineMesh(mesh, refs, kDefaultEarthRadiusKm, *out, ctx));
  }
  state.SetBytesProcessed(state.iterations() * out->bytes());
  state.SetItemsProcessed(state.iterations() * out->size());
}
BENCHMARK(BM_HaversineMesh<float>)->Arg(1000)->Apply(Configure);
BENCHMARK(BM_HaversineMesh<double>)->Arg(1000)->Apply(Configure);

template <typename T>
void BM_Normalize(benchmark::State& state) {
  const int64_t rows = state.range(0), length = state.range(1);
  std::shared_ptr<Array> in = RandomArray<T>({rows, length}, 0.1, 1.0, state);
  std::shared_ptr<Array> out = OutputArray<T>({rows, length}, state);
  if (!out) return;
  OpContext ctx;
  for (auto _ : state) {
    Report(state, SharedBackend().Normalize(*in, NormKind::kSum, *out, ctx));
  }
  state.SetBytesProcessed(state.iterations() * (in->bytes() + out->bytes()));
  state.SetItemsProcessed(state.iterations() * in->size());
}
BENCHMARK(BM_Normalize<float>)
    ->ArgNames({"rows", "length"})
    ->Args({10, 1'000'000})
    ->Args({1'000'000, 10})
    ->Apply(Configure);

// How the frequencies reach the kernel (Arg 2).
enum FrequencySource : int64_t {
  kRandomArray = 0,    // an array in random order: sin and cos per pair
  kGrid = 1,           // the grid generated here
  kLinspaceArray = 2,  // numpy.linspace's values rounded to T, as a client sends them
};

template <typename T>
void BM_LombScargle(benchmark::State& state) {
  const int64_t n = state.range(0), m = state.range(1);
  const auto source = static_cast<FrequencySource>(state.range(2));
  const Linspace frequency_grid = {0.01, 10, m};
  std::shared_ptr<Array> x = RandomArray<T>({n}, 0, 100, state);
  std::shared_ptr<Array> y = RandomArray<T>({n}, -1, 3, state);
  std::shared_ptr<Array> freqs = RandomArray<T>({m}, 0.01, 10, state);
  std::shared_ptr<Array> out = OutputArray<T>({m}, state);
  if (!out) return;
  if (source == kLinspaceArray) {
    std::vector<T> values(m);
    for (int64_t k = 0; k < m; ++k) values[k] = static_cast<T>(frequency_grid.At(k));
    Report(state, SharedBackend().CopyToArray(values.data(), 0, freqs->bytes(), *freqs));
  }
  OpContext ctx;
  for (auto _ : state) {
    Report(state, SharedBackend().LombScargle(*x, *y, nullptr,
                                              source == kGrid ? nullptr : freqs.get(),
                                              frequency_grid, {}, *out, ctx));
  }
  state.SetItemsProcessed(state.iterations() * n * m);
}
BENCHMARK(BM_LombScargle<float>)
    ->ArgNames({"N", "M", "freqs"})
    ->ArgsProduct({{1024}, {65536}, {kGrid, kLinspaceArray, kRandomArray}})
    ->Apply(Configure);
BENCHMARK(BM_LombScargle<double>)
    ->ArgNames({"N", "M", "freqs"})
    ->ArgsProduct({{1024}, {65536}, {kGrid, kLinspaceArray, kRandomArray}})
    ->Apply(Configure);

}  // namespace
}  // namespace gpucompute

BENCHMARK_MAIN();
