// The CUDA backend against the CPU backend, on fresh random inputs every run, with
// poisoned (NaN) outputs so that an element the GPU never wrote fails the check.
// Skips without a GPU. Test names carry their size class: *Small* cases finish in
// seconds (and under compute-sanitizer), *Large* cases go up to 1e8 elements.
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
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/dtype.h"

namespace gpucompute {
namespace {

bool GpuPresent() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
}

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

Backend* Cpu() {
  static std::unique_ptr<Backend> backend = CreateCpuBackend(0);
  return backend.get();
}

// Set by bench/run_gpu.sh under compute-sanitizer: trims the largest small cases.
bool Sanitized() { return std::getenv("GPUCOMPUTE_SANITIZER") != nullptr; }

#define REQUIRE_GPU()                                              \
  do {                                                             \
    if (!GpuPresent()) GTEST_SKIP() << "no CUDA device present";   \
    ASSERT_NE(Gpu(), nullptr) << "a GPU is present but the CUDA backend did not start"; \
  } while (0)

// ---- random host data ---------------------------------------------------------------------
uint64_t FreshSeed() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t base = std::random_device{}() ^
                               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return base + 0x9e3779b97f4a7c15ull * (++counter);
}

inline uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename F>
void ParallelFor(int64_t n, F f) {
  const int threads = static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  if (n < (1 << 16) || threads == 1) {
    f(0, n);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int64_t b = t * per, e = std::min(n, b + per);
    if (b < e) pool.emplace_back([=] { f(b, e); });
  }
  for (auto& t : pool) t.join();
}

template <typename T>
std::vector<T> Uniform(int64_t n, double lo, double hi, uint64_t seed) {
  std::vector<T> v(static_cast<size_t>(n));
  ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const double u = static_cast<double>(Mix(seed ^ (static_cast<uint64_t>(i) * 0xd1342543de82ef95ull)) >> 11) * 0x1.0p-53;
      v[i] = static_cast<T>(lo + (hi - lo) * u);
    }
  });
  return v;
}

int64_t Count(const Shape& s) {
  int64_t n = 1;
  for (int64_t e : s) n *= e;
  return n;
}

// ---- arrays -----------------------------------------------------------------------------------
// The device every array of one test lives on, as the server places all operands
// of an operation on one device: the first listed ("cpu" or "cuda:N").
int HomeDevice(const Backend& b) {
  const std::string name = b.Devices().front().name;
  return name.rfind("cuda:", 0) == 0 ? std::stoi(name.substr(5)) : kHostDevice;
}

std::shared_ptr<Array> Make(Backend& b, DType dtype, const Shape& shape, const void* host) {
  const int device = HomeDevice(b);
  absl::StatusOr<std::shared_ptr<Array>> a = b.Allocate(dtype, shape, device);
  EXPECT_TRUE(a.ok()) << a.status();
  if (!a.ok()) return nullptr;
  if (host != nullptr && (*a)->bytes() > 0) {
    absl::Status s = b.CopyToArray(host, 0, (*a)->bytes(), **a);
    EXPECT_TRUE(s.ok()) << s;
  }
  return *a;
}

// An output array filled with NaN (all bits set), so unwritten elements show.
std::shared_ptr<Array> Poisoned(Backend& b, DType dtype, const Shape& shape) {
  std::vector<unsigned char> nan(static_cast<size_t>(Count(shape)) * ElementSize(dtype), 0xff);
  return Make(b, dtype, shape, nan.data());
}

template <typename T>
std::vector<T> Read(Backend& b, const Array& a) {
  std::vector<T> v(static_cast<size_t>(a.size()));
  if (!v.empty()) {
    absl::Status s = b.CopyFromArray(a, 0, a.bytes(), v.data());
    EXPECT_TRUE(s.ok()) << s;
  }
  return v;
}

template <typename T>
std::shared_ptr<Array> Put(Backend& b, const Shape& shape, const std::vector<T>& v) {
  return Make(b, std::is_same_v<T, float> ? DType::kFloat32 : DType::kFloat64, shape, v.data());
}

// ‖got − ref‖ / ‖ref‖ over elements where ref is finite; NaN in got where ref is
// finite (an unwritten or broken element) counts as a failure.
struct Diff {
  double rel = 0;
  double max_abs = 0;
  int64_t bad = 0;  // non-finite where the reference is finite, or finite where it is not
  int64_t first_bad = -1;
};

template <typename T, typename R>
Diff Compare(const std::vector<T>& got, const std::vector<R>& ref) {
  Diff d;
  EXPECT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    const double g = static_cast<double>(got[i]);
    const double r = static_cast<double>(ref[i]);
    if (!std::isfinite(r)) {
      if (std::isfinite(g)) {
        if (d.first_bad < 0) d.first_bad = static_cast<int64_t>(i);
        ++d.bad;
      }
      continue;
    }
    if (!std::isfinite(g)) {
      if (d.first_bad < 0) d.first_bad = static_cast<int64_t>(i);
      ++d.bad;
      continue;
    }
    num += (g - r) * (g - r);
    den += r * r;
    d.max_abs = std::max(d.max_abs, std::abs(g - r));
  }
  d.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return d;
}

#define EXPECT_CLOSE(got, ref, tol)                                                           \
  do {                                                                                        \
    const Diff _d = Compare(got, ref);                                                        \
    EXPECT_EQ(_d.bad, 0) << "first bad element " << _d.first_bad;                            \
    EXPECT_LE(_d.rel, tol) << "max abs diff " << _d.max_abs;                                   \
  } while (0)

DType DTypeOf(bool f64) { return f64 ? DType::kFloat64 : DType::kFloat32; }

// ---- start-up -----------------------------------------------------------------------------------
TEST(GpuBackendSmall, WarmAtConstruction) {
  REQUIRE_GPU();
  Backend& g = *Gpu();
  EXPECT_EQ(g.name(), "cuda");
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
  REQUIRE_GPU();
  BackendOptions o;
  o.cuda_devices = {9999};
  EXPECT_EQ(CreateCudaBackend(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- copies ---------------------------------------------------------------------------------------
TEST(GpuBackendSmall, CopiesRoundTripAtOffsets) {
  REQUIRE_GPU();
  Backend& g = *Gpu();
  const uint64_t slot = std::min<uint64_t>(8ull << 20, g.Stats().pinned_staging_bytes / 2);
  for (const size_t bytes : {size_t{1}, size_t{13}, size_t{4096}, static_cast<size_t>(3 * slot + 5)}) {
    SCOPED_TRACE(bytes);
    const size_t total = bytes + 7;
    std::vector<unsigned char> src = Uniform<unsigned char>(static_cast<int64_t>(total), 0, 255.99, FreshSeed());
    absl::StatusOr<std::shared_ptr<Array>> a = g.Allocate(DType::kFloat32, {static_cast<int64_t>((total + 3) / 4)}, g.PickDevice());
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(g.CopyToArray(src.data(), 0, total, **a).ok());
    std::vector<unsigned char> part(bytes, 0);
    ASSERT_TRUE(g.CopyFromArray(**a, 3, bytes, part.data()).ok());
    EXPECT_EQ(0, std::memcmp(part.data(), src.data() + 3, bytes));
    // Overwrite [3, 3 + bytes) with new data and read the whole array back.
    std::vector<unsigned char> fresh = Uniform<unsigned char>(static_cast<int64_t>(bytes), 0, 255.99, FreshSeed());
    ASSERT_TRUE(g.CopyToArray(fresh.data(), 3, bytes, **a).ok());
    std::vector<unsigned char> all(total, 0);
    ASSERT_TRUE(g.CopyFromArray(**a, 0, total, all.data()).ok());
    std::memcpy(src.data() + 3, fresh.data(), bytes);
    EXPECT_EQ(0, std::memcmp(all.data(), src.data(), total));
  }
}

TEST(GpuBackendSmall, CopiesFromPinnedHostMemory) {
  REQUIRE_GPU();
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

TEST(GpuBackendSmall, CopyPastTheEndIsOutOfRange) {
  REQUIRE_GPU();
  Backend& g = *Gpu();
  absl::StatusOr<std::shared_ptr<Array>> a = g.Allocate(DType::kFloat64, {10}, g.PickDevice());
  ASSERT_TRUE(a.ok());
  std::vector<double> host(11);
  EXPECT_EQ(g.CopyToArray(host.data(), 8, 80, **a).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(g.CopyFromArray(**a, 0, 88, host.data()).code(), absl::StatusCode::kOutOfRange);
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
    const std::vector<T> a = Uniform<T>(Count(c.factors), 0.5, 1.5, seed);
    const std::vector<T> b = Uniform<T>(Count(c.values), -2.0, 2.0, seed + 1);
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
    if (Count(out_shape) > 0) EXPECT_GT(gctx.compute_time, absl::ZeroDuration());
  };
  if (f64) run(double{}); else run(float{});
  (void)dt;
}

TEST(GpuBackendSmall, DiscountProductMatchesCpuBitForBit) {
  REQUIRE_GPU();
  const std::vector<DiscountCase> cases = {
      {{}, {1}},           {{1}, {1}},           {{7}, {7}},
      {{}, {1001}},        {{1001}, {}},         {{4000, 5}, {100, 4000, 5}},
      {{3, 1, 5}, {1, 4, 1}}, {{5}, {333, 5}},   {{2, 1, 3, 1, 5, 1, 7}, {1, 4, 1, 6, 1, 2, 1}},
      {{1000, 1}, {1000, 37}}, {{1, 64}, {9, 64}}, {{129}, {3, 129}},
      {{3, 129}, {129}},   {{0, 5}, {5}},        {{17, 1}, {1, 19}},
      {{2, 3, 4, 5, 6, 7, 8, 9}, {9}},
  };
  for (bool f64 : {false, true}) {
    for (const DiscountCase& c : cases) CheckDiscount(c, f64);
  }
}

TEST(GpuBackendLarge, DiscountProduct1e8) {
  REQUIRE_GPU();
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
    EXPECT_CLOSE(Read<double>(*Gpu(), *go), ref, 1e-12);
  } else {
    EXPECT_CLOSE(Read<float>(*Gpu(), *go), ref, 2e-6);
  }
}

std::vector<GeoPoint> RandomRefs(int n, uint64_t seed) {
  const std::vector<double> la = Uniform<double>(n, -80, 80, seed), lo = Uniform<double>(n, -179, 179, seed + 1);
  std::vector<GeoPoint> refs(n);
  for (int i = 0; i < n; ++i) refs[i] = {la[i], lo[i]};
  return refs;
}

TEST(GpuBackendSmall, HaversineMeshMatchesCpu) {
  REQUIRE_GPU();
  const uint64_t s = FreshSeed();
  const std::vector<MeshCase> cases = {
      {{{29, 31, 1}, {99, 101, 1}}, {{30, 101}}},
      {{{29, 31, 1}, {99, 101, 7}}, {{30, 101}}},
      {{{29, 31, 13}, {99, 101, 1}}, {{30, 101}}},
      {{{29, 31, 1000}, {99, 101, 1000}}, {{30, 101}}},  // the seed
      {{{-60, 75, 99}, {-170, 170, 101}}, RandomRefs(3, s)},
      {{{-89, 89, 64}, {0, 359, 64}}, RandomRefs(2, s + 7)},
      {{{10, 10, 5}, {20, 20, 4}}, {{10, 20}}},  // every point on the reference: h = 0
      {{{0, 0, 2}, {0, 180, 2}}, {{0, 0}}},      // antipodes: h = 1
  };
  for (bool f64 : {false, true}) {
    for (const MeshCase& c : cases) CheckMesh(c, f64);
  }
}

TEST(GpuBackendLarge, HaversineMesh1e8) {
  REQUIRE_GPU();
  CheckMesh({{{29, 31, 10000}, {99, 101, 10000}}, {{30, 101}}}, false);
  CheckMesh({{{-50, 50, 9999}, {-120, 120, 10001}}, {{1, 2}}}, true);
}

void CheckPoints(const Shape& shape, int n_ref, bool f64) {
  SCOPED_TRACE(absl::StrCat(ShapeToString(shape), " x ", n_ref, " refs", f64 ? " f64" : " f32"));
  const uint64_t seed = FreshSeed();
  const int64_t n = Count(shape);
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
    EXPECT_CLOSE(Read<T>(*Gpu(), *go), Read<double>(*Cpu(), *co), f64 ? 1e-12 : 1e-5);
  };
  if (f64) run(double{}); else run(float{});
}

TEST(GpuBackendSmall, HaversinePointsMatchesCpu) {
  REQUIRE_GPU();
  for (bool f64 : {false, true}) {
    CheckPoints({1}, 1, f64);
    CheckPoints({17}, 3, f64);
    CheckPoints({3, 5}, 2, f64);
    CheckPoints({100001}, 1, f64);
  }
}

TEST(GpuBackendLarge, HaversinePoints1e8) {
  REQUIRE_GPU();
  CheckPoints({10000000}, 10, false);
  CheckPoints({999, 1001}, 7, true);
}

TEST(GpuBackendSmall, HaversineRejectsBadRadius) {
  REQUIRE_GPU();
  OpContext ctx;
  auto out = Poisoned(*Gpu(), DType::kFloat32, {1, 2, 2});
  const std::vector<GeoPoint> refs = {{0, 0}};
  EXPECT_EQ(Gpu()->HaversineMesh({{0, 1, 2}, {0, 1, 2}}, refs, -1.0, *out, ctx).code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- normalize --------------------------------------------------------------------------------------------
void CheckNormalize(const Shape& shape, NormKind norm, bool f64) {
  SCOPED_TRACE(absl::StrCat(ShapeToString(shape), " norm ", static_cast<int>(norm), f64 ? " f64" : " f32"));
  const uint64_t seed = FreshSeed();
  const int64_t n = Count(shape);
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
    EXPECT_CLOSE(Read<T>(*Gpu(), *go), Read<T>(*Cpu(), *co), f64 ? 1e-14 : 1e-6);
  };
  if (f64) run(double{}); else run(float{});
}

TEST(GpuBackendSmall, NormalizeMatchesCpu) {
  REQUIRE_GPU();
  // Lane groups of 4 in registers (<= 32 columns), warps in registers (<= 256),
  // warps reading twice (<= 4096), chunked rows (> 4096).
  const std::vector<Shape> shapes = {{1}, {1, 1}, {3, 5}, {1000, 17}, {257, 33}, {2, 3, 5},
                                     {9, 256}, {11, 257}, {3, 1000}, {7, 4097}, {3, 100003},
                                     {5, 4096}, {1, 40000}};
  for (bool f64 : {false, true}) {
    for (NormKind k : {NormKind::kSum, NormKind::kL1, NormKind::kL2, NormKind::kMaxAbs}) {
      for (const Shape& s : shapes) CheckNormalize(s, k, f64);
    }
  }
}

TEST(GpuBackendLarge, Normalize1e8) {
  REQUIRE_GPU();
  CheckNormalize({10, 10000000}, NormKind::kSum, false);  // the seed: 10 x 10M float32
  CheckNormalize({10, 10000000}, NormKind::kL2, true);
  CheckNormalize({1000001, 33}, NormKind::kMaxAbs, false);
}

void CheckBadRows(int64_t cols, bool f64) {
  SCOPED_TRACE(absl::StrCat("cols ", cols, f64 ? " f64" : " f32"));
  const Shape shape = {6, cols};
  std::vector<double> x = Uniform<double>(6 * cols, 0.5, 1.5, FreshSeed());
  for (int64_t c = 0; c < cols; ++c) {
    x[4 * cols + c] = 0.0;  // row 4: zero norm
    x[3 * cols + c] = c == cols / 2 ? std::numeric_limits<double>::quiet_NaN() : x[3 * cols + c];  // row 3: NaN
  }
  for (NormKind k : {NormKind::kSum, NormKind::kL1, NormKind::kL2, NormKind::kMaxAbs}) {
    OpContext gctx, cctx;
    absl::Status gs, cs;
    if (f64) {
      gs = Gpu()->Normalize(*Put(*Gpu(), shape, x), k, *Poisoned(*Gpu(), DType::kFloat64, shape), gctx);
      cs = Cpu()->Normalize(*Put(*Cpu(), shape, x), k, *Poisoned(*Cpu(), DType::kFloat64, shape), cctx);
    } else {
      const std::vector<float> xf(x.begin(), x.end());
      gs = Gpu()->Normalize(*Put(*Gpu(), shape, xf), k, *Poisoned(*Gpu(), DType::kFloat32, shape), gctx);
      cs = Cpu()->Normalize(*Put(*Cpu(), shape, xf), k, *Poisoned(*Cpu(), DType::kFloat32, shape), cctx);
    }
    EXPECT_EQ(gs.code(), absl::StatusCode::kInvalidArgument) << gs;
    EXPECT_EQ(gs.message(), cs.message());
    EXPECT_NE(gs.message().find("input row 3 has"), absl::string_view::npos) << gs;
  }
}

TEST(GpuBackendSmall, NormalizeNamesTheFirstBadRow) {
  REQUIRE_GPU();
  for (bool f64 : {false, true}) {
    CheckBadRows(9, f64);      // short rows (lane groups)
    CheckBadRows(100, f64);    // warp per row, in registers
    CheckBadRows(1000, f64);   // warp per row, two reads
    CheckBadRows(20001, f64);  // chunked rows
  }
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
    EXPECT_CLOSE(got, Read<T>(*Cpu(), *co), tolerance);
  }
}

TEST(GpuBackendSmall, NormalizeDividesWhenTheReciprocalOverflows) {
  REQUIRE_GPU();
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
    const std::vector<double> x = Uniform<double>(Count(x_shape), 0.0, 1000.0, seed);
    std::vector<double> y(Count(y_shape));
    const std::vector<double> noise = Uniform<double>(Count(y_shape), -0.5, 0.5, seed + 1);
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t i = 0; i < c.n; ++i) {
        const double xi = x[(c.x_batched ? b * c.n : 0) + i];
        y[b * c.n + i] = 2.0 * std::sin((1.0 + 0.5 * b) * xi) + 0.7 + noise[b * c.n + i];
      }
    }
    const std::vector<double> w = Uniform<double>(Count(w_shape), 0.1, 2.0, seed + 2);
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
    EXPECT_CLOSE(Read<T>(*Gpu(), *go), Read<T>(*Cpu(), *co), f64 ? 1e-9 : 1e-4);
  };
  if (f64) run(double{}); else run(float{});
}

TEST(GpuBackendSmall, LombScargleMatchesCpu) {
  REQUIRE_GPU();
  const LombScargleOptions plain{}, fm{false, false, true}, norm_fm{false, true, true},
      pre_norm{true, true, false}, pre{true, false, false};
  const std::vector<LsCase> cases = {
      {1, 3, 1, false, 0, false, plain},      {1, 5, 7, false, 0, true, fm},
      {1, 1000, 4097, false, 0, true, fm},    {1, 1023, 4097, false, 1, false, norm_fm},
      {3, 257, 1000, false, 1, true, pre_norm}, {3, 257, 1000, true, 2, false, fm},
      {2, 100, 513, true, 2, true, plain},     {4, 64, 100000, false, 0, true, norm_fm},
      {1, 700, 3001, false, 1, true, pre},   {1, 5, 1, false, 0, true, fm},
      {2, 33, 2, true, 0, true, norm_fm},
  };
  for (bool f64 : {false, true}) {
    for (const LsCase& c : cases) {
      if (Sanitized() && c.batch * c.n * c.m > 5000000) continue;
      CheckLs(c, f64);
    }
  }
}

TEST(GpuBackendLarge, LombScargleSeedSize) {
  REQUIRE_GPU();
  const LombScargleOptions fm{false, false, true};
  CheckLs({1, 1024, 1 << 20, false, 0, true, fm}, false);
  CheckLs({1, 1024, 1 << 20, false, 0, true, fm}, true);
  CheckLs({2, 1000, 300001, false, 2, false, LombScargleOptions{false, true, true}}, false);
}

TEST(GpuBackendSmall, LombScargleRejectsBadWeightsLikeCpu) {
  REQUIRE_GPU();
  for (bool f64 : {false, true}) {
    for (int variant = 0; variant < 2; ++variant) {
      std::vector<double> w = Uniform<double>(2 * 50, 0.1, 1.0, FreshSeed());
      if (variant == 0) w[50 + 17] = -0.25;              // row 1 has a negative weight
      else for (int i = 50; i < 100; ++i) w[i] = 0.0;  // row 1 sums to 0
      const std::vector<double> x = Uniform<double>(50, 0, 10, FreshSeed());
      const std::vector<double> y = Uniform<double>(100, -1, 1, FreshSeed());
      const Linspace grid{0.1, 1.0, 5};
      auto run = [&](Backend& be) {
        OpContext ctx;
        if (f64) {
          auto out = Poisoned(be, DType::kFloat64, {2, 5});
          return be.LombScargle(*Put(be, {50}, x), *Put(be, {2, 50}, y), Put(be, {2, 50}, w).get(), nullptr, grid, {}, *out, ctx);
        }
        const std::vector<float> xf(x.begin(), x.end()), yf(y.begin(), y.end()), wf(w.begin(), w.end());
        auto out = Poisoned(be, DType::kFloat32, {2, 5});
        return be.LombScargle(*Put(be, {50}, xf), *Put(be, {2, 50}, yf), Put(be, {2, 50}, wf).get(), nullptr, grid, {}, *out, ctx);
      };
      const absl::Status gs = run(*Gpu()), cs = run(*Cpu());
      EXPECT_EQ(gs.code(), absl::StatusCode::kInvalidArgument) << gs;
      EXPECT_EQ(gs.message(), cs.message());
    }
  }
}

// ---- cancellation, concurrency, memory ------------------------------------------------------------------------
TEST(GpuBackendSmall, CancelledBeforeLaunchLeavesOutputUntouched) {
  REQUIRE_GPU();
  Backend& g = *Gpu();
  std::atomic<bool> cancelled{true};
  OpContext ctx;
  ctx.cancelled = &cancelled;
  const std::vector<float> v = Uniform<float>(1000, 0.5, 1.5, FreshSeed());
  auto a = Put(g, {1000}, v);
  auto out = Poisoned(g, DType::kFloat32, {1000});
  EXPECT_EQ(g.DiscountProduct(*a, *a, *out, ctx).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(g.Normalize(*a, NormKind::kSum, *out, ctx).code(), absl::StatusCode::kCancelled);
  const std::vector<GeoPoint> refs = {{1, 2}};
  auto mesh_out = Poisoned(g, DType::kFloat32, {1, 10, 100});
  EXPECT_EQ(g.HaversineMesh({{0, 1, 10}, {0, 1, 100}}, refs, 6371.0, *mesh_out, ctx).code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(g.LombScargle(*a, *a, nullptr, nullptr, {0.1, 1, 1000}, {}, *out, ctx).code(),
            absl::StatusCode::kCancelled);
  for (float f : Read<float>(g, *out)) ASSERT_TRUE(std::isnan(f));
  for (float f : Read<float>(g, *mesh_out)) ASSERT_TRUE(std::isnan(f));
}

TEST(GpuBackendSmall, ConcurrentCallsFromTwoThreads) {
  REQUIRE_GPU();
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
      const Diff d = Compare(Read<float>(g, *nout), want_norm);
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
  REQUIRE_GPU();
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
  REQUIRE_GPU();
  const std::vector<float> v = {1, 2, 3};
  auto host = Put(*Cpu(), {3}, v);
  auto dev = Poisoned(*Gpu(), DType::kFloat32, {3});
  OpContext ctx;
  EXPECT_EQ(Gpu()->DiscountProduct(*host, *dev, *dev, ctx).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Gpu()->Normalize(*host, NormKind::kSum, *dev, ctx).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GpuBackendSmall, OperandsOnTwoDevicesFailNamingThem) {
  REQUIRE_GPU();
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
  REQUIRE_GPU();
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
  REQUIRE_GPU();
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
