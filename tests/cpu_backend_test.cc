// The CPU backend: memory, the thread pool, and every operation in both dtypes
// against naive float64 references written here. Inputs are fresh random
// numbers (the seed is printed on failure); outputs are filled with NaN before
// each run so an element the backend never wrote shows up.
#include "kernels/cpu/cpu_backend.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/thread_pool.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

template <typename T>
constexpr DType DTypeOf() {
  return sizeof(T) == 4 ? DType::kFloat32 : DType::kFloat64;
}

int64_t Count(const Shape& shape) {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

class CpuBackendTest : public ::testing::Test {
 protected:
  CpuBackendTest() : seed_(std::random_device()()), random_(seed_) {}

  void SetUp() override { backend_ = CreateCpuBackend(2); }

  std::vector<double> Uniform(int64_t count, double low, double high) {
    std::uniform_real_distribution<double> distribution(low, high);
    std::vector<double> values(count);
    for (double& v : values) v = distribution(random_);
    return values;
  }

  // An array holding `values` rounded to T; `values` is rounded in place too,
  // so references see exactly what the backend sees.
  template <typename T>
  std::shared_ptr<Array> Upload(const Shape& shape, std::vector<double>& values) {
    std::vector<T> rounded(values.begin(), values.end());
    for (size_t i = 0; i < values.size(); ++i) values[i] = rounded[i];
    absl::StatusOr<std::shared_ptr<Array>> array =
        backend_->Allocate(DTypeOf<T>(), shape, backend_->PickDevice());
    EXPECT_TRUE(array.ok()) << array.status().message();
    if (!array.ok()) return nullptr;
    absl::Status status =
        backend_->CopyToArray(rounded.data(), 0, rounded.size() * sizeof(T), **array);
    EXPECT_TRUE(status.ok()) << status.message();
    return *array;
  }

  // An output array filled with NaN.
  template <typename T>
  std::shared_ptr<Array> Poisoned(const Shape& shape) {
    std::vector<double> nan(Count(shape), std::numeric_limits<double>::quiet_NaN());
    return Upload<T>(shape, nan);
  }

  template <typename T>
  std::vector<double> Download(const Array& array) {
    std::vector<T> values(array.size());
    absl::Status status =
        backend_->CopyFromArray(array, 0, values.size() * sizeof(T), values.data());
    EXPECT_TRUE(status.ok()) << status.message();
    return std::vector<double>(values.begin(), values.end());
  }

  // Every element written (no NaN left) and within atol + rtol * |expected|.
  static void ExpectNear(const std::vector<double>& actual, const std::vector<double>& expected,
                         double rtol, double atol) {
    ASSERT_EQ(actual.size(), expected.size());
    int64_t mismatches = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
      const bool ok = std::abs(actual[i] - expected[i]) <= atol + rtol * std::abs(expected[i]);
      if (!ok && ++mismatches <= 5) {
        ADD_FAILURE() << "element " << i << ": got " << actual[i] << ", expected " << expected[i];
      }
    }
    EXPECT_EQ(mismatches, 0) << "of " << actual.size() << " elements";
  }

  unsigned seed_;
  std::mt19937_64 random_;
  std::unique_ptr<Backend> backend_;
  OpContext ctx_;
};

#define TRACE_SEED() SCOPED_TRACE(absl::StrCat("random seed ", this->seed_))

template <typename T>
class CpuBackendTypedTest : public CpuBackendTest {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuBackendTypedTest, FloatTypes);

// Relative tolerance for results computed in float64 and stored as T: float32
// rounds at 6e-8; float64 keeps a few roundings of slack for libm and sum order.
template <typename T>
double Tolerance() {
  return sizeof(T) == 4 ? 1e-6 : 1e-12;
}

// ---------------------------------------------------------------------------
// Device, memory and copies

TEST_F(CpuBackendTest, DescribesOneHostDevice) {
  EXPECT_EQ(backend_->name(), "cpu");
  EXPECT_TRUE(backend_->Healthy());
  EXPECT_EQ(backend_->PickDevice(), kHostDevice);
  const std::vector<DeviceDescription> devices = backend_->Devices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].name, "cpu");
  EXPECT_EQ(devices[0].description, "2 threads");
  EXPECT_GT(devices[0].memory_bytes, 0u);
}

TEST_F(CpuBackendTest, ZeroThreadsMeansHardwareConcurrency) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(0);
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(backend->Devices()[0].description, absl::StrCat(hardware, " threads"));
}

TEST_F(CpuBackendTest, AllocationIsAlignedAndCountedUntilReleased) {
  const uint64_t before = backend_->Stats().devices.at(0).pool_used_bytes;
  absl::StatusOr<std::shared_ptr<Array>> array =
      backend_->Allocate(DType::kFloat64, {3, 5}, kHostDevice);
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_EQ((*array)->size(), 15);
  EXPECT_EQ((*array)->bytes(), 120u);
  EXPECT_EQ((*array)->device(), kHostDevice);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*array)->data()) % 64, 0u);
  BackendStats stats = backend_->Stats();
  ASSERT_EQ(stats.devices.size(), 1u);
  EXPECT_EQ(stats.devices[0].device, "cpu");
  EXPECT_EQ(stats.devices[0].pool_used_bytes, before + 120);
  EXPECT_EQ(stats.devices[0].pool_reserved_bytes, before + 120);
  EXPECT_EQ(stats.devices[0].queued_ops, 0u);
  array->reset();
  EXPECT_EQ(backend_->Stats().devices[0].pool_used_bytes, before);
}

TEST_F(CpuBackendTest, EmptyAndScalarArraysAllocate) {
  absl::StatusOr<std::shared_ptr<Array>> empty =
      backend_->Allocate(DType::kFloat32, {4, 0}, kHostDevice);
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_EQ((*empty)->size(), 0);
  absl::StatusOr<std::shared_ptr<Array>> scalar =
      backend_->Allocate(DType::kFloat32, {}, kHostDevice);
  ASSERT_TRUE(scalar.ok()) << scalar.status().message();
  EXPECT_EQ((*scalar)->size(), 1);
}

TEST_F(CpuBackendTest, AbsurdAllocationIsResourceExhausted) {
  for (const Shape& shape : {Shape{int64_t{1} << 40, int64_t{1} << 40}, Shape{int64_t{1} << 50},
                             Shape{int64_t{1} << 62, 2}}) {
    absl::StatusOr<std::shared_ptr<Array>> array =
        backend_->Allocate(DType::kFloat64, shape, kHostDevice);
    ASSERT_FALSE(array.ok());
    EXPECT_EQ(array.status().code(), absl::StatusCode::kResourceExhausted)
        << array.status().message();
    EXPECT_THAT(std::string(array.status().message()), HasSubstr("bytes"));
  }
}

TEST_F(CpuBackendTest, MalformedAllocationIsInvalidArgument) {
  absl::StatusOr<std::shared_ptr<Array>> negative =
      backend_->Allocate(DType::kFloat32, {3, -1}, kHostDevice);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("shape[1] is -1"));
  absl::StatusOr<std::shared_ptr<Array>> rank9 =
      backend_->Allocate(DType::kFloat32, Shape(9, 1), kHostDevice);
  EXPECT_EQ(rank9.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::shared_ptr<Array>> device = backend_->Allocate(DType::kFloat32, {3}, 5);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuBackendTest, CopiesRoundTripAtOffsets) {
  absl::StatusOr<std::shared_ptr<Array>> array =
      backend_->Allocate(DType::kFloat32, {8}, kHostDevice);
  ASSERT_TRUE(array.ok()) << array.status().message();
  const float in[3] = {1.5f, -2.0f, 3.25f};
  absl::Status status = backend_->CopyToArray(in, 4 * sizeof(float), sizeof(in), **array);
  ASSERT_TRUE(status.ok()) << status.message();
  float out[3] = {};
  status = backend_->CopyFromArray(**array, 4 * sizeof(float), sizeof(out), out);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 3.25f);
}

TEST_F(CpuBackendTest, CopiesOutOfRangeAreRejected) {
  absl::StatusOr<std::shared_ptr<Array>> array =
      backend_->Allocate(DType::kFloat64, {4}, kHostDevice);
  ASSERT_TRUE(array.ok()) << array.status().message();
  std::vector<char> host(64);
  absl::Status past_end = backend_->CopyToArray(host.data(), 8, 32, **array);
  EXPECT_EQ(past_end.code(), absl::StatusCode::kOutOfRange) << past_end.message();
  absl::Status wrapping =
      backend_->CopyFromArray(**array, 16, std::numeric_limits<size_t>::max() - 8, host.data());
  EXPECT_EQ(wrapping.code(), absl::StatusCode::kOutOfRange) << wrapping.message();
  absl::Status offset = backend_->CopyFromArray(**array, 33, 0, host.data());
  EXPECT_EQ(offset.code(), absl::StatusCode::kOutOfRange) << offset.message();
  absl::Status null_host = backend_->CopyToArray(nullptr, 0, 8, **array);
  EXPECT_EQ(null_host.code(), absl::StatusCode::kInvalidArgument) << null_host.message();
  absl::Status whole = backend_->CopyToArray(host.data(), 0, 32, **array);
  EXPECT_TRUE(whole.ok()) << whole.message();
}

// ---------------------------------------------------------------------------
// Thread pool

TEST(ThreadPoolTest, VisitsEveryIndexOnce) {
  ThreadPool pool(3);
  OpContext ctx;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000003}}) {
    std::vector<std::atomic<int>> visits(n);
    absl::Status status = pool.ParallelFor(n, 1000, ctx, [&](int64_t begin, int64_t end) {
      EXPECT_LE(end - begin, 1000);
      for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1);
    });
    ASSERT_TRUE(status.ok()) << status.message();
    int64_t wrong = 0;
    for (const std::atomic<int>& v : visits) wrong += v.load() != 1;
    EXPECT_EQ(wrong, 0) << "n = " << n;
  }
}

TEST(ThreadPoolTest, ConcurrentAndNestedCallersFinish) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int caller = 0; caller < 4; ++caller) {
    callers.emplace_back([&] {
      OpContext ctx;
      absl::Status status = pool.ParallelFor(16, 1, ctx, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          absl::Status inner =
              pool.ParallelFor(100, 7, ctx, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
          EXPECT_TRUE(inner.ok()) << inner.message();
        }
      });
      EXPECT_TRUE(status.ok()) << status.message();
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(total.load(), 4 * 16 * 100);
}

TEST(ThreadPoolTest, CancellationStopsRemainingBlocks) {
  ThreadPool pool(1);
  std::atomic<bool> cancelled{false};
  OpContext ctx;
  ctx.cancelled = &cancelled;
  int64_t blocks_run = 0;
  absl::Status status = pool.ParallelFor(100, 1, ctx, [&](int64_t, int64_t) {
    ++blocks_run;
    cancelled.store(true);
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status.message();
  EXPECT_EQ(blocks_run, 1);
}

// ---------------------------------------------------------------------------
// DiscountProduct

// out = a * b, indexing each operand NumPy-style from the output index.
std::vector<double> ReferenceProduct(const std::vector<double>& a, const Shape& a_shape,
                                     const std::vector<double>& b, const Shape& b_shape,
                                     const Shape& out_shape) {
  const size_t rank = out_shape.size();
  std::vector<double> out(Count(out_shape));
  std::vector<int64_t> index(rank);
  for (int64_t flat = 0; flat < static_cast<int64_t>(out.size()); ++flat) {
    int64_t rest = flat;
    for (size_t axis = rank; axis-- > 0;) {
      index[axis] = rest % out_shape[axis];
      rest /= out_shape[axis];
    }
    auto offset = [&](const Shape& shape) {
      int64_t position = 0;
      for (size_t axis = 0; axis < shape.size(); ++axis) {
        const int64_t i = shape[axis] == 1 ? 0 : index[rank - shape.size() + axis];
        position = position * shape[axis] + i;
      }
      return position;
    };
    out[flat] = a[offset(a_shape)] * b[offset(b_shape)];
  }
  return out;
}

struct BroadcastCase {
  Shape factors;
  Shape values;
  Shape out;
};

TYPED_TEST(CpuBackendTypedTest, DiscountProductBroadcastsLikeNumPy) {
  TRACE_SEED();
  const std::vector<BroadcastCase> cases = {
      {{}, {}, {}},
      {{}, {2, 3}, {2, 3}},
      {{3}, {}, {3}},
      {{1}, {7}, {7}},
      {{7}, {1}, {7}},
      {{4000, 5}, {3, 4000, 5}, {3, 4000, 5}},  // the seed case
      {{3, 4000, 5}, {4000, 5}, {3, 4000, 5}},
      {{3, 1}, {1, 4}, {3, 4}},
      {{2, 1, 3}, {4, 1}, {2, 4, 3}},
      {{5, 1, 7}, {5, 3, 1}, {5, 3, 7}},
      {{6, 1}, {6, 9}, {6, 9}},
      {{1, 9}, {6, 1}, {6, 9}},
      {{2, 1, 3, 1}, {1, 4, 1, 5}, {2, 4, 3, 5}},
      {{3, 1, 1, 2, 1}, {4, 1, 2, 3}, {3, 4, 1, 2, 3}},
      {{1, 2, 1, 3, 1, 2}, {2, 1, 2, 1, 3, 1}, {2, 2, 2, 3, 3, 2}},
      {{2, 3, 1, 1, 2, 1, 3}, {1, 1, 2, 2, 1, 3, 1}, {2, 3, 2, 2, 2, 3, 3}},
      {{2, 1, 3, 1, 2, 1, 2, 1}, {1, 3, 1, 2, 1, 2, 1, 3}, {2, 3, 3, 2, 2, 2, 2, 3}},
      {{1, 1, 1, 1, 1, 1, 1, 1}, {2, 3}, {1, 1, 1, 1, 1, 1, 2, 3}},
      {{2, 2, 2, 2, 2, 2, 2, 2}, {2}, {2, 2, 2, 2, 2, 2, 2, 2}},
      {{0, 3}, {1, 3}, {0, 3}},
      {{1000003}, {1}, {1000003}},
      {{1000003}, {1000003}, {1000003}},
      {{200003, 5}, {3, 200003, 5}, {3, 200003, 5}},
  };
  for (const BroadcastCase& c : cases) {
    SCOPED_TRACE(
        absl::StrCat("factors ", ShapeToString(c.factors), " values ", ShapeToString(c.values)));
    std::vector<double> a = this->Uniform(Count(c.factors), 0.5, 1.5);
    std::vector<double> b = this->Uniform(Count(c.values), -100, 100);
    std::shared_ptr<Array> factors = this->template Upload<TypeParam>(c.factors, a);
    std::shared_ptr<Array> values = this->template Upload<TypeParam>(c.values, b);
    std::shared_ptr<Array> out = this->template Poisoned<TypeParam>(c.out);
    absl::Status status = this->backend_->DiscountProduct(*factors, *values, *out, this->ctx_);
    ASSERT_TRUE(status.ok()) << status.message();
    // a * b of two floats is exact in double, so rounding it to T gives T's own product.
    std::vector<double> expected = ReferenceProduct(a, c.factors, b, c.values, c.out);
    for (double& v : expected) v = static_cast<TypeParam>(v);
    this->ExpectNear(this->template Download<TypeParam>(*out), expected, 0, 0);
  }
}

TYPED_TEST(CpuBackendTypedTest, DiscountProductRejectsMismatches) {
  std::vector<double> a(6, 1.0), b(4, 1.0);
  std::shared_ptr<Array> factors = this->template Upload<TypeParam>({2, 3}, a);
  std::shared_ptr<Array> values = this->template Upload<TypeParam>({4}, b);
  std::shared_ptr<Array> out = this->template Poisoned<TypeParam>({2, 3});
  absl::Status status = this->backend_->DiscountProduct(*factors, *values, *out, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("factors.shape (2, 3) and values.shape (4,)"));

  std::shared_ptr<Array> wrong_out = this->template Poisoned<TypeParam>({3, 2});
  status = this->backend_->DiscountProduct(*factors, *factors, *wrong_out, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("out.shape"));

  std::vector<double> c(6, 1.0);
  std::shared_ptr<Array> other_dtype = sizeof(TypeParam) == 4
                                           ? this->template Upload<double>({2, 3}, c)
                                           : this->template Upload<float>({2, 3}, c);
  status = this->backend_->DiscountProduct(*factors, *other_dtype, *out, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("values has dtype"));
}

TEST_F(CpuBackendTest, OperationReportsComputeTime) {
  std::vector<double> a = Uniform(1000003, -1, 1);
  std::shared_ptr<Array> values = Upload<double>({1000003}, a);
  std::shared_ptr<Array> out = Poisoned<double>({1000003});
  ctx_.compute_time = absl::ZeroDuration();
  absl::Status status = backend_->DiscountProduct(*values, *values, *out, ctx_);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_GT(ctx_.compute_time, absl::ZeroDuration());
}

// ---------------------------------------------------------------------------
// Haversine

constexpr double kRadius = 6371.0088;

double ReferenceDistance(double lat1, double lon1, double lat2, double lon2, double radius) {
  const double to_radians = std::numbers::pi / 180;
  const double dlat = (lat2 - lat1) * to_radians;
  const double dlon = (lon2 - lon1) * to_radians;
  double h = std::pow(std::sin(dlat / 2), 2) + std::cos(lat1 * to_radians) *
                                                   std::cos(lat2 * to_radians) *
                                                   std::pow(std::sin(dlon / 2), 2);
  h = std::min(1.0, std::max(0.0, h));
  return 2 * radius * std::atan2(std::sqrt(h), std::sqrt(1 - h));
}

std::vector<GeoPoint> RandomRefs(std::mt19937_64& random, int count) {
  std::uniform_real_distribution<double> lat(-90, 90), lon(-180, 180);
  std::vector<GeoPoint> refs(count);
  for (GeoPoint& ref : refs) ref = {lat(random), lon(random)};
  return refs;
}

TYPED_TEST(CpuBackendTypedTest, HaversineMeshMatchesReference) {
  TRACE_SEED();
  struct MeshCase {
    LatLonMesh mesh;
    int refs;
  };
  const std::vector<MeshCase> cases = {
      {{{29, 31, 1}, {99, 101, 1}}, 1},       {{{29, 31, 7}, {99, 101, 13}}, 3},
      {{{-90, 90, 181}, {-180, 180, 7}}, 2},   // poles and antipodes
      {{{29, 31, 1000}, {99, 101, 1000}}, 1},  // the seed mesh
      {{{-10, 10, 3}, {0, 360, 1000003}}, 1},
  };
  for (const MeshCase& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.mesh.lat.count, " x ", c.mesh.lon.count, " mesh"));
    std::vector<GeoPoint> refs = RandomRefs(this->random_, c.refs);
    refs[0] = {30, 101};
    const Shape shape = {c.refs, c.mesh.lat.count, c.mesh.lon.count};
    std::shared_ptr<Array> out = this->template Poisoned<TypeParam>(shape);
    absl::Status status = this->backend_->HaversineMesh(c.mesh, refs, kRadius, *out, this->ctx_);
    ASSERT_TRUE(status.ok()) << status.message();
    std::vector<double> expected;
    expected.reserve(Count(shape));
    for (const GeoPoint& ref : refs) {
      for (int64_t i = 0; i < c.mesh.lat.count; ++i) {
        for (int64_t j = 0; j < c.mesh.lon.count; ++j) {
          expected.push_back(
              ReferenceDistance(ref.lat, ref.lon, c.mesh.lat.At(i), c.mesh.lon.At(j), kRadius));
        }
      }
    }
    // Distances near the antipode are ill-conditioned in h (~1e-9 km in float64).
    this->ExpectNear(this->template Download<TypeParam>(*out), expected, Tolerance<TypeParam>(),
                     1e-6);
  }
}

TYPED_TEST(CpuBackendTypedTest, HaversinePointsMatchesReference) {
  TRACE_SEED();
  for (const Shape& shape : {Shape{1}, Shape{7}, Shape{3, 5, 2}, Shape{1000003}}) {
    SCOPED_TRACE(absl::StrCat("points ", ShapeToString(shape)));
    std::vector<double> lat = this->Uniform(Count(shape), -90, 90);
    std::vector<double> lon = this->Uniform(Count(shape), -180, 540);
    std::shared_ptr<Array> lat_array = this->template Upload<TypeParam>(shape, lat);
    std::shared_ptr<Array> lon_array = this->template Upload<TypeParam>(shape, lon);
    const std::vector<GeoPoint> refs = RandomRefs(this->random_, 2);
    Shape out_shape = {2};
    out_shape.insert(out_shape.end(), shape.begin(), shape.end());
    std::shared_ptr<Array> out = this->template Poisoned<TypeParam>(out_shape);
    absl::Status status =
        this->backend_->HaversinePoints(*lat_array, *lon_array, refs, 1.5, *out, this->ctx_);
    ASSERT_TRUE(status.ok()) << status.message();
    std::vector<double> expected;
    for (const GeoPoint& ref : refs) {
      for (size_t p = 0; p < lat.size(); ++p) {
        expected.push_back(ReferenceDistance(ref.lat, ref.lon, lat[p], lon[p], 1.5));
      }
    }
    this->ExpectNear(this->template Download<TypeParam>(*out), expected, Tolerance<TypeParam>(),
                     1e-9);
  }
}

TEST_F(CpuBackendTest, HaversineRejectsBadRadiusAndShapes) {
  const LatLonMesh mesh = {{0, 1, 2}, {0, 1, 3}};
  const std::vector<GeoPoint> refs = {{0, 0}};
  std::shared_ptr<Array> out = Poisoned<double>({1, 2, 3});
  for (double radius : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    absl::Status status = backend_->HaversineMesh(mesh, refs, radius, *out, ctx_);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
    EXPECT_THAT(std::string(status.message()), HasSubstr("radius"));
  }
  std::shared_ptr<Array> wrong = Poisoned<double>({1, 3, 2});
  absl::Status status = backend_->HaversineMesh(mesh, refs, kRadius, *wrong, ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();

  std::vector<double> three(3, 1.0), four(4, 1.0);
  std::shared_ptr<Array> lat = Upload<double>({3}, three);
  std::shared_ptr<Array> lon = Upload<double>({4}, four);
  std::shared_ptr<Array> points_out = Poisoned<double>({1, 3});
  status = backend_->HaversinePoints(*lat, *lon, refs, kRadius, *points_out, ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("lon.shape"));
}

// ---------------------------------------------------------------------------
// Normalize

double ReferenceNorm(const double* row, int64_t length, NormKind kind) {
  long double norm = 0;
  for (int64_t i = 0; i < length; ++i) {
    const long double x = row[i];
    switch (kind) {
      case NormKind::kSum:
        norm += x;
        break;
      case NormKind::kL1:
        norm += std::abs(x);
        break;
      case NormKind::kL2:
        norm += x * x;
        break;
      case NormKind::kMaxAbs:
        norm = std::max(norm, std::abs(x));
        break;
    }
  }
  return static_cast<double>(kind == NormKind::kL2 ? std::sqrt(norm) : norm);
}

std::vector<double> ReferenceNormalize(const std::vector<double>& in, int64_t length,
                                       NormKind kind) {
  std::vector<double> out(in.size());
  for (size_t start = 0; start < in.size(); start += length) {
    const double norm = ReferenceNorm(in.data() + start, length, kind);
    for (int64_t i = 0; i < length; ++i) out[start + i] = in[start + i] / norm;
  }
  return out;
}

constexpr NormKind kAllNorms[] = {NormKind::kSum, NormKind::kL1, NormKind::kL2, NormKind::kMaxAbs};

TYPED_TEST(CpuBackendTypedTest, NormalizeMatchesReference) {
  TRACE_SEED();
  const std::vector<Shape> shapes = {{1},       {7},          {1000003},   {3, 7},
                                     {5, 1, 4}, {1000003, 1}, {3, 300007}, {64, 1000}};
  for (NormKind kind : kAllNorms) {
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(absl::StrCat("norm ", static_cast<int>(kind), " shape ", ShapeToString(shape)));
      // Positive values for SUM keep x / sum(x) well conditioned.
      std::vector<double> x = this->Uniform(Count(shape), kind == NormKind::kSum ? 0.1 : -1.0, 1.0);
      std::shared_ptr<Array> in = this->template Upload<TypeParam>(shape, x);
      std::shared_ptr<Array> out = this->template Poisoned<TypeParam>(shape);
      absl::Status status = this->backend_->Normalize(*in, kind, *out, this->ctx_);
      ASSERT_TRUE(status.ok()) << status.message();
      this->ExpectNear(this->template Download<TypeParam>(*out),
                       ReferenceNormalize(x, shape.back(), kind), Tolerance<TypeParam>(), 0);
    }
  }
}

TYPED_TEST(CpuBackendTypedTest, NormalizeInPlace) {
  TRACE_SEED();
  std::vector<double> x = this->Uniform(4 * 1000, 0.1, 1);
  std::shared_ptr<Array> array = this->template Upload<TypeParam>({4, 1000}, x);
  absl::Status status = this->backend_->Normalize(*array, NormKind::kL2, *array, this->ctx_);
  ASSERT_TRUE(status.ok()) << status.message();
  this->ExpectNear(this->template Download<TypeParam>(*array),
                   ReferenceNormalize(x, 1000, NormKind::kL2), Tolerance<TypeParam>(), 0);
}

struct BadRowCase {
  Shape shape;
  std::vector<int64_t> bad_rows;  // the first is the one reported
  double bad_value;
  NormKind kind;
  const char* expected;
};

TYPED_TEST(CpuBackendTypedTest, NormalizeNamesFirstBadRow) {
  TRACE_SEED();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<BadRowCase> cases = {
      {{1}, {0}, 0.0, NormKind::kL2, "input row 0 has L2 norm 0;"},
      {{5, 7}, {3}, 0.0, NormKind::kL1, "input row 3 has L1 norm 0;"},
      {{5, 7}, {2, 4}, nan, NormKind::kMaxAbs, "input row 2 has max-abs norm nan;"},
      {{5, 7}, {4, 1}, inf, NormKind::kSum, "input row 1 has sum norm inf;"},
      // Many short rows split over threads: still the lowest index.
      {{200000, 7}, {199999, 70001, 150000}, 0.0, NormKind::kL2, "input row 70001 has L2 norm 0;"},
      // Long rows split into segments.
      {{4, 300007}, {3, 2}, nan, NormKind::kSum, "input row 2 has sum norm nan;"},
  };
  for (const BadRowCase& c : cases) {
    SCOPED_TRACE(c.expected);
    const int64_t length = c.shape.back();
    std::vector<double> x = this->Uniform(Count(c.shape), 0.1, 1.0);
    for (int64_t row : c.bad_rows) {
      if (c.bad_value == 0.0) {
        std::fill(x.begin() + row * length, x.begin() + (row + 1) * length, 0.0);
      } else {
        x[row * length + length / 2] = c.bad_value;
      }
    }
    std::shared_ptr<Array> in = this->template Upload<TypeParam>(c.shape, x);
    std::shared_ptr<Array> out = this->template Poisoned<TypeParam>(c.shape);
    absl::Status status = this->backend_->Normalize(*in, c.kind, *out, this->ctx_);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.expected));
    EXPECT_THAT(std::string(status.message()), HasSubstr("rows must have a finite, non-zero norm"));
  }
}

TEST_F(CpuBackendTest, NormalizeSumOfZeroIsRejected) {
  std::vector<double> x = {1, 2, 3, 1, -1, 0};
  std::shared_ptr<Array> in = Upload<double>({2, 3}, x);
  std::shared_ptr<Array> out = Poisoned<double>({2, 3});
  absl::Status status = backend_->Normalize(*in, NormKind::kSum, *out, ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("input row 1 has sum norm 0;"));
}

TEST_F(CpuBackendTest, NormalizeRejectsScalarsAndEmptyRows) {
  std::vector<double> one = {1};
  std::shared_ptr<Array> scalar = Upload<double>({}, one);
  absl::Status status = backend_->Normalize(*scalar, NormKind::kL2, *scalar, ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  std::vector<double> none;
  std::shared_ptr<Array> empty = Upload<double>({3, 0}, none);
  status = backend_->Normalize(*empty, NormKind::kL2, *empty, ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
}

// ---------------------------------------------------------------------------
// Lomb-Scargle

// The spec, row by row, with sin and cos evaluated at every (frequency, sample).
std::vector<double> ReferenceLombScargle(const std::vector<double>& x, bool x_batched,
                                         const std::vector<double>& y,
                                         const std::vector<double>* weights, bool weights_batched,
                                         const std::vector<double>& freqs, int64_t batch, int64_t n,
                                         const LombScargleOptions& options) {
  const int64_t m = static_cast<int64_t>(freqs.size());
  std::vector<double> p(batch * m);
  for (int64_t b = 0; b < batch; ++b) {
    const double* xb = x.data() + (x_batched ? b * n : 0);
    std::vector<double> w(n, 1.0);
    if (weights != nullptr) {
      for (int64_t i = 0; i < n; ++i) w[i] = (*weights)[(weights_batched ? b * n : 0) + i];
    }
    double w_total = 0;
    for (double v : w) w_total += v;
    for (double& v : w) v /= w_total;
    std::vector<double> yb(y.begin() + b * n, y.begin() + (b + 1) * n);
    if (options.precenter) {
      double mean = 0;
      for (double v : yb) mean += v;
      mean /= n;
      for (double& v : yb) v -= mean;
    }
    double Y = 0, YY = 0;
    for (int64_t i = 0; i < n; ++i) {
      Y += w[i] * yb[i];
      YY += w[i] * yb[i] * yb[i];
    }
    for (int64_t k = 0; k < m; ++k) {
      double CC = 0, SS = 0, CS = 0, YC = 0, YS = 0, C = 0, S = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double c = std::cos(freqs[k] * xb[i]);
        const double s = std::sin(freqs[k] * xb[i]);
        CC += w[i] * c * c;
        SS += w[i] * s * s;
        CS += w[i] * c * s;
        YC += w[i] * yb[i] * c;
        YS += w[i] * yb[i] * s;
        C += w[i] * c;
        S += w[i] * s;
      }
      if (options.floating_mean) {
        YC -= Y * C;
        YS -= Y * S;
        CC -= C * C;
        SS -= S * S;
        CS -= C * S;
      }
      const double D = CC * SS - CS * CS;
      const double a = (YC * SS - YS * CS) / D;
      const double bb = (YS * CC - YC * CS) / D;
      double power = 2 * (a * YC + bb * YS);
      if (options.normalize) {
        power /= 2 * (options.floating_mean ? YY - Y * Y : YY);
      } else {
        power *= n / 4.0;
      }
      p[b * m + k] = power;
    }
  }
  return p;
}

enum class Weights { kNone, kShared, kPerRow };
enum class Batching { kNone, kSharedX, kBatchedX };
// Grid generated by the backend; random array; array of the grid's values
// (evenly spaced like numpy.linspace output).
enum class Freqs { kGrid, kRandomArray, kLinspaceArray };
constexpr Freqs kAllFreqs[] = {Freqs::kGrid, Freqs::kRandomArray, Freqs::kLinspaceArray};

struct LombScargleCase {
  int64_t samples;
  int64_t frequencies;
  Batching batching;
  Weights weights;
  Freqs freqs;
  LombScargleOptions options;
};

template <typename T>
class LombScargleTest : public CpuBackendTest {
 protected:
  void Check(const LombScargleCase& c) {
    SCOPED_TRACE(absl::StrCat(
        "N=", c.samples, " M=", c.frequencies, " batching=", static_cast<int>(c.batching),
        " weights=", static_cast<int>(c.weights), " freqs=", static_cast<int>(c.freqs),
        " precenter=", c.options.precenter, " normalize=", c.options.normalize,
        " floating_mean=", c.options.floating_mean));
    const int64_t batch = c.batching == Batching::kNone ? 1 : 3;
    const int64_t n = c.samples;
    const bool x_batched = c.batching == Batching::kBatchedX;
    const Shape x_shape = x_batched ? Shape{batch, n} : Shape{n};
    const Shape y_shape = c.batching == Batching::kNone ? Shape{n} : Shape{batch, n};
    std::vector<double> x = Uniform(Count(x_shape), 0, 100);
    std::vector<double> y = Uniform(Count(y_shape), -1, 3);
    std::shared_ptr<Array> x_array = Upload<T>(x_shape, x);
    std::shared_ptr<Array> y_array = Upload<T>(y_shape, y);
    std::vector<double> w;
    std::shared_ptr<Array> w_array;
    if (c.weights != Weights::kNone) {
      const Shape w_shape = c.weights == Weights::kPerRow ? y_shape : Shape{n};
      w = Uniform(Count(w_shape), 0.1, 2);
      w_array = Upload<T>(w_shape, w);
    }
    const Linspace grid = {0.01, 10, c.frequencies};
    std::vector<double> freqs(c.frequencies);
    for (int64_t k = 0; k < c.frequencies; ++k) freqs[k] = grid.At(k);
    if (c.freqs == Freqs::kRandomArray) freqs = Uniform(c.frequencies, 0.01, 10);
    std::shared_ptr<Array> freq_array;
    if (c.freqs != Freqs::kGrid) freq_array = Upload<T>({c.frequencies}, freqs);
    const Shape out_shape =
        c.batching == Batching::kNone ? Shape{c.frequencies} : Shape{batch, c.frequencies};
    std::shared_ptr<Array> out = Poisoned<T>(out_shape);
    absl::Status status = backend_->LombScargle(*x_array, *y_array, w_array.get(), freq_array.get(),
                                                grid, c.options, *out, ctx_);
    ASSERT_TRUE(status.ok()) << status.message();
    const std::vector<double> expected =
        ReferenceLombScargle(x, x_batched, y, w_array ? &w : nullptr, c.weights == Weights::kPerRow,
                             freqs, batch, n, c.options);
    // Powers are compared on the scale of the row's largest power, since a
    // frequency where D is tiny amplifies rounding in both. float32: the output
    // rounding (6e-8) with margin; float64: ~1e-14 phase differences (the
    // recurrence, libm) amplified by D.
    const std::vector<double> actual = Download<T>(*out);
    std::vector<double> scaled_actual(actual.size()), scaled_expected(expected.size());
    for (int64_t b = 0; b < batch; ++b) {
      double scale = 0;
      for (int64_t k = 0; k < c.frequencies; ++k) {
        scale = std::max(scale, std::abs(expected[b * c.frequencies + k]));
      }
      for (int64_t k = 0; k < c.frequencies; ++k) {
        scaled_actual[b * c.frequencies + k] = actual[b * c.frequencies + k] / scale;
        scaled_expected[b * c.frequencies + k] = expected[b * c.frequencies + k] / scale;
      }
    }
    ExpectNear(scaled_actual, scaled_expected, 0, sizeof(T) == 4 ? 1e-6 : 1e-10);
  }
};
TYPED_TEST_SUITE(LombScargleTest, FloatTypes);

TYPED_TEST(LombScargleTest, EveryOptionCombination) {
  TRACE_SEED();
  for (Batching batching : {Batching::kNone, Batching::kSharedX, Batching::kBatchedX}) {
    for (Weights weights : {Weights::kNone, Weights::kShared, Weights::kPerRow}) {
      if (weights == Weights::kPerRow && batching == Batching::kNone) continue;
      for (Freqs freqs : kAllFreqs) {
        for (int options = 0; options < 8; ++options) {
          const LombScargleOptions o = {.precenter = (options & 1) != 0,
                                        .normalize = (options & 2) != 0,
                                        .floating_mean = (options & 4) != 0};
          this->Check({61, 150, batching, weights, freqs, o});
        }
      }
    }
  }
}

TYPED_TEST(LombScargleTest, Sizes) {
  TRACE_SEED();
  for (int64_t n : {3, 7, 1000}) {
    for (int64_t m : {1, 7, 1000}) {
      for (Freqs freqs : kAllFreqs) {
        this->Check({n, m, Batching::kNone, Weights::kNone, freqs, {}});
      }
    }
  }
  // Many blocks, each restarting the recurrence from exact sin and cos.
  this->Check({1000, 20000, Batching::kNone, Weights::kNone, Freqs::kGrid, {.normalize = true}});
  this->Check(
      {1000, 20000, Batching::kNone, Weights::kNone, Freqs::kLinspaceArray, {.normalize = true}});
}

TEST_F(CpuBackendTest, LombScargleSingleSampleRuns) {
  std::vector<double> one = {1.0}, two = {2.0};
  std::shared_ptr<Array> x = Upload<double>({1}, one);
  std::shared_ptr<Array> y = Upload<double>({1}, two);
  std::shared_ptr<Array> out = Poisoned<double>({5});
  absl::Status status = backend_->LombScargle(*x, *y, nullptr, nullptr, {1, 2, 5}, {}, *out, ctx_);
  EXPECT_TRUE(status.ok()) << status.message();
}

TEST_F(CpuBackendTest, LombScargleRejectsBadWeights) {
  std::vector<double> x = {0, 1, 2, 3, 0, 1, 2, 3};
  std::vector<double> y = x;
  std::vector<double> negative = {1, 1, 1, 1, 1, -0.5, 1, 1};
  std::vector<double> zero = {1, 1, 1, 1, 0, 0, 0, 0};
  std::shared_ptr<Array> x_array = Upload<double>({2, 4}, x);
  std::shared_ptr<Array> y_array = Upload<double>({2, 4}, y);
  std::shared_ptr<Array> out = Poisoned<double>({2, 3});
  const Linspace grid = {1, 2, 3};

  std::shared_ptr<Array> w = Upload<double>({2, 4}, negative);
  absl::Status status =
      backend_->LombScargle(*x_array, *y_array, w.get(), nullptr, grid, {}, *out, ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("weights row 1 has weight -0.5 at index 1"));

  w = Upload<double>({2, 4}, zero);
  status = backend_->LombScargle(*x_array, *y_array, w.get(), nullptr, grid, {}, *out, ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("weights row 1 sums to 0"));
}

TEST_F(CpuBackendTest, LombScargleRejectsBadShapes) {
  std::vector<double> four = {0, 1, 2, 3}, five = {0, 1, 2, 3, 4};
  std::shared_ptr<Array> x = Upload<double>({4}, four);
  std::shared_ptr<Array> y = Upload<double>({5}, five);
  std::shared_ptr<Array> out = Poisoned<double>({3});
  absl::Status status = backend_->LombScargle(*x, *y, nullptr, nullptr, {1, 2, 3}, {}, *out, ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("x.shape (4,) and y.shape (5,)"));

  std::shared_ptr<Array> freqs = Upload<double>({2, 2}, four);
  status = backend_->LombScargle(*x, *x, nullptr, freqs.get(), {}, {}, *out, ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("freqs.shape"));

  status = backend_->LombScargle(*x, *x, nullptr, nullptr, {1, 2, 4}, {}, *out, ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("out.shape"));
}

// ---------------------------------------------------------------------------
// Cancellation: a request cancelled before it runs does no work.

TEST_F(CpuBackendTest, PreCancelledOperationsReturnCancelled) {
  std::atomic<bool> cancelled{true};
  ctx_.cancelled = &cancelled;
  std::vector<double> values = Uniform(1000, 0.1, 1);
  std::shared_ptr<Array> a = Upload<double>({10, 100}, values);
  std::shared_ptr<Array> out = Poisoned<double>({10, 100});
  const std::vector<GeoPoint> refs = {{30, 101}};

  EXPECT_EQ(backend_->DiscountProduct(*a, *a, *out, ctx_).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(backend_->Normalize(*a, NormKind::kL2, *out, ctx_).code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(backend_
                ->HaversineMesh({{0, 1, 10}, {0, 1, 100}}, refs, kRadius,
                                *Poisoned<double>({1, 10, 100}), ctx_)
                .code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(backend_->HaversinePoints(*a, *a, refs, kRadius, *Poisoned<double>({1, 10, 100}), ctx_)
                .code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(backend_->LombScargle(*a, *a, nullptr, nullptr, {1, 2, 100}, {}, *out, ctx_).code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace gpucompute
