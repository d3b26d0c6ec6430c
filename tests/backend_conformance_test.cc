// One conformance suite for every backend: each operation in both dtypes against
// the float64 references of tests/testing/tensors.h, its argument checks, its
// error messages and cancellation. The CPU always runs; CUDA runs where it is
// compiled in and a GPU starts (test names carry "cuda", ctest label gpu), else it
// skips. Inputs are fresh random numbers (the seed is printed on failure); outputs
// are filled with NaN before each run so an element never written shows up.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/preconditions.h"
#include "tests/testing/arrays.h"
#include "tests/testing/conformance.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using test::BackendConformance;
using test::Check;
using test::ElementCount;
using test::ExpectWithin;
using test::Subjects;
using test::SubjectNames;

TYPED_TEST_SUITE(BackendConformance, Subjects, SubjectNames);


// ---------------------------------------------------------------------------
// Copies

TYPED_TEST(BackendConformance, CopiesRoundTripAtOffsets) {
  Backend& b = *this->backend_;
  auto array = test::Make(b, DType::kFloat32, {8}, nullptr);
  const float in[3] = {1.5f, -2.0f, 3.25f};
  absl::Status status = b.CopyToArray(in, 4 * sizeof(float), sizeof(in), *array);
  ASSERT_TRUE(status.ok()) << status.message();
  float out[3] = {};
  status = b.CopyFromArray(*array, 4 * sizeof(float), sizeof(out), out);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 3.25f);

  // Odd byte counts and offsets, up to several pinned staging slots on a GPU.
  const uint64_t slot = std::min<uint64_t>(8ull << 20, b.Stats().pinned_staging_bytes / 2);
  for (const size_t bytes : {size_t{1}, size_t{13}, size_t{4096}, static_cast<size_t>(3 * slot + 5)}) {
    SCOPED_TRACE(bytes);
    const size_t total = bytes + 7;
    std::vector<unsigned char> src =
        test::Uniform<unsigned char>(static_cast<int64_t>(total), 0, 255.99, test::FreshSeed());
    auto a = test::Make(b, DType::kFloat32, {static_cast<int64_t>((total + 3) / 4)}, nullptr);
    ASSERT_TRUE(b.CopyToArray(src.data(), 0, total, *a).ok());
    std::vector<unsigned char> part(bytes, 0);
    ASSERT_TRUE(b.CopyFromArray(*a, 3, bytes, part.data()).ok());
    EXPECT_EQ(0, std::memcmp(part.data(), src.data() + 3, bytes));
    // Overwrite [3, 3 + bytes) with new data and read the whole array back.
    std::vector<unsigned char> fresh =
        test::Uniform<unsigned char>(static_cast<int64_t>(bytes), 0, 255.99, test::FreshSeed());
    ASSERT_TRUE(b.CopyToArray(fresh.data(), 3, bytes, *a).ok());
    std::vector<unsigned char> all(total, 0);
    ASSERT_TRUE(b.CopyFromArray(*a, 0, total, all.data()).ok());
    std::memcpy(src.data() + 3, fresh.data(), bytes);
    EXPECT_EQ(0, std::memcmp(all.data(), src.data(), total));
  }
}

TYPED_TEST(BackendConformance, CopiesOutOfRangeAreRejected) {
  Backend& b = *this->backend_;
  auto array = test::Make(b, DType::kFloat64, {4}, nullptr);
  std::vector<char> host(64);
  absl::Status past_end = b.CopyToArray(host.data(), 8, 32, *array);
  EXPECT_EQ(past_end.code(), absl::StatusCode::kOutOfRange) << past_end.message();
  absl::Status wrapping =
      b.CopyFromArray(*array, 16, std::numeric_limits<size_t>::max() - 8, host.data());
  EXPECT_EQ(wrapping.code(), absl::StatusCode::kOutOfRange) << wrapping.message();
  absl::Status offset = b.CopyFromArray(*array, 33, 0, host.data());
  EXPECT_EQ(offset.code(), absl::StatusCode::kOutOfRange) << offset.message();
  absl::Status null_host = b.CopyToArray(nullptr, 0, 8, *array);
  EXPECT_EQ(null_host.code(), absl::StatusCode::kInvalidArgument) << null_host.message();
  absl::Status whole = b.CopyToArray(host.data(), 0, 32, *array);
  EXPECT_TRUE(whole.ok()) << whole.message();

  auto ten = test::Make(b, DType::kFloat64, {10}, nullptr);
  std::vector<double> eleven(11);
  EXPECT_EQ(b.CopyToArray(eleven.data(), 8, 80, *ten).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(b.CopyFromArray(*ten, 0, 88, eleven.data()).code(), absl::StatusCode::kOutOfRange);
}

// Stored values against a rule: the lowest breaking index (of many, spread over
// a large array so that several blocks find one), named as CheckElements names it.
TYPED_TEST(BackendConformance, CheckValuesNamesTheFirstBreakingElement) {
  TRACE_SEED();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const int64_t n = 1 << 20;
  std::vector<double> x = this->Uniform(n, -1e3, 1e3);
  absl::Status ok = this->backend_->CheckValues(*this->Upload({n}, x), "x", kSampleTimeRule);
  EXPECT_TRUE(ok.ok()) << ok.message();
  x[n - 1] = 0;
  x[700001] = 1e200;
  x[900000] = nan;
  absl::Status status = this->backend_->CheckValues(*this->Upload({n}, x), "x", kSampleTimeRule);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  const std::string expected = this->kDType == DType::kFloat32
                                   ? "x[700001] is inf; sample times must be finite"  // rounded
                                   : "x[700001] is 1e+200; sample times must be finite";
  EXPECT_THAT(std::string(status.message()), HasSubstr(expected));
  status = this->backend_->CheckValues(*this->Upload({n}, x), "freqs", kFrequencyRule);
  EXPECT_THAT(std::string(status.message()), HasSubstr(this->kDType == DType::kFloat32
                                                           ? "freqs[700001] is inf"
                                                           : "freqs[700001] is 1e+200"));
  x[700001] = 1;
  x[900000] = 1;
  status = this->backend_->CheckValues(*this->Upload({n}, x), "freqs", kFrequencyRule);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("freqs[1048575] is 0; frequencies must be non-zero"));
}

// ---------------------------------------------------------------------------
// DiscountProduct

TYPED_TEST(BackendConformance, DiscountProductBroadcastsLikeNumPy) {
  TRACE_SEED();
  const std::vector<std::pair<Shape, Shape>> cases = {  // (factors, values)
      {{}, {}}, {{}, {1}}, {{}, {2, 3}}, {{3}, {}}, {{1}, {1}}, {{1}, {7}}, {{7}, {1}}, {{7}, {7}},
      {{}, {1001}}, {{1001}, {}},
      {{4000, 5}, {3, 4000, 5}},  // the seed case
      {{4000, 5}, {100, 4000, 5}}, {{3, 4000, 5}, {4000, 5}}, {{3, 1}, {1, 4}}, {{2, 1, 3}, {4, 1}},
      {{3, 1, 5}, {1, 4, 1}}, {{5}, {333, 5}}, {{5, 1, 7}, {5, 3, 1}}, {{6, 1}, {6, 9}},
      {{1, 9}, {6, 1}}, {{17, 1}, {1, 19}}, {{1000, 1}, {1000, 37}}, {{1, 64}, {9, 64}},
      {{129}, {3, 129}}, {{3, 129}, {129}}, {{2, 1, 3, 1}, {1, 4, 1, 5}},
      {{3, 1, 1, 2, 1}, {4, 1, 2, 3}}, {{1, 2, 1, 3, 1, 2}, {2, 1, 2, 1, 3, 1}},
      {{2, 3, 1, 1, 2, 1, 3}, {1, 1, 2, 2, 1, 3, 1}}, {{2, 1, 3, 1, 5, 1, 7}, {1, 4, 1, 6, 1, 2, 1}},
      {{2, 1, 3, 1, 2, 1, 2, 1}, {1, 3, 1, 2, 1, 2, 1, 3}}, {{1, 1, 1, 1, 1, 1, 1, 1}, {2, 3}},
      {{2, 2, 2, 2, 2, 2, 2, 2}, {2}}, {{2, 3, 4, 5, 6, 7, 8, 9}, {9}}, {{0, 3}, {1, 3}},
      {{0, 5}, {5}}, {{1000003}, {1}}, {{1000003}, {1000003}}, {{200003, 5}, {3, 200003, 5}},
  };

  for (const auto& [fshape, vshape] : cases) {
    SCOPED_TRACE(absl::StrCat("factors ", ShapeToString(fshape), " values ", ShapeToString(vshape)));
    const Shape out_shape = test::BroadcastShape(fshape, vshape);
    std::vector<double> a = this->Uniform(ElementCount(fshape), 0.5, 1.5);
    std::vector<double> b = this->Uniform(ElementCount(vshape), -100, 100);
    auto factors = this->Upload(fshape, a);
    auto values = this->Upload(vshape, b);
    auto out = this->Poisoned(out_shape);
    OpContext ctx;
    absl::Status status = this->backend_->DiscountProduct(*factors, *values, *out, ctx);
    ASSERT_TRUE(status.ok()) << status.message();
    // a * b of two floats is exact in double, so rounding it to T gives T's own
    // product: every backend matches bit for bit.
    std::vector<double> expected = test::BroadcastProduct(a, fshape, b, vshape, out_shape);
    for (double& v : expected) v = static_cast<typename TypeParam::Element>(v);
    test::ExpectNear(this->Download(*out), expected, 0, 0);
    if (ElementCount(out_shape) > 0) EXPECT_GT(ctx.compute_time, absl::ZeroDuration());
  }
}

TYPED_TEST(BackendConformance, DiscountProductRejectsMismatches) {
  std::vector<double> a(6, 1.0), b(4, 1.0);
  auto factors = this->Upload({2, 3}, a);
  auto values = this->Upload({4}, b);
  auto out = this->Poisoned({2, 3});
  absl::Status status = this->backend_->DiscountProduct(*factors, *values, *out, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("factors.shape (2, 3) and values.shape (4,)"));

  auto wrong_out = this->Poisoned({3, 2});
  status = this->backend_->DiscountProduct(*factors, *factors, *wrong_out, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("out.shape"));

  auto other_dtype = this->UploadOther({2, 3}, std::vector<double>(6, 1.0));
  status = this->backend_->DiscountProduct(*factors, *other_dtype, *out, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("values has dtype"));
}

TYPED_TEST(BackendConformance, OperationReportsComputeTime) {
  std::vector<double> a = this->Uniform(1000003, -1, 1);
  auto values = this->Upload({1000003}, a);
  auto out = this->Poisoned({1000003});
  this->ctx_.compute_time = absl::ZeroDuration();
  absl::Status status = this->backend_->DiscountProduct(*values, *values, *out, this->ctx_);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_GT(this->ctx_.compute_time, absl::ZeroDuration());
}

// ---------------------------------------------------------------------------
// Haversine

TYPED_TEST(BackendConformance, HaversineMeshMatchesReference) {
  TRACE_SEED();
  auto with_random = [&](int count) {
    std::vector<GeoPoint> refs = this->RandomRefs(count);
    refs[0] = {30, 101};
    return refs;
  };
  const std::vector<std::pair<LatLonMesh, std::vector<GeoPoint>>> cases = {
      {{{29, 31, 1}, {99, 101, 1}}, with_random(1)},
      {{{29, 31, 1}, {99, 101, 7}}, {{30, 101}}},
      {{{29, 31, 13}, {99, 101, 1}}, {{30, 101}}},
      {{{29, 31, 7}, {99, 101, 13}}, with_random(3)},
      {{{-90, 90, 181}, {-180, 180, 7}}, with_random(2)},  // poles and antipodes
      {{{29, 31, 1000}, {99, 101, 1000}}, with_random(1)},  // the seed mesh
      {{{-10, 10, 3}, {0, 360, 1000003}}, with_random(1)},
      {{{-60, 75, 99}, {-170, 170, 101}}, this->RandomRefs(3)},
      {{{-89, 89, 64}, {0, 359, 64}}, this->RandomRefs(2)},
      {{{10, 10, 5}, {20, 20, 4}}, {{10, 20}}},  // every point on the reference: h = 0
      {{{0, 0, 2}, {0, 180, 2}}, {{0, 0}}},      // antipodes: h = 1
  };
  for (const auto& [mesh, refs] : cases) {
    SCOPED_TRACE(absl::StrCat(refs.size(), " refs, ", mesh.lat.count, " x ", mesh.lon.count));
    const Shape shape = {static_cast<int64_t>(refs.size()), mesh.lat.count, mesh.lon.count};
    auto out = this->Poisoned(shape);
    absl::Status status =
        this->backend_->HaversineMesh(mesh, refs, kDefaultEarthRadiusKm, *out, this->ctx_);
    ASSERT_TRUE(status.ok()) << status.message();
    ExpectWithin(this->Download(*out), test::MeshDistances(mesh, refs, kDefaultEarthRadiusKm),
                 this->ToleranceFor(Check::kHaversineMesh));
  }
}

TYPED_TEST(BackendConformance, HaversinePointsMatchesReference) {
  TRACE_SEED();
  struct PointsCase {
    Shape shape;
    int refs;
    double radius;
  };
  const std::vector<PointsCase> cases = {
      {{1}, 2, 1.5},         {{7}, 2, 1.5},          {{3, 5, 2}, 2, 1.5},
      {{1000003}, 2, 1.5},   {{1}, 1, kDefaultEarthRadiusKm}, {{17}, 3, kDefaultEarthRadiusKm},
      {{3, 5}, 2, kDefaultEarthRadiusKm}, {{100001}, 1, kDefaultEarthRadiusKm},
  };
  for (const PointsCase& c : cases) {
    SCOPED_TRACE(absl::StrCat("points ", ShapeToString(c.shape), " x ", c.refs, " refs"));
    std::vector<double> lat = this->Uniform(ElementCount(c.shape), -90, 90);
    std::vector<double> lon = this->Uniform(ElementCount(c.shape), -180, 540);
    auto lat_array = this->Upload(c.shape, lat);
    auto lon_array = this->Upload(c.shape, lon);
    const std::vector<GeoPoint> refs = this->RandomRefs(c.refs);
    Shape out_shape = {c.refs};
    out_shape.insert(out_shape.end(), c.shape.begin(), c.shape.end());
    auto out = this->Poisoned(out_shape);
    absl::Status status =
        this->backend_->HaversinePoints(*lat_array, *lon_array, refs, c.radius, *out, this->ctx_);
    ASSERT_TRUE(status.ok()) << status.message();
    std::vector<double> expected;
    for (const GeoPoint& ref : refs) {
      for (size_t p = 0; p < lat.size(); ++p) {
        expected.push_back(test::HaversineDistance(ref.lat, ref.lon, lat[p], lon[p], c.radius));
      }
    }
    ExpectWithin(this->Download(*out), expected, this->ToleranceFor(Check::kHaversinePoints));
  }
}

TYPED_TEST(BackendConformance, HaversineRejectsBadRadiusAndShapes) {
  const LatLonMesh mesh = {{0, 1, 2}, {0, 1, 3}};
  const std::vector<GeoPoint> refs = {{0, 0}};
  auto out = this->Poisoned({1, 2, 3});
  for (double radius : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    absl::Status status = this->backend_->HaversineMesh(mesh, refs, radius, *out, this->ctx_);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
    EXPECT_THAT(std::string(status.message()), HasSubstr("radius"));
  }
  auto wrong = this->Poisoned({1, 3, 2});
  absl::Status status =
      this->backend_->HaversineMesh(mesh, refs, kDefaultEarthRadiusKm, *wrong, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();

  std::vector<double> three(3, 1.0), four(4, 1.0);
  auto lat = this->Upload({3}, three);
  auto lon = this->Upload({4}, four);
  auto points_out = this->Poisoned({1, 3});
  status =
      this->backend_->HaversinePoints(*lat, *lon, refs, kDefaultEarthRadiusKm, *points_out, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("lon.shape"));
}

// ---------------------------------------------------------------------------
// Normalize

constexpr NormKind kAllNorms[] = {NormKind::kSum, NormKind::kL1, NormKind::kL2, NormKind::kMaxAbs};

TYPED_TEST(BackendConformance, NormalizeMatchesReference) {
  TRACE_SEED();
  // On a GPU: lane groups of 4 in registers (<= 32 columns), warps in registers
  // (<= 256), warps reading twice (<= 4096), chunked rows (> 4096).
  const std::vector<Shape> shapes = {
      {1},      {7},       {1000003},  {1, 1},    {3, 5},    {3, 7},    {5, 1, 4}, {2, 3, 5},
      {1000, 17}, {257, 33}, {9, 256}, {11, 257}, {3, 1000}, {64, 1000}, {5, 4096}, {7, 4097},
      {1, 40000}, {3, 100003}, {3, 300007}, {1000003, 1}};
  for (NormKind kind : kAllNorms) {
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(absl::StrCat("norm ", NormName(kind), " shape ", ShapeToString(shape)));
      // Positive values for SUM keep x / sum(x) well conditioned.
      std::vector<double> x = this->Uniform(ElementCount(shape), kind == NormKind::kSum ? 0.1 : -1.0, 1.0);
      auto in = this->Upload(shape, x);
      auto out = this->Poisoned(shape);
      absl::Status status = this->backend_->Normalize(*in, kind, *out, this->ctx_);
      ASSERT_TRUE(status.ok()) << status.message();
      ExpectWithin(this->Download(*out), test::NormalizeRows(x, shape.back(), kind),
                   this->ToleranceFor(Check::kNormalize));
    }
  }
}

TYPED_TEST(BackendConformance, NormalizeInPlace) {
  TRACE_SEED();
  std::vector<double> x = this->Uniform(4 * 1000, 0.1, 1);
  auto array = this->Upload({4, 1000}, x);
  absl::Status status = this->backend_->Normalize(*array, NormKind::kL2, *array, this->ctx_);
  ASSERT_TRUE(status.ok()) << status.message();
  ExpectWithin(this->Download(*array), test::NormalizeRows(x, 1000, NormKind::kL2),
               this->ToleranceFor(Check::kNormalize));
}

TYPED_TEST(BackendConformance, NormalizeNamesFirstBadRow) {
  TRACE_SEED();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct BadRowCase {
    Shape shape;
    std::vector<std::pair<int64_t, double>> bad_rows;  // (row, value); the first is reported
    NormKind kind;
    std::string expected;
  };
  std::vector<BadRowCase> cases = {
      {{1}, {{0, 0.0}}, NormKind::kL2, "input row 0 has L2 norm 0;"},
      {{5, 7}, {{3, 0.0}}, NormKind::kL1, "input row 3 has L1 norm 0;"},
      {{5, 7}, {{2, nan}, {4, nan}}, NormKind::kMaxAbs, "input row 2 has max-abs norm nan;"},
      {{5, 7}, {{1, inf}, {4, inf}}, NormKind::kSum, "input row 1 has sum norm inf;"},
      // Many short rows split over threads: still the lowest index.
      {{200000, 7}, {{70001, 0.0}, {199999, 0.0}, {150000, 0.0}}, NormKind::kL2,
       "input row 70001 has L2 norm 0;"},
      // Long rows split into segments.
      {{4, 300007}, {{2, nan}, {3, nan}}, NormKind::kSum, "input row 2 has sum norm nan;"},
  };
  // Short rows (lane groups), a warp per row in registers and in two reads, chunked rows.
  for (int64_t cols : {9, 100, 1000, 20001}) {
    for (NormKind kind : kAllNorms) {
      cases.push_back({{6, cols}, {{3, nan}, {4, 0.0}}, kind,
                       absl::StrCat("input row 3 has ", NormName(kind), " norm nan;")});
    }
  }
  for (const BadRowCase& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.expected, " shape ", ShapeToString(c.shape)));
    const int64_t length = c.shape.back();
    std::vector<double> x = this->Uniform(ElementCount(c.shape), 0.1, 1.0);
    for (const auto& [row, value] : c.bad_rows) {
      if (value == 0.0) {
        std::fill(x.begin() + row * length, x.begin() + (row + 1) * length, 0.0);
      } else {
        x[row * length + length / 2] = value;
      }
    }
    auto in = this->Upload(c.shape, x);
    absl::Status status = this->backend_->Normalize(*in, c.kind, *this->Poisoned(c.shape), this->ctx_);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.expected));
    EXPECT_THAT(std::string(status.message()), HasSubstr("rows must have a finite, non-zero norm"));
    const std::vector<typename TypeParam::Element> rounded(x.begin(), x.end());
    OpContext cpu_ctx;
    const absl::Status on_cpu = this->Cpu().Normalize(
        *test::Put(this->Cpu(), c.shape, rounded), c.kind,
        *test::Poisoned(this->Cpu(), this->kDType, c.shape), cpu_ctx);
    EXPECT_EQ(status.message(), on_cpu.message());
  }
}

TYPED_TEST(BackendConformance, NormalizeSumOfZeroIsRejected) {
  std::vector<double> x = {1, 2, 3, 1, -1, 0};
  auto in = this->Upload({2, 3}, x);
  absl::Status status = this->backend_->Normalize(*in, NormKind::kSum, *this->Poisoned({2, 3}), this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("input row 1 has sum norm 0;"));
}

TYPED_TEST(BackendConformance, NormalizeRejectsScalarsAndEmptyRows) {
  std::vector<double> one = {1};
  auto scalar = this->Upload({}, one);
  absl::Status status = this->backend_->Normalize(*scalar, NormKind::kL2, *scalar, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  std::vector<double> none;
  auto empty = this->Upload({3, 0}, none);
  status = this->backend_->Normalize(*empty, NormKind::kL2, *empty, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
}

// ---------------------------------------------------------------------------
// Cancellation: an operation cancelled before it runs does no work.

TYPED_TEST(BackendConformance, PreCancelledOperationsReturnCancelledAndWriteNothing) {
  std::atomic<bool> cancelled{true};
  this->ctx_.cancelled = &cancelled;
  std::vector<double> values = this->Uniform(1000, 0.1, 1);
  auto a = this->Upload({10, 100}, values);
  auto out = this->Poisoned({10, 100});
  auto mesh_out = this->Poisoned({1, 10, 100});
  auto points_out = this->Poisoned({1, 10, 100});
  const std::vector<GeoPoint> refs = {{30, 101}};
  Backend& b = *this->backend_;
  const auto kCancelled = absl::StatusCode::kCancelled;
  EXPECT_EQ(b.DiscountProduct(*a, *a, *out, this->ctx_).code(), kCancelled);
  EXPECT_EQ(b.Normalize(*a, NormKind::kL2, *out, this->ctx_).code(), kCancelled);
  EXPECT_EQ(b.Normalize(*a, NormKind::kSum, *out, this->ctx_).code(), kCancelled);
  EXPECT_EQ(b.HaversineMesh({{0, 1, 10}, {0, 1, 100}}, refs, kDefaultEarthRadiusKm, *mesh_out,
                            this->ctx_).code(),
            kCancelled);
  EXPECT_EQ(b.HaversinePoints(*a, *a, refs, kDefaultEarthRadiusKm, *points_out, this->ctx_).code(),
            kCancelled);
  EXPECT_EQ(b.LombScargle(*a, *a, nullptr, nullptr, {1, 2, 100}, {}, *out, this->ctx_).code(),
            kCancelled);
  for (const Array* untouched : {out.get(), mesh_out.get(), points_out.get()}) {
    for (double v : this->Download(*untouched)) ASSERT_TRUE(std::isnan(v));
  }
}

}  // namespace
}  // namespace gpucompute
