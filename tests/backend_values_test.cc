// Values at the edges of every backend's arithmetic: haversine points and
// references outside their rules, float64 L2 rows whose squares overflow or
// underflow, cancelling SUM rows and SUM quotients that overflow the dtype. Each
// backend must give the float64 reference's values and the CPU backend's error
// messages word for word. Typed over backends like backend_conformance_test: CUDA
// instances (names carry "cuda", ctest label gpu) skip without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/testing/arrays.h"
#include "tests/testing/conformance.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kEps = std::numeric_limits<double>::epsilon();

template <typename P>
class BackendValues : public test::BackendConformance<P> {
 protected:
  using T = typename P::Element;
  static constexpr bool kFloat32 = sizeof(T) == 4;

  // Normalizes `values` (rows x cols) on this backend; the output, or the status.
  absl::StatusOr<std::vector<double>> Normalize(Backend& b, int64_t rows, int64_t cols,
                                                const std::vector<double>& values, NormKind norm) {
    const std::vector<T> rounded(values.begin(), values.end());
    auto in = test::Put(b, {rows, cols}, rounded);
    auto out = test::Poisoned(b, this->kDType, {rows, cols});
    OpContext ctx;
    absl::Status status = b.Normalize(*in, norm, *out, ctx);
    if (!status.ok()) return status;
    return test::ToDoubles(test::Read<T>(b, *out));
  }

  // This backend refuses with exactly `message`, as the CPU backend does.
  void ExpectNormalizeError(int64_t rows, int64_t cols, const std::vector<double>& values,
                            NormKind norm, const std::string& message) {
    for (Backend* b : {this->backend_, &this->Cpu()}) {
      const absl::Status status = Normalize(*b, rows, cols, values, norm).status();
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << b->name();
      EXPECT_EQ(status.message(), message) << b->name();
    }
  }

  absl::Status Points(const std::vector<double>& lat, const std::vector<double>& lon,
                      const std::vector<GeoPoint>& refs, Backend& b) {
    const int64_t n = static_cast<int64_t>(lat.size());
    auto lat_array = test::Put(b, {n}, std::vector<T>(lat.begin(), lat.end()));
    auto lon_array = test::Put(b, {n}, std::vector<T>(lon.begin(), lon.end()));
    auto out = test::Poisoned(b, this->kDType, {static_cast<int64_t>(refs.size()), n});
    OpContext ctx;
    return b.HaversinePoints(*lat_array, *lon_array, refs, 1.0, *out, ctx);
  }

  void ExpectPointsError(const std::vector<double>& lat, const std::vector<double>& lon,
                         const std::vector<GeoPoint>& refs, const std::string& message) {
    for (Backend* b : {this->backend_, &this->Cpu()}) {
      const absl::Status status = Points(lat, lon, refs, *b);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << b->name();
      EXPECT_EQ(status.message(), message) << b->name();
    }
  }
};

TYPED_TEST_SUITE(BackendValues, test::Subjects, test::SubjectNames);

constexpr char kLatitudeWords[] = "latitude must lie in [-90, 90] degrees";
constexpr char kLongitudeWords[] =
    "longitude must be finite with |lon| <= 1e6 degrees (kMaxAbsLongitude)";

TYPED_TEST(BackendValues, HaversineMeshChecksReferencesAndMeshEnds) {
  struct Case {
    LatLonMesh mesh;
    std::vector<GeoPoint> refs;
    std::string message;
  };
  const Linspace lat = {-10, 10, 3}, lon = {0, 1, 4};
  const std::vector<Case> cases = {
      {{lat, {0, 1.5e6, 4}}, {{0, 0}}, absl::StrCat("mesh.lon_stop is 1.5e+06; ", kLongitudeWords)},
      {{lat, {-1e308, 1e308, 4}}, {{0, 0}},
       absl::StrCat("mesh.lon_start is -1e+308; ", kLongitudeWords)},
      {{{-91, 0, 3}, lon}, {{0, 0}}, absl::StrCat("mesh.lat_start is -91; ", kLatitudeWords)},
      {{{0, kNaN, 3}, lon}, {{0, 0}}, absl::StrCat("mesh.lat_stop is nan; ", kLatitudeWords)},
      {{lat, lon}, {{0, 0}, {0, 1e308}},
       absl::StrCat("references[1].lon is 1e+308; ", kLongitudeWords)},
      {{lat, lon}, {{90.5, 0}}, absl::StrCat("references[0].lat is 90.5; ", kLatitudeWords)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    for (Backend* b : {this->backend_, &this->Cpu()}) {
      auto out = test::Poisoned(*b, this->kDType,
                                {static_cast<int64_t>(c.refs.size()), c.mesh.lat.count,
                                 c.mesh.lon.count});
      OpContext ctx;
      const absl::Status status = b->HaversineMesh(c.mesh, c.refs, 1.0, *out, ctx);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << b->name();
      EXPECT_EQ(status.message(), c.message) << b->name();
    }
  }
}

TYPED_TEST(BackendValues, HaversinePointsChecksReferences) {
  this->ExpectPointsError({0, 1}, {0, 1}, {{kNaN, 0}},
                          absl::StrCat("references[0].lat is nan; ", kLatitudeWords));
  this->ExpectPointsError({0, 1}, {0, 1}, {{0, 0}, {0, -2e6}},
                          absl::StrCat("references[1].lon is -2e+06; ", kLongitudeWords));
}

// Stored points reach no check but the backend's: the first bad latitude, else the
// first bad longitude, is named. Enough points for many GPU blocks.
TYPED_TEST(BackendValues, HaversinePointsChecksStoredPoints) {
  constexpr int64_t kPoints = 5000;
  std::vector<double> lat = this->Uniform(kPoints, -90, 90);
  std::vector<double> lon = this->Uniform(kPoints, -180, 180);
  const std::vector<GeoPoint> refs = {{10, 20}, {-30, 40}};
  lat[4321] = -91;
  lat[1234] = 1000;
  lon[777] = kNaN;
  this->ExpectPointsError(lat, lon, refs, absl::StrCat("lat[1234] is 1000; ", kLatitudeWords));
  lat[1234] = 0;
  lat[4321] = 0;
  lon[3000] = 2e6;
  this->ExpectPointsError(lat, lon, refs, absl::StrCat("lon[777] is nan; ", kLongitudeWords));
  lon[777] = 0;
  this->ExpectPointsError(lat, lon, refs, absl::StrCat("lon[3000] is 2e+06; ", kLongitudeWords));

  // The bounds themselves are points, with the reference's distances.
  lat = {90, -90, 0, 45};
  lon = {0, 1e6, -1e6, 180};
  const int64_t n = static_cast<int64_t>(lat.size());
  Backend& b = *this->backend_;
  auto lat_array = this->Upload({n}, lat);
  auto lon_array = this->Upload({n}, lon);
  auto out = this->Poisoned({2, n});
  const absl::Status status = b.HaversinePoints(*lat_array, *lon_array, refs, 6371.0, *out, this->ctx_);
  ASSERT_TRUE(status.ok()) << status.message();
  std::vector<double> expected;
  for (const GeoPoint& ref : refs) {
    for (int64_t p = 0; p < n; ++p) {
      expected.push_back(test::HaversineDistance(ref.lat, ref.lon, lat[p], lon[p], 6371.0));
    }
  }
  // A longitude of 1e6 degrees computed in T (the GPU's float32) is off by up to
  // 1e6 * eps(T) degrees: that, as a distance, with rounding to spare.
  using T = typename TypeParam::Element;
  const double atol = 4 * 1e6 * std::numeric_limits<T>::epsilon() * 6371.0 * (M_PI / 180);
  test::ExpectNear(this->Download(*out), expected, sizeof(T) == 4 ? 1e-5 : 1e-12, atol);
}

TYPED_TEST(BackendValues, NormalizeL2OfSquaresThatOverflowOrUnderflow) {
  using T = typename TypeParam::Element;
  if constexpr (sizeof(T) == 8) {
    // Rows of 2 (short rows), 100 (a warp per row) and 5000 (chunked); ordinary rows
    // around the scaled one, so the rescue starts mid-tensor.
    for (const int64_t cols : {int64_t{2}, int64_t{100}, int64_t{5000}}) {
      for (const double scale : {1e200, 1e-200, 1e300, 1e-300, 4e-320}) {
        SCOPED_TRACE(absl::StrCat("cols ", cols, " scale ", scale));
        std::vector<double> values = this->Uniform(3 * cols, 0.5, 2);
        for (int64_t c = 0; c < cols; ++c) values[cols + c] *= scale;
        absl::StatusOr<std::vector<double>> out = this->Normalize(*this->backend_, 3, cols, values, NormKind::kL2);
        ASSERT_TRUE(out.ok()) << out.status().message();
        std::vector<double> expected(values.size());
        for (int64_t r = 0; r < 3; ++r) {
          long double squares = 0;  // x86 long double: 1e600 and 1e-640 are in range
          for (int64_t c = 0; c < cols; ++c) squares += static_cast<long double>(values[r * cols + c]) * values[r * cols + c];
          const long double norm = std::sqrt(squares);
          for (int64_t c = 0; c < cols; ++c) {
            expected[r * cols + c] = static_cast<double>(values[r * cols + c] / norm);
          }
        }
        // Subnormal inputs keep only a few digits.
        test::ExpectNear(*out, expected, scale < 1e-300 ? 1e-3 : 1e-14, 0);
      }
    }
    // A norm past the largest double is still refused.
    this->ExpectNormalizeError(1, 2, {1.5e308, 1.5e308}, NormKind::kL2,
                               "input row 0 has L2 norm inf; rows must have a finite, non-zero norm");
  } else {
    // float32 squares accumulate in float64, where they cannot overflow or underflow.
    const float kMax = std::numeric_limits<float>::max();
    const float kTiny = std::numeric_limits<float>::denorm_min();
    for (const float x : {kMax, kTiny}) {
      SCOPED_TRACE(x);
      absl::StatusOr<std::vector<double>> out =
          this->Normalize(*this->backend_, 1, 2, {x, x}, NormKind::kL2);
      ASSERT_TRUE(out.ok()) << out.status().message();
      test::ExpectNear(*out, {std::sqrt(0.5), std::sqrt(0.5)}, 1e-6, 0);
    }
  }
}

// Rows of cancelling +-1e12 pairs among ones and halves, short and long. A
// compensated sum is within about 2 eps |sum| + n eps^2 sum |x| of the exact sum (of
// the small terms); float32 outputs add their own rounding.
TYPED_TEST(BackendValues, NormalizeSumOfCancellingTermsIsCompensated) {
  using T = typename TypeParam::Element;
  for (const int64_t length : {int64_t{4096}, int64_t{1} << 18}) {
    SCOPED_TRACE(length);
    std::vector<double> row(length);
    for (int64_t i = 0; i < length; i += 4) {
      row[i] = static_cast<T>(1e12 * static_cast<double>(1 + (i % 7)) + 0.25);
      row[i + 1] = 1;
      row[i + 2] = -row[i];
      row[i + 3] = (i % 3 == 0) ? 1 : 0.5;
    }
    double exact = 0, sum_abs = 0;
    for (int64_t i = 0; i < length; i += 4) {
      exact += row[i + 1] + row[i + 3];
      sum_abs += 2 * std::abs(row[i]) + row[i + 1] + row[i + 3];
    }
    const double bound = 2 * kEps * exact + static_cast<double>(length) * kEps * kEps * sum_abs +
                         (sizeof(T) == 4 ? 0x1p-22 * exact : 0);
    absl::StatusOr<std::vector<double>> out =
        this->Normalize(*this->backend_, 1, length, row, NormKind::kSum);
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_NEAR(1 / (*out)[1], exact, bound);  // out[1] = 1 / computed sum
  }
}

// Rows of [2^k, 1 + 2^-23, -2^k] repeated: the period does not divide a warp, so every
// lane of a tile sums terms k binades apart, whose plain float64 sums lose the small
// terms' low bits once k passes ~29; compensated, the sum of the small terms stays within
// the bound.
TYPED_TEST(BackendValues, NormalizeSumOfTermsManyBinadesApartIsCompensated) {
  using T = typename TypeParam::Element;
  const double small = 1 + 0x1p-23;
  for (const int64_t length : {int64_t{999}, int64_t{4095}}) {
    for (const int k : {10, 20, 24, 25, 26, 30, 40}) {
      SCOPED_TRACE(absl::StrCat(length, " elements, 2^", k));
      const double big = std::ldexp(1.0, k);
      std::vector<double> row(length);
      double exact = 0, sum_abs = 0;
      for (int64_t i = 0; i < length; ++i) {
        row[i] = i % 3 == 1 ? small : (i % 3 == 0 ? big : -big);
        exact += i % 3 == 1 ? small : 0;
        sum_abs += std::abs(row[i]);
      }
      const double bound = 2 * kEps * exact + static_cast<double>(length) * kEps * kEps * sum_abs +
                           (sizeof(T) == 4 ? 0x1p-22 * exact : 0);
      absl::StatusOr<std::vector<double>> out =
          this->Normalize(*this->backend_, 1, length, row, NormKind::kSum);
      ASSERT_TRUE(out.ok()) << out.status().message();
      EXPECT_NEAR(small / (*out)[1], exact, bound);  // out[1] = small / computed sum
    }
  }
}

// |sum| far below max |x|: the quotients overflow the dtype; the lowest such row is
// named, in short and chunked rows.
TYPED_TEST(BackendValues, NormalizeSumQuotientsThatOverflowAreRefused) {
  using T = typename TypeParam::Element;
  const double big = sizeof(T) == 4 ? 1e30 : 1e300;
  const double tiny = sizeof(T) == 4 ? 1e-10 : 1e-300;
  const std::string message = absl::StrCat(
      "input row 2 has sum norm ", tiny, "; rows must have a finite, non-zero norm that leaves ",
      "every element divided by it finite in ", sizeof(T) == 4 ? "float32" : "float64");
  for (const int64_t cols : {int64_t{3}, int64_t{100}, int64_t{5000}}) {
    SCOPED_TRACE(cols);
    std::vector<double> values(4 * cols, 1.0);
    for (const int64_t row : {2, 3}) {
      std::fill(values.begin() + row * cols, values.begin() + (row + 1) * cols, 0.0);
      values[row * cols] = big;
      values[row * cols + 1] = -big;
      values[row * cols + 2] = tiny;
    }
    this->ExpectNormalizeError(4, cols, values, NormKind::kSum, message);
  }
}

}  // namespace
}  // namespace gpucompute
