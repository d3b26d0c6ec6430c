// GPU timings of the shipped kernels at the seed sizes, through the backend, with CUDA
// events (no Google Benchmark loop: every figure is the median of >= 20 event-timed runs
// after warm-up). The candidates they were chosen from are timed by dev/cuda's programs.
//
//   gpu_kernels_bench [--csv FILE] [--quick] [--only=SECTION] [--reps N]
//                     [--normalize_cases=f32:sum:100000x1000,f32:l2:100000x1000,...]
//
// Prints the two ceilings measured on this device (device-to-device copy bandwidth,
// counting bytes read plus bytes written; pinned PCIe H2D/D2H), the backend's staged
// copies from pageable memory, then one row per operation: op, dtype, size, median
// ms (ctx.compute_time: events around the kernels), host wall ms of the whole call,
// bytes counted (each input read once, each output written once), achieved GB/s and
// the ratio to the measured D2D bandwidth; for Lomb-Scargle, (frequency, sample)
// pairs per second instead.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/check_or_exit.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/launchers.h"

namespace gpucompute {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Row {
  std::string op, dtype, size;
  double ms = 0, wall_ms = 0, spread = 0;  // spread: (p90 - p10) / median
  double bytes = 0;                        // counted bytes (0: compute-bound row)
  double work = 0;                         // pairs for LS
  bool write_only = false;                 // bound by writes alone (ratio to memset)
  double same_size_gbs = 0;                // its ceiling's copy or memset of the row's bytes
};

std::vector<Row> g_rows;
double g_d2d_gbs = 0;
double g_write_gbs = 0;
int g_reps = 20;

double Spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const double p10 = v[v.size() / 10], p90 = v[(v.size() * 9) / 10];
  return (p90 - p10) / Median(v);
}

// Times `run` (returns the kernel milliseconds) after 3 warm-ups.
Row Time(const std::string& op, const std::string& dtype, const std::string& size, double bytes,
         double work, const std::function<double()>& run) {
  for (int i = 0; i < 3; ++i) run();
  std::vector<double> ms, wall;
  for (int i = 0; i < g_reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ms.push_back(run());
    wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  Row r{op, dtype, size, Median(ms), Median(wall), Spread(ms), bytes, work, false};
  g_rows.push_back(r);
  std::printf("  %-22s %-4s %-26s %9.4f ms (wall %8.3f ms, spread %.1f%%)\n", op.c_str(), dtype.c_str(),
              size.c_str(), r.ms, r.wall_ms, 100 * r.spread);
  std::fflush(stdout);
  return r;
}

std::string Short(DType dt) { return dt == DType::kFloat32 ? "f32" : "f64"; }

double OpMs(const OpContext& ctx) { return absl::ToDoubleMilliseconds(ctx.compute_time); }

struct Bench {
  std::unique_ptr<Backend> backend;
  int device = 0;
  cudaStream_t stream = nullptr;
  int sm_count = 1;
  // Scratch of the launches timed directly, kept mapped as the backend's pool keeps
  // it: the default pool trims to 0 at every synchronization, and remapping the
  // chunked paths' scratch cost ~0.1 ms inside the events.
  cudaMemPool_t pool = nullptr;

  std::shared_ptr<Array> Alloc(DType dt, const Shape& shape, double lo, double hi, uint64_t seed) {
    absl::StatusOr<std::shared_ptr<Array>> a = backend->Allocate(dt, shape, device);
    CHECK_OK(a.status());
    CHECK_CUDA(cuda::LaunchFillUniform(dt, (*a)->data(), (*a)->size(), lo, hi, seed,
                                       cuda::LaunchEnv{stream, nullptr, sm_count}));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    return *a;
  }
};

// Times `launch` (kernels only, between two events on the benchmark's stream).
Row TimeLaunch(Bench& b, const std::string& op, const std::string& dtype, const std::string& size,
               double bytes, double work, const std::function<cudaError_t()>& launch) {
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  Row r = Time(op, dtype, size, bytes, work, [&] {
    CHECK_CUDA(cudaEventRecord(e0, b.stream));
    CHECK_CUDA(launch());
    CHECK_CUDA(cudaEventRecord(e1, b.stream));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    return static_cast<double>(ms);
  });
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  return r;
}

void MarkWriteOnly() { g_rows.back().write_only = true; }

// The ceilings again at each kernel row's own size (from `first_row`): a copy of half the
// bytes each way, or a memset of them for write-only rows. A 2 GiB ceiling hides the
// launch and the ramp up and down that a smaller kernel pays as a copy of its size does.
void SameSizeCeilings(Bench& b, size_t first_row) {
  std::map<std::pair<double, bool>, double> gbs;
  for (size_t i = first_row; i < g_rows.size(); ++i) {
    if (g_rows[i].bytes > 0) gbs[{g_rows[i].bytes, g_rows[i].write_only}] = 0;
  }
  if (gbs.empty()) return;
  size_t largest = 0;
  for (const auto& [key, unused] : gbs) largest = std::max(largest, static_cast<size_t>(key.first));
  void *src = nullptr, *dst = nullptr;
  CHECK_CUDA(cudaMalloc(&src, largest));
  CHECK_CUDA(cudaMalloc(&dst, largest));
  CHECK_CUDA(cudaMemset(src, 0x3f, largest));
  std::printf("\n== ceilings at the rows' sizes\n");
  for (auto& [key, value] : gbs) {
    const auto [bytes, write_only] = key;
    const size_t n = static_cast<size_t>(write_only ? bytes : bytes / 2);
    const std::string size = absl::StrCat(n >> 20, " MiB");
    const char* name = write_only ? "memset, row's bytes" : "memcpy D2D, row's bytes";
    const Row r = TimeLaunch(b, name, "-", size, bytes, 0, [&] {
      return write_only ? cudaMemsetAsync(dst, 0x3f, n, b.stream)
                        : cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, b.stream);
    });
    g_rows.pop_back();  // not a kernel row
    value = bytes / (r.ms * 1e6);
  }
  for (size_t i = first_row; i < g_rows.size(); ++i) {
    if (g_rows[i].bytes > 0) g_rows[i].same_size_gbs = gbs[{g_rows[i].bytes, g_rows[i].write_only}];
  }
  CHECK_CUDA(cudaFree(src));
  CHECK_CUDA(cudaFree(dst));
}

void Ceilings(Bench& b) {
  std::printf("\n== ceilings\n");
  const size_t bytes = size_t{2} << 30;  // 2 GiB each way
  void *src = nullptr, *dst = nullptr;
  CHECK_CUDA(cudaMalloc(&src, bytes));
  CHECK_CUDA(cudaMalloc(&dst, bytes));
  CHECK_CUDA(cuda::LaunchFillUniform(DType::kFloat32, src, bytes / 4, -1, 1, 1, cuda::LaunchEnv{b.stream, nullptr, b.sm_count}));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  auto timed_copy = [&](void* d, const void* s, size_t n, cudaMemcpyKind kind) {
    CHECK_CUDA(cudaEventRecord(e0, b.stream));
    CHECK_CUDA(cudaMemcpyAsync(d, s, n, kind, b.stream));
    CHECK_CUDA(cudaEventRecord(e1, b.stream));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    return static_cast<double>(ms);
  };
  Row d2d = Time("memcpy D2D", "-", "2 GiB", 2.0 * bytes, 0,
                 [&] { return timed_copy(dst, src, bytes, cudaMemcpyDeviceToDevice); });
  g_d2d_gbs = d2d.bytes / (d2d.ms * 1e6);
  std::printf("  D2D bandwidth (read + write): %.0f GB/s\n", g_d2d_gbs);
  // Write-only streams (the haversine mesh writes and reads nothing) have their own ceiling.
  Row ms = Time("memset (write only)", "-", "2 GiB", static_cast<double>(bytes), 0, [&] {
    CHECK_CUDA(cudaEventRecord(e0, b.stream));
    CHECK_CUDA(cudaMemsetAsync(dst, 0x3f, bytes, b.stream));
    CHECK_CUDA(cudaEventRecord(e1, b.stream));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    return static_cast<double>(t);
  });
  g_write_gbs = ms.bytes / (ms.ms * 1e6);
  std::printf("  write-only bandwidth: %.0f GB/s\n", g_write_gbs);
  const size_t pinned_bytes = size_t{512} << 20;
  void* pinned = nullptr;
  CHECK_CUDA(cudaHostAlloc(&pinned, pinned_bytes, cudaHostAllocPortable));
  std::memset(pinned, 1, pinned_bytes);
  Row h2d = Time("memcpy H2D pinned", "-", "512 MiB", pinned_bytes, 0,
                 [&] { return timed_copy(dst, pinned, pinned_bytes, cudaMemcpyHostToDevice); });
  Row d2h = Time("memcpy D2H pinned", "-", "512 MiB", pinned_bytes, 0,
                 [&] { return timed_copy(pinned, src, pinned_bytes, cudaMemcpyDeviceToHost); });
  std::printf("  H2D pinned %.1f GB/s, D2H pinned %.1f GB/s\n", pinned_bytes / (h2d.ms * 1e6),
              pinned_bytes / (d2h.ms * 1e6));
  // The backend's copies: pageable host memory through the pinned staging pool.
  std::vector<char> pageable(pinned_bytes, 3);
  absl::StatusOr<std::shared_ptr<Array>> arr = b.backend->Allocate(DType::kFloat32, {static_cast<int64_t>(pinned_bytes / 4)}, b.device);
  CHECK_OK(arr.status());
  auto host_ms = [](const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  Time("CopyToArray pageable", "-", "512 MiB", pinned_bytes, 0, [&] {
    return host_ms([&] { CHECK_OK(b.backend->CopyToArray(pageable.data(), 0, pinned_bytes, **arr)); });
  });
  Time("CopyFromArray pageable", "-", "512 MiB", pinned_bytes, 0, [&] {
    return host_ms([&] { CHECK_OK(b.backend->CopyFromArray(**arr, 0, pinned_bytes, pageable.data())); });
  });
  Time("CopyToArray pinned", "-", "512 MiB", pinned_bytes, 0, [&] {
    return host_ms([&] { CHECK_OK(b.backend->CopyToArray(pinned, 0, pinned_bytes, **arr)); });
  });
  CHECK_CUDA(cudaFreeHost(pinned));
  CHECK_CUDA(cudaFree(src));
  CHECK_CUDA(cudaFree(dst));
}

void Discount(Bench& b, bool quick) {
  std::printf("\n== discount product\n");
  struct C { int64_t d, m, o; DType dt; };
  std::vector<C> cases = {{100, 4000, 5, DType::kFloat64}, {200, 1000000, 5, DType::kFloat64},
                          {200, 1000000, 5, DType::kFloat32}};
  if (quick) cases.resize(1);
  for (const C& c : cases) {
    auto f = b.Alloc(c.dt, {c.m, c.o}, 0.5, 1.5, 11);
    auto v = b.Alloc(c.dt, {c.d, c.m, c.o}, -1, 1, 12);
    auto out = b.Alloc(c.dt, {c.d, c.m, c.o}, 0, 1, 13);
    const double bytes = static_cast<double>(f->bytes() + v->bytes() + out->bytes());
    Time("discount", Short(c.dt), absl::StrCat("(", c.d, ",", c.m, ",", c.o, ")"), bytes, 0, [&] {
      OpContext ctx;
      CHECK_OK(b.backend->DiscountProduct(*f, *v, *out, ctx));
      return OpMs(ctx);
    });
  }
}

void Haversine(Bench& b, bool quick) {
  std::printf("\n== haversine\n");
  for (int64_t n : {int64_t{1000}, int64_t{10000}}) {
    if (quick && n > 1000) break;
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      auto out = b.Alloc(dt, {1, n, n}, 0, 1, 21);
      const std::vector<GeoPoint> refs = {{30, 101}};
      const LatLonMesh mesh{{29, 31, n}, {99, 101, n}};
      const std::string size = absl::StrCat(n, "x", n);
      Time("haversine mesh", Short(dt), size, static_cast<double>(out->bytes()), 0, [&] {
        OpContext ctx;
        CHECK_OK(b.backend->HaversineMesh(mesh, refs, kDefaultEarthRadiusKm, *out, ctx));
        return OpMs(ctx);
      });
      MarkWriteOnly();
      if (n < 10000) continue;
      // Across the globe h spans [0, 1] within a warp (the last step's ranges all taken).
      const LatLonMesh globe{{-89.5, 89.5, n}, {-180, 180, n}};
      Time("haversine mesh", Short(dt), size + " globe", static_cast<double>(out->bytes()), 0, [&] {
        OpContext ctx;
        CHECK_OK(b.backend->HaversineMesh(globe, refs, kDefaultEarthRadiusKm, *out, ctx));
        return OpMs(ctx);
      });
      MarkWriteOnly();
    }
  }
  if (quick) return;
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const int64_t n = 10000000;
    auto lat = b.Alloc(dt, {n}, -89, 89, 22), lon = b.Alloc(dt, {n}, -180, 180, 23);
    auto out = b.Alloc(dt, {4, n}, 0, 1, 24);
    const std::vector<GeoPoint> refs = {{30, 101}, {-12, 40}, {51, 0}, {0, -170}};
    const double bytes = static_cast<double>(lat->bytes() + lon->bytes() + out->bytes());
    Time("haversine points", Short(dt), "1e7 pts x 4 refs", bytes, 0, [&] {
      OpContext ctx;
      CHECK_OK(b.backend->HaversinePoints(*lat, *lon, refs, kDefaultEarthRadiusKm, *out, ctx));
      return OpMs(ctx);
    });
  }
}

struct NormalizeCase {
  int64_t rows, cols;
  DType dt;
  NormKind k;
  std::string name;
};

// "f32:sum:100000x1000" (dtype f32|f64, norm sum|l1|l2|max_abs as the CLI spells them,
// rows x cols), comma-separated.
std::vector<NormalizeCase> ParseNormalizeCases(absl::string_view list) {
  std::vector<NormalizeCase> cases;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    if (parts.size() == 3) {  // the shape, ROWSxCOLS
      const std::vector<absl::string_view> shape = absl::StrSplit(parts[2], 'x');
      parts.pop_back();
      parts.insert(parts.end(), shape.begin(), shape.end());
    }
    static const std::pair<absl::string_view, NormKind> kNorms[] = {
        {"sum", NormKind::kSum}, {"l1", NormKind::kL1}, {"l2", NormKind::kL2}, {"max_abs", NormKind::kMaxAbs}};
    NormalizeCase c{};
    bool norm_known = false;
    for (const auto& [name, kind] : kNorms) {
      if (parts.size() == 4 && parts[1] == name) {
        c.k = kind;
        c.name = std::string(name);
        norm_known = true;
      }
    }
    if (!norm_known || (parts[0] != "f32" && parts[0] != "f64") || !absl::SimpleAtoi(parts[2], &c.rows) ||
        !absl::SimpleAtoi(parts[3], &c.cols) || c.rows < 1 || c.cols < 1) {
      std::fprintf(stderr, "--normalize_cases: '%.*s' is not dtype:norm:ROWSxCOLS (f32|f64, sum|l1|l2|max_abs)\n",
                   static_cast<int>(item.size()), item.data());
      std::exit(2);
    }
    c.dt = parts[0] == "f32" ? DType::kFloat32 : DType::kFloat64;
    cases.push_back(c);
  }
  return cases;
}

std::vector<NormalizeCase> g_normalize_cases;  // --normalize_cases; empty: the standard shapes

void Normalize(Bench& b, bool quick) {
  std::printf("\n== normalize\n");
  using C = NormalizeCase;
  std::vector<C> cases = {{10, 10000000, DType::kFloat32, NormKind::kSum, "sum"},
                          {10, 10000000, DType::kFloat64, NormKind::kL2, "l2"},
                          {1000000, 100, DType::kFloat32, NormKind::kSum, "sum"},
                          {10000000, 10, DType::kFloat32, NormKind::kL1, "l1"}};
  // Every row length from 1e3 to 1e6, 1e8 elements in all (float64: 5e7); the short
  // rows where lane groups and tiles trade places (64 .. 512 columns); and 5e4 and 4e5,
  // the TMA clusters' 2 and 16 blocks a row (float32).
  for (int64_t cols : {int64_t{64}, int64_t{128}, int64_t{256}, int64_t{512}, int64_t{1000}, int64_t{10000},
                       int64_t{50000}, int64_t{100000}, int64_t{400000}, int64_t{1000000}}) {
    cases.push_back({100000000 / cols, cols, DType::kFloat32, NormKind::kSum, "sum"});
    cases.push_back({50000000 / cols, cols, DType::kFloat64, NormKind::kL2, "l2"});
  }
  if (quick) cases.resize(1);
  if (!g_normalize_cases.empty()) cases = g_normalize_cases;
  for (const C& c : cases) {
    auto in = b.Alloc(c.dt, {c.rows, c.cols}, 0.5, 1.5, 31);
    auto out = b.Alloc(c.dt, {c.rows, c.cols}, 0, 1, 32);
    const std::string size = absl::StrCat(c.rows, "x", c.cols);
    const double bytes = static_cast<double>(in->bytes() + out->bytes());
    Time(absl::StrCat("normalize ", c.name), Short(c.dt), size, bytes, 0, [&] {
      OpContext ctx;
      CHECK_OK(b.backend->Normalize(*in, c.k, *out, ctx));
      return OpMs(ctx);
    });
  }
}

void LombScargle(Bench& b, bool quick) {
  std::printf("\n== lomb-scargle\n");
  const int64_t n = 1024, m = quick ? (1 << 17) : (1 << 20);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    auto x = b.Alloc(dt, {n}, 0, 1000, 41);
    auto y = b.Alloc(dt, {n}, -1, 1, 42);
    auto out = b.Alloc(dt, {m}, 0, 1, 43);
    const std::string t = Short(dt);
    const std::string size = absl::StrCat("N=", n, " M=", m);
    for (bool fm : {true, false}) {
      Time(fm ? "lombscargle fm" : "lombscargle", t, size, 0, static_cast<double>(n) * m, [&] {
        OpContext ctx;
        CHECK_OK(b.backend->LombScargle(*x, *y, nullptr, nullptr, Linspace{0.01, 10.0, m},
                                        LombScargleOptions{false, false, fm, LombScargleMethod::kDirect}, *out, ctx));
        return OpMs(ctx);
      });
    }
    {  // a mid-size grid, where float32 switches to 4 frequencies per thread
      const int64_t m2 = 1 << 16;
      auto out2 = b.Alloc(dt, {m2}, 0, 1, 44);
      Time("lombscargle fm", t, absl::StrCat("N=", n, " M=", m2), 0, static_cast<double>(n) * m2, [&] {
        OpContext ctx;
        CHECK_OK(b.backend->LombScargle(*x, *y, nullptr, nullptr, Linspace{0.01, 10.0, m2},
                                        LombScargleOptions{false, false, true, LombScargleMethod::kDirect}, *out2, ctx));
        return OpMs(ctx);
      });
    }
  }
  // The direct case of 10,000 samples x 1e6 explicit frequencies, without weights and
  // with them.
  const int64_t big_n = 10000, big_m = quick ? 100000 : 1000000;
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    auto x = b.Alloc(dt, {big_n}, 0, 1000, 51);
    auto y = b.Alloc(dt, {big_n}, -1, 1, 52);
    auto w = b.Alloc(dt, {big_n}, 0.1, 2, 53);
    auto freqs = b.Alloc(dt, {big_m}, 0.01, 10, 54);
    auto out = b.Alloc(dt, {big_m}, 0, 1, 55);
    for (bool weighted : {false, true}) {
      Time(weighted ? "lombscargle explicit w" : "lombscargle explicit", Short(dt),
           absl::StrCat("N=", big_n, " M=", big_m), 0, static_cast<double>(big_n) * big_m, [&] {
             OpContext ctx;
             CHECK_OK(b.backend->LombScargle(*x, *y, weighted ? w.get() : nullptr, freqs.get(), Linspace{},
                                             LombScargleOptions{false, false, false, LombScargleMethod::kDirect},
                                             *out, ctx));
             return OpMs(ctx);
           });
    }
  }
}

void PrintTable(FILE* f, bool csv) {
  if (csv) {
    std::fprintf(f, "op,dtype,size,median_ms,wall_ms,spread,bytes,GBps,ratio_to_d2d,pairs_per_s,ceiling,ratio_to_ceiling,"
                 "ratio_to_same_size_ceiling\n");
  } else {
    std::fprintf(f, "\n%-24s %-4s %-20s %10s %10s %10s %9s %7s %12s %8s %12s\n", "op", "type", "size", "median ms",
                 "wall ms", "MB counted", "GB/s", "x D2D", "Gpairs/s", "x ceil", "x same size");
  }
  for (const Row& r : g_rows) {
    const double gbs = r.bytes > 0 ? r.bytes / (r.ms * 1e6) : 0;
    const double ratio = g_d2d_gbs > 0 && r.bytes > 0 ? gbs / g_d2d_gbs : 0;
    const double pairs = r.work > 0 ? r.work / (r.ms * 1e-3) : 0;
    // The ceiling of the row: write-only (memset) for rows that only write, else D2D.
    const double ceiling = r.write_only ? g_write_gbs : g_d2d_gbs;
    const double of_ceiling = ceiling > 0 && r.bytes > 0 ? gbs / ceiling : 0;
    const char* ceiling_name = r.bytes == 0 ? "-" : r.write_only ? "write" : "d2d";
    const double of_same_size = r.same_size_gbs > 0 ? gbs / r.same_size_gbs : 0;
    if (csv) {  // sizes such as (100,4000,5) would split the column
      std::string size = r.size;
      std::replace(size.begin(), size.end(), ',', 'x');
      std::fprintf(f, "%s,%s,%s,%.5f,%.5f,%.4f,%.0f,%.1f,%.3f,%.4g,%s,%.3f,%.3f\n", r.op.c_str(), r.dtype.c_str(),
                   size.c_str(), r.ms, r.wall_ms, r.spread, r.bytes, gbs, ratio, pairs, ceiling_name, of_ceiling,
                   of_same_size);
    } else {
      std::fprintf(f, "%-24s %-4s %-20s %10.4f %10.3f %10.1f %9.0f %7.2f %12.1f %5.2f %-5s %6.2f\n", r.op.c_str(),
                   r.dtype.c_str(), r.size.c_str(), r.ms, r.wall_ms, r.bytes / 1e6, gbs, ratio, pairs / 1e9,
                   of_ceiling, ceiling_name, of_same_size);
    }
  }
}

int Main(int argc, char** argv) {
  std::string csv;
  std::string only;  // run only the sections whose name contains this
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) csv = argv[++i];
    else if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strncmp(argv[i], "--only=", 7) == 0) only = argv[i] + 7;
    else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) g_reps = std::max(5, std::atoi(argv[++i]));
    else if (std::strncmp(argv[i], "--normalize_cases=", 18) == 0) g_normalize_cases = ParseNormalizeCases(argv[i] + 18);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: nothing to time\n");
    return 0;
  }
  Bench b;
  absl::StatusOr<std::unique_ptr<Backend>> be = CreateCudaBackend(BackendOptions{});
  CHECK_OK(be.status());
  b.backend = *std::move(be);
  b.device = b.backend->PickDevice();
  const cuda::ScopedDevice on_device(b.device);  // for the benchmark's own streams and copies
  CHECK_CUDA(on_device.error());
  CHECK_CUDA(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaDeviceGetDefaultMemPool(&b.pool, b.device));
  uint64_t keep = UINT64_MAX;
  CHECK_CUDA(cudaMemPoolSetAttribute(b.pool, cudaMemPoolAttrReleaseThreshold, &keep));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, b.device));
  b.sm_count = prop.multiProcessorCount;
  int clock_khz = 0, mem_clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, b.device);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, b.device);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, b.device);
  std::printf("device %d: %s, cc %d.%d, %d SMs, %.1f GiB, L2 %d MiB, SM clock %.2f GHz, "
              "memory %.2f GHz x %d bits (datasheet %.0f GB/s)\n",
              b.device, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              prop.totalGlobalMem / double(1 << 30), prop.l2CacheSize >> 20, clock_khz / 1e6,
              mem_clock_khz / 1e6, bus_bits, 2.0 * mem_clock_khz * 1e3 * bus_bits / 8 / 1e9);
  const BackendStats st = b.backend->Stats();
  std::printf("backend warm-up: %d kernels loaded and run, %.1f ms\n", st.kernels_loaded,
              absl::ToDoubleMilliseconds(st.warmup_time));
  Ceilings(b);
  const size_t first_kernel_row = g_rows.size();
  const auto wanted = [&](std::string_view section) { return section.find(only) != std::string_view::npos; };
  if (wanted("discount")) Discount(b, quick);
  if (wanted("haversine")) Haversine(b, quick);
  if (wanted("normalize")) Normalize(b, quick);
  if (wanted("lombscargle")) LombScargle(b, quick);
  SameSizeCeilings(b, first_kernel_row);
  std::printf("\nD2D ceiling %.0f GB/s; 'x D2D' = achieved / ceiling for memory-bound rows\n", g_d2d_gbs);
  PrintTable(stdout, false);
  if (!csv.empty()) {
    if (FILE* f = std::fopen(csv.c_str(), "w")) {
      PrintTable(f, true);
      std::fclose(f);
    }
  }
  cudaStreamDestroy(b.stream);
  return 0;
}

}  // namespace
}  // namespace gpucompute

int main(int argc, char** argv) { return gpucompute::Main(argc, argv); }
