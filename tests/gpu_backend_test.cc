// What only the CUDA backend has, against the CPU backend on fresh random inputs
// with poisoned (NaN) outputs: start-up and warm-up, pinned copies, sizes up to
// 1e8 elements, kernel paths (tiny norms), two threads, the memory pool, several
// GPUs, out of memory and a sticky device error. Every operation's conformance to
// the float64 references runs in tests/backend_conformance_test.cc (its cuda_*
// instances). Skips without a GPU. Test names carry their size class: *Small* cases
// finish in seconds (and under compute-sanitizer), *Large* cases go up to 1e8 elements.
//
// References: discount products must match bit for bit; haversine, normalize and
// float64 Lomb-Scargle match the CPU (which computes in float64) to rounding; float32
// Lomb-Scargle accumulates in float32 on the GPU and is held to 1e-4 (norm-relative).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/dtype.h"
#include "tests/testing/arrays.h"
#include "tests/testing/device_launch.h"
#include "tests/testing/gpu_present.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using test::Cpu;
using test::ElementCount;
using test::ExpectRelativeL2;
using test::FreshSeed;
using test::Poisoned;
using test::Put;
using test::Read;
using test::ToDoubles;
using test::Uniform;

using test::GpuPresent;

Backend* Gpu() {
  static std::unique_ptr<Backend> backend = [] {
    std::unique_ptr<Backend> b;
    if (!GpuPresent()) return b;
    absl::StatusOr<std::unique_ptr<Backend>> made = CreateCudaBackend(BackendOptions{});
    if (!made.ok()) {
      std::fprintf(stderr, "CreateCudaBackend failed: %s\n", made.status().ToString().c_str());
      return b;
    }
    return *std::move(made);
  }();
  return backend.get();
}

// REQUIRE_GPU, and the CUDA backend started where a GPU is present.
#define REQUIRE_GPU_BACKEND()                                                           \
  do {                                                                                  \
    REQUIRE_GPU();                                                                      \
    ASSERT_NE(Gpu(), nullptr) << "a GPU is present but the CUDA backend did not start"; \
  } while (0)

DType DTypeOf(bool f64) { return f64 ? DType::kFloat64 : DType::kFloat32; }

// ---- start-up -----------------------------------------------------------------------------------
TEST(GpuBackendSmall, WarmAtConstruction) {
  REQUIRE_GPU_BACKEND();
  Backend& g = *Gpu();
  EXPECT_EQ(g.name(), "cuda");
  EXPECT_FALSE(g.arrays_on_host());
  EXPECT_TRUE(g.Healthy());
  const std::vector<DeviceDescription> devices = g.Devices();
  ASSERT_FALSE(devices.empty());
  for (const DeviceDescription& d : devices) {
    EXPECT_EQ(d.name.rfind("cuda:", 0), 0u) << d.name;
    EXPECT_TRUE(d.healthy);
    EXPECT_GT(d.memory_bytes, 0u);
    std::printf("device %s: %s\n", d.name.c_str(), d.description.c_str());
  }
  const BackendStats stats = g.Stats();
  EXPECT_GT(stats.kernels_loaded, 40);
  EXPECT_GT(stats.warmup_time, absl::ZeroDuration());
  EXPECT_GT(stats.pinned_staging_bytes, 0u);
  ASSERT_EQ(stats.devices.size(), devices.size());
  std::printf("kernels loaded %d, warm-up %s, pinned staging %llu bytes\n", stats.kernels_loaded,
              absl::FormatDuration(stats.warmup_time).c_str(),
              static_cast<unsigned long long>(stats.pinned_staging_bytes));
  const int picked = g.PickDevice();
  bool listed = false;
  for (const DeviceDescription& d : devices) listed |= d.name == absl::StrCat("cuda:", picked);
  EXPECT_TRUE(listed) << picked;
}

TEST(GpuBackendSmall, NoDeviceListedTwiceOrMissing) {
  REQUIRE_GPU_BACKEND();
  BackendOptions o;
  o.cuda_devices = {9999};
  EXPECT_EQ(CreateCudaBackend(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GpuBackendSmall, CopiesFromPinnedHostMemory) {
  REQUIRE_GPU_BACKEND();
  Backend& g = *Gpu();
  const size_t bytes = (20u << 20) + 3;
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, bytes, cudaHostAllocPortable), cudaSuccess);
  std::vector<unsigned char> src = Uniform<unsigned char>(static_cast<int64_t>(bytes), 0, 255.99, FreshSeed());
  std::memcpy(pinned, src.data(), bytes);
  absl::StatusOr<std::shared_ptr<Array>> a = g.Allocate(DType::kFloat32, {static_cast<int64_t>(bytes / 4 + 1)}, g.PickDevice());
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(g.CopyToArray(pinned, 0, bytes, **a).ok());
  std::memset(pinned, 0, bytes);
  ASSERT_TRUE(g.CopyFromArray(**a, 0, bytes, pinned).ok());
  EXPECT_EQ(0, std::memcmp(pinned, src.data(), bytes));
  cudaFreeHost(pinned);
}

// ---- discount product -------------------------------------------------------------------------------
struct DiscountCase {
  Shape factors, values;
};

void CheckDiscount(const DiscountCase& c, bool f64) {
  SCOPED_TRACE(absl::StrCat(ShapeToString(c.factors), " x ", ShapeToString(c.values), f64 ? " f64" : " f32"));
  const DType dt = DTypeOf(f64);
  const uint64_t seed = FreshSeed();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const std::vector<T> a = Uniform<T>(ElementCount(c.factors), 0.5, 1.5, seed);
    const std::vector<T> b = Uniform<T>(ElementCount(c.values), -2.0, 2.0, seed + 1);
    Shape out_shape;
    {
      const size_t rank = std::max(c.factors.size(), c.values.size());
      out_shape.resize(rank);
      for (size_t i = 0; i < rank; ++i) {
        const int64_t da = i < c.factors.size() ? c.factors[c.factors.size() - 1 - i] : 1;
        const int64_t db = i < c.values.size() ? c.values[c.values.size() - 1 - i] : 1;
        out_shape[rank - 1 - i] = da == 1 ? db : da;
      }
    }
    OpContext gctx, cctx;
    auto ga = Put(*Gpu(), c.factors, a), gb = Put(*Gpu(), c.values, b);
    auto go = Poisoned(*Gpu(), dt, out_shape);
    ASSERT_TRUE(Gpu()->DiscountProduct(*ga, *gb, *go, gctx).ok());
    auto ca = Put(*Cpu(), c.factors, a), cb = Put(*Cpu(), c.values, b);
    auto co = Poisoned(*Cpu(), dt, out_shape);
    ASSERT_TRUE(Cpu()->DiscountProduct(*ca, *cb, *co, cctx).ok());
    const std::vector<T> got = Read<T>(*Gpu(), *go), ref = Read<T>(*Cpu(), *co);
    ASSERT_EQ(got.size(), ref.size());
    int64_t mismatches = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::memcmp(&got[i], &ref[i], sizeof(T)) != 0) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++mismatches;
      }
    }
    EXPECT_EQ(mismatches, 0) << "first at " << first;
    if (ElementCount(out_shape) > 0) EXPECT_GT(gctx.compute_time, absl::ZeroDuration());
  };
  if (f64) run(double{}); else run(float{});
  (void)dt;
}

TEST(GpuBackendLarge, DiscountProduct1e8) {
  REQUIRE_GPU_BACKEND();
  CheckDiscount({{1000000, 5}, {20, 1000000, 5}}, false);  // 1e8 elements, the seed's layout
  CheckDiscount({{1, 333333}, {151, 333333}}, true);       // ~5e7, odd row length
  CheckDiscount({{2000001, 1}, {2000001, 7}}, false);      // column broadcast, general path
}

// ---- haversine ----------------------------------------------------------------------------------------
struct MeshCase {
  LatLonMesh mesh;
  std::vector<GeoPoint> refs;
};

void CheckMesh(const MeshCase& c, bool f64) {
  SCOPED_TRACE(absl::StrCat(c.refs.size(), " refs, ", c.mesh.lat.count, " x ", c.mesh.lon.count, f64 ? " f64" : " f32"));
  const Shape shape = {static_cast<int64_t>(c.refs.size()), c.mesh.lat.count, c.mesh.lon.count};
  OpContext gctx, cctx;
  auto go = Poisoned(*Gpu(), DTypeOf(f64), shape);
  ASSERT_TRUE(Gpu()->HaversineMesh(c.mesh, c.refs, kDefaultEarthRadiusKm, *go, gctx).ok());
  auto co = Poisoned(*Cpu(), DType::kFloat64, shape);  // float64 reference for both dtypes
  ASSERT_TRUE(Cpu()->HaversineMesh(c.mesh, c.refs, kDefaultEarthRadiusKm, *co, cctx).ok());
  const std::vector<double> ref = Read<double>(*Cpu(), *co);
  if (f64) {
    ExpectRelativeL2(ToDoubles(Read<double>(*Gpu(), *go)), ToDoubles(ref), 1e-12);
  } else {
    ExpectRelativeL2(ToDoubles(Read<float>(*Gpu(), *go)), ToDoubles(ref), 2e-6);
  }
}

std::vector<GeoPoint> RandomRefs(int n, uint64_t seed) {
  const std::vector<double> la = Uniform<double>(n, -80, 80, seed), lo = Uniform<double>(n, -179, 179, seed + 1);
  std::vector<GeoPoint> refs(n);
  for (int i = 0; i < n; ++i) refs[i] = {la[i], lo[i]};
  return refs;
}

TEST(GpuBackendLarge, HaversineMesh1e8) {
  REQUIRE_GPU_BACKEND();
  CheckMesh({{{29, 31, 10000}, {99, 101, 10000}}, {{30, 101}}}, false);
  CheckMesh({{{-50, 50, 9999}, {-120, 120, 10001}}, {{1, 2}}}, true);
}

void CheckPoints(const Shape& shape, int n_ref, bool f64) {
  SCOPED_TRACE(absl::StrCat(ShapeToString(shape), " x ", n_ref, " refs", f64 ? " f64" : " f32"));
  const uint64_t seed = FreshSeed();
  const int64_t n = ElementCount(shape);
  const std::vector<GeoPoint> refs = RandomRefs(n_ref, seed + 5);
  Shape out_shape = {n_ref};
  out_shape.insert(out_shape.end(), shape.begin(), shape.end());
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const std::vector<T> lat = Uniform<T>(n, -89, 89, seed), lon = Uniform<T>(n, -180, 180, seed + 1);
    // The reference gets the same (rounded) inputs in float64.
    const std::vector<double> lat64(lat.begin(), lat.end()), lon64(lon.begin(), lon.end());
    OpContext gctx, cctx;
    auto gla = Put(*Gpu(), shape, lat), glo = Put(*Gpu(), shape, lon);
    auto go = Poisoned(*Gpu(), DTypeOf(f64), out_shape);
    ASSERT_TRUE(Gpu()->HaversinePoints(*gla, *glo, refs, kDefaultEarthRadiusKm, *go, gctx).ok());
    auto cla = Put(*Cpu(), shape, lat64), clo = Put(*Cpu(), shape, lon64);
    auto co = Poisoned(*Cpu(), DType::kFloat64, out_shape);
    ASSERT_TRUE(Cpu()->HaversinePoints(*cla, *clo, refs, kDefaultEarthRadiusKm, *co, cctx).ok());
    ExpectRelativeL2(ToDoubles(Read<T>(*Gpu(), *go)), ToDoubles(Read<double>(*Cpu(), *co)), f64 ? 1e-12 : 1e-5);
  };
  if (f64) run(double{}); else run(float{});
}

TEST(GpuBackendLarge, HaversinePoints1e8) {
  REQUIRE_GPU_BACKEND();
  CheckPoints({10000000}, 10, false);
  CheckPoints({999, 1001}, 7, true);
}

// ---- normalize --------------------------------------------------------------------------------------------
void CheckNormalize(const Shape& shape, NormKind norm, bool f64) {
  SCOPED_TRACE(absl::StrCat(ShapeToString(shape), " norm ", static_cast<int>(norm), f64 ? " f64" : " f32"));
  const uint64_t seed = FreshSeed();
  const int64_t n = ElementCount(shape);
  const double lo = norm == NormKind::kSum ? 0.5 : -1.0, hi = norm == NormKind::kSum ? 1.5 : 1.0;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const std::vector<T> x = Uniform<T>(n, lo, hi, seed);
    OpContext gctx, cctx;
    auto gi = Put(*Gpu(), shape, x);
    auto go = Poisoned(*Gpu(), DTypeOf(f64), shape);
    absl::Status gs = Gpu()->Normalize(*gi, norm, *go, gctx);
    ASSERT_TRUE(gs.ok()) << gs;
    auto ci = Put(*Cpu(), shape, x);
    auto co = Poisoned(*Cpu(), DTypeOf(f64), shape);
    ASSERT_TRUE(Cpu()->Normalize(*ci, norm, *co, cctx).ok());
    ExpectRelativeL2(ToDoubles(Read<T>(*Gpu(), *go)), ToDoubles(Read<T>(*Cpu(), *co)), f64 ? 1e-14 : 1e-6);
  };
  if (f64) run(double{}); else run(float{});
}

TEST(GpuBackendLarge, Normalize1e8) {
  REQUIRE_GPU_BACKEND();
  CheckNormalize({10, 10000000}, NormKind::kSum, false);  // the seed: 10 x 10M float32
  CheckNormalize({10, 10000000}, NormKind::kL2, true);
  CheckNormalize({1000001, 33}, NormKind::kMaxAbs, false);
}

// Rows whose norm has no finite reciprocal in the dtype (subnormal in float64, below
// ~2.9e-39 in float32) are divided, not multiplied by inf: the fuzzer's CPU find
// (tests/fuzz/regressions/normalize_tiny_norm_inf) on every GPU path.
template <typename T>
void CheckTinyNorms(int64_t cols) {
  SCOPED_TRACE(absl::StrCat("cols ", cols, std::is_same_v<T, double> ? " f64" : " f32"));
  // Small multiples of the smallest subnormal of T, every odd element 0: even a
  // 20001-column row's norm stays below 1 / max(T).
  const double unit = std::is_same_v<T, double> ? 4.9406564584124654e-324 : 1.4012984643e-45;
  const Shape shape = {3, cols};
  std::vector<T> x(static_cast<size_t>(3 * cols));
  for (int64_t i = 0; i < 3 * cols; ++i) {
    x[i] = static_cast<T>(i % 2 == 1 ? 0.0 : unit * static_cast<double>(1 + (i / 2) % 7));
  }
  for (NormKind k : {NormKind::kSum, NormKind::kL1, NormKind::kL2, NormKind::kMaxAbs}) {
    SCOPED_TRACE(absl::StrCat("norm ", static_cast<int>(k)));
    OpContext gctx, cctx;
    auto go = Poisoned(*Gpu(), DTypeOf(std::is_same_v<T, double>), shape);
    auto co = Poisoned(*Cpu(), DTypeOf(std::is_same_v<T, double>), shape);
    const absl::Status gs = Gpu()->Normalize(*Put(*Gpu(), shape, x), k, *go, gctx);
    const absl::Status cs = Cpu()->Normalize(*Put(*Cpu(), shape, x), k, *co, cctx);
    // float64 L2: the squares underflow to 0, a zero norm for both backends.
    ASSERT_EQ(gs.code(), cs.code()) << gs << " vs " << cs;
    if (!cs.ok()) continue;
    const std::vector<T> got = Read<T>(*Gpu(), *go);
    for (T v : got) ASSERT_TRUE(std::isfinite(v)) << "normalized a tiny-norm row to " << v;
    const double tolerance = std::is_same_v<T, double> ? 1e-14 : 1e-6;
    ExpectRelativeL2(ToDoubles(got), ToDoubles(Read<T>(*Cpu(), *co)), tolerance);
  }
}

TEST(GpuBackendSmall, NormalizeDividesWhenTheReciprocalOverflows) {
  REQUIRE_GPU_BACKEND();
  for (int64_t cols : {2, 9, 100, 1000, 20001}) {  // lane groups, warps (1 and 2 reads), chunks
    CheckTinyNorms<float>(cols);
    CheckTinyNorms<double>(cols);
  }
}

// ---- Lomb-Scargle --------------------------------------------------------------------------------------------
struct LsCase {
  int64_t batch, n, m;
  bool x_batched;
  int weights;  // 0 none, 1 (N), 2 (B, N)
  bool grid;
  LombScargleOptions opt;
};

void CheckLs(const LsCase& c, bool f64) {
  SCOPED_TRACE(absl::StrCat("B ", c.batch, " N ", c.n, " M ", c.m, " xb ", c.x_batched, " w ", c.weights,
                            " grid ", c.grid, " pre ", c.opt.precenter, " norm ", c.opt.normalize,
                            " fm ", c.opt.floating_mean, f64 ? " f64" : " f32"));
  const uint64_t seed = FreshSeed();
  const Shape y_shape = c.batch > 1 ? Shape{c.batch, c.n} : Shape{c.n};
  const Shape x_shape = c.x_batched ? y_shape : Shape{c.n};
  const Shape w_shape = c.weights == 2 ? y_shape : Shape{c.n};
  const Linspace grid{0.01, 10.0, c.m};
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const std::vector<double> x = Uniform<double>(ElementCount(x_shape), 0.0, 1000.0, seed);
    std::vector<double> y(ElementCount(y_shape));
    const std::vector<double> noise = Uniform<double>(ElementCount(y_shape), -0.5, 0.5, seed + 1);
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t i = 0; i < c.n; ++i) {
        const double xi = x[(c.x_batched ? b * c.n : 0) + i];
        y[b * c.n + i] = 2.0 * std::sin((1.0 + 0.5 * b) * xi) + 0.7 + noise[b * c.n + i];
      }
    }
    const std::vector<double> w = Uniform<double>(ElementCount(w_shape), 0.1, 2.0, seed + 2);
    const std::vector<double> f = Uniform<double>(c.m, 0.01, 10.0, seed + 3);
    // Inputs rounded to T once; the CPU reference sees the same values.
    const std::vector<T> xt(x.begin(), x.end()), yt(y.begin(), y.end()), wt(w.begin(), w.end()), ft(f.begin(), f.end());
    const Shape out_shape = c.batch > 1 ? Shape{c.batch, c.m} : Shape{c.m};
    auto do_run = [&](Backend& be, DType dt) -> std::shared_ptr<Array> {
      auto ax = Put(be, x_shape, xt), ay = Put(be, y_shape, yt);
      std::shared_ptr<Array> aw = c.weights ? Put(be, w_shape, wt) : nullptr;
      std::shared_ptr<Array> af = c.grid ? nullptr : Put(be, {c.m}, ft);
      auto out = Poisoned(be, dt, out_shape);
      OpContext ctx;
      absl::Status s = be.LombScargle(*ax, *ay, aw.get(), af.get(), grid, c.opt, *out, ctx);
      EXPECT_TRUE(s.ok()) << be.name() << ": " << s;
      return out;
    };
    auto go = do_run(*Gpu(), DTypeOf(f64));
    auto co = do_run(*Cpu(), DTypeOf(f64));  // the CPU computes in float64 for both dtypes
    ExpectRelativeL2(ToDoubles(Read<T>(*Gpu(), *go)), ToDoubles(Read<T>(*Cpu(), *co)), f64 ? 1e-9 : 1e-4);
  };
  if (f64) run(double{}); else run(float{});
}

TEST(GpuBackendLarge, LombScargleSeedSize) {
  REQUIRE_GPU_BACKEND();
  const LombScargleOptions fm{false, false, true};
  CheckLs({1, 1024, 1 << 20, false, 0, true, fm}, false);
  CheckLs({1, 1024, 1 << 20, false, 0, true, fm}, true);
  CheckLs({2, 1000, 300001, false, 2, false, LombScargleOptions{false, true, true}}, false);
}

// ---- cancellation, concurrency, memory ------------------------------------------------------------------------
TEST(GpuBackendSmall, ConcurrentCallsFromTwoThreads) {
  REQUIRE_GPU_BACKEND();
  Backend& g = *Gpu();
  constexpr int kIterations = 25;
  std::atomic<int> failures{0};
  auto worker = [&](int id) {
    const uint64_t seed = FreshSeed();
    const std::vector<double> a = Uniform<double>(4000 * 5, 0.5, 1.5, seed);
    const std::vector<double> b = Uniform<double>(37 * 4000 * 5, -1, 1, seed + 1);
    const std::vector<float> rows = Uniform<float>(33 * 50001, 0.5, 1.5, seed + 2);
    OpContext c1, c2;
    auto ref_prod = Poisoned(*Cpu(), DType::kFloat64, {37, 4000, 5});
    EXPECT_TRUE(Cpu()->DiscountProduct(*Put(*Cpu(), {4000, 5}, a), *Put(*Cpu(), {37, 4000, 5}, b), *ref_prod, c1).ok());
    auto ref_norm = Poisoned(*Cpu(), DType::kFloat32, {33, 50001});
    EXPECT_TRUE(Cpu()->Normalize(*Put(*Cpu(), {33, 50001}, rows), NormKind::kL2, *ref_norm, c2).ok());
    const std::vector<double> want_prod = Read<double>(*Cpu(), *ref_prod);
    const std::vector<float> want_norm = Read<float>(*Cpu(), *ref_norm);
    auto ga = Put(g, {4000, 5}, a), gb = Put(g, {37, 4000, 5}, b);
    auto gr = Put(g, {33, 50001}, rows);
    for (int it = 0; it < kIterations; ++it) {
      OpContext ctx;
      auto out = Poisoned(g, DType::kFloat64, {37, 4000, 5});
      auto nout = Poisoned(g, DType::kFloat32, {33, 50001});
      if (!g.DiscountProduct(*ga, *gb, *out, ctx).ok() || !g.Normalize(*gr, NormKind::kL2, *nout, ctx).ok()) {
        ++failures;
        continue;
      }
      if (Read<double>(g, *out) != want_prod) ++failures;
      const test::Diff d = test::Compare(ToDoubles(Read<float>(g, *nout)), ToDoubles(want_norm));
      if (d.bad != 0 || d.rel > 1e-6) ++failures;
    }
    (void)id;
  };
  std::thread t1(worker, 1), t2(worker, 2);
  t1.join();
  t2.join();
  EXPECT_EQ(failures.load(), 0);
  for (const DeviceMemoryStats& d : g.Stats().devices) EXPECT_EQ(d.queued_ops, 0u);
}

uint64_t UsedBytes(Backend& g) {
  uint64_t used = 0;
  for (const DeviceMemoryStats& d : g.Stats().devices) used += d.pool_used_bytes;
  return used;
}

TEST(GpuBackendSmall, PoolReturnsToBaselineAfterArraysDrop) {
  REQUIRE_GPU_BACKEND();
  Backend& g = *Gpu();
  const uint64_t baseline = UsedBytes(g);
  {
    std::vector<std::shared_ptr<Array>> arrays;
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<std::shared_ptr<Array>> a = g.Allocate(DType::kFloat32, {16 << 20}, g.PickDevice());
      ASSERT_TRUE(a.ok()) << a.status();
      arrays.push_back(*a);
    }
    EXPECT_GE(UsedBytes(g), baseline + 3 * (64ull << 20));
    // Dropped from another thread: freeing must work from any thread.
    std::thread([moved = std::move(arrays)]() mutable { moved.clear(); }).join();
  }
  uint64_t used = UsedBytes(g);
  for (int i = 0; i < 200 && used > baseline; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    used = UsedBytes(g);
  }
  EXPECT_EQ(used, baseline);
  const BackendStats s = g.Stats();
  for (const DeviceMemoryStats& d : s.devices) EXPECT_GE(d.pool_reserved_bytes, d.pool_used_bytes);
}

TEST(GpuBackendSmall, HostArraysAreRejected) {
  REQUIRE_GPU_BACKEND();
  const std::vector<float> v = {1, 2, 3};
  auto host = Put(*Cpu(), {3}, v);
  auto dev = Poisoned(*Gpu(), DType::kFloat32, {3});
  OpContext ctx;
  EXPECT_EQ(Gpu()->DiscountProduct(*host, *dev, *dev, ctx).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Gpu()->Normalize(*host, NormKind::kSum, *dev, ctx).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GpuBackendSmall, OperandsOnTwoDevicesFailNamingThem) {
  REQUIRE_GPU_BACKEND();
  const std::vector<DeviceDescription> devices = Gpu()->Devices();
  if (devices.size() < 2) GTEST_SKIP() << "one GPU";
  const int d0 = std::stoi(devices[0].name.substr(5)), d1 = std::stoi(devices[1].name.substr(5));
  auto a = Gpu()->Allocate(DType::kFloat32, {8}, d0);
  auto b = Gpu()->Allocate(DType::kFloat32, {8}, d1);
  ASSERT_TRUE(a.ok() && b.ok());
  OpContext ctx;
  const absl::Status s = Gpu()->DiscountProduct(**a, **b, **a, ctx);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("values"), absl::string_view::npos) << s;
}

TEST(GpuBackendLarge, OutOfMemoryIsResourceExhaustedAndRecoverable) {
  REQUIRE_GPU_BACKEND();
  Backend& g = *Gpu();
  const int device = g.PickDevice();
  EXPECT_EQ(g.Allocate(DType::kFloat64, {int64_t{1} << 42}, device).status().code(),
            absl::StatusCode::kResourceExhausted);
  std::vector<std::shared_ptr<Array>> hog;
  absl::Status last;
  for (int i = 0; i < 64; ++i) {  // 4 GiB at a time until the device is full
    absl::StatusOr<std::shared_ptr<Array>> a = g.Allocate(DType::kFloat32, {int64_t{1} << 30}, device);
    if (!a.ok()) {
      last = a.status();
      break;
    }
    hog.push_back(*a);
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  hog.clear();
  EXPECT_TRUE(g.Healthy());
  CheckNormalize({3, 5}, NormKind::kL1, true);
}

// A sticky error (an illegal address) marks the device unhealthy instead of
// exiting; run in a fresh process (death-test child) because it ruins the context.
class WildArray final : public Array {
 public:
  WildArray(int device) : Array(DType::kFloat32, {1 << 20}, 1 << 20, device) {}
  void* data() override { return reinterpret_cast<void*>(uintptr_t{0x1000}); }
};

TEST(GpuBackendDeathTest, StickyErrorMarksDeviceUnhealthy) {
  REQUIRE_GPU_BACKEND();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        absl::StatusOr<std::unique_ptr<Backend>> b = CreateCudaBackend(BackendOptions{});
        if (!b.ok()) std::exit(2);
        Backend& g = **b;
        const int device = g.PickDevice();
        WildArray in(device);
        absl::StatusOr<std::shared_ptr<Array>> out = g.Allocate(DType::kFloat32, {1 << 20}, device);
        if (!out.ok()) std::exit(3);
        OpContext ctx;
        const absl::Status s = g.Normalize(in, NormKind::kSum, **out, ctx);
        if (s.ok()) std::exit(4);
        bool marked = false;
        for (const DeviceDescription& d : g.Devices()) {
          if (d.name == absl::StrCat("cuda:", device)) marked = !d.healthy;
        }
        if (!marked) std::exit(5);
        if (g.Devices().size() == 1 && g.Healthy()) std::exit(6);
        const absl::Status again = g.Normalize(**out, NormKind::kSum, **out, ctx);
        if (again.code() != absl::StatusCode::kUnavailable) std::exit(7);
        std::fprintf(stderr, "sticky error handled: %s / %s\n", s.ToString().c_str(), again.ToString().c_str());
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gpucompute
