// Hostile neighbours: finite inputs whose results overflow, values
// that no rule bounded, empty shapes counted as huge, norms that over- or
// underflow, client strings echoed unbounded, and chunks too large for a default
// client. Each case goes over the wire with the raw stubs (no client checks) and
// gets its status code and a message naming the field and the limit; every OK
// result is finite. Kernel-level checks of the CPU backend follow.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/dtype.h"
#include "server/echo.h"
#include "tests/testing/arrays.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

namespace v1 = ::gpucompute::v1;
using ::testing::HasSubstr;
using test::F32;
using test::F64;
using test::Operand;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kHugeExtent = int64_t{1} << 40;

// What came back: the status and, when OK, the result as float64.
struct Reply {
  grpc::Status status;
  std::vector<double> values;
};

struct Case {
  std::string name;
  grpc::StatusCode code;
  std::string message;  // a substring; empty for OK
  std::function<Reply()> call;
};

class HostileInputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig config = test::LoopbackConfig();
    config.max_elements = 1 << 24;
    auto server = test::TestServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
    // A client with gRPC's defaults: 4 MiB receive limit.
    default_compute_ = v1::Compute::NewStub(
        grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  }

  // Reads a result stream to the end; the data chunks as float64 of `dtype`.
  template <typename Reader>
  static Reply Drain(Reader& reader) {
    Reply reply;
    v1::ResultChunk chunk;
    v1::DType dtype = v1::FLOAT64;
    std::string bytes;
    while (reader.Read(&chunk)) {
      if (chunk.has_header()) dtype = chunk.header().dtype();
      if (chunk.has_data()) bytes += chunk.data().data();
    }
    reply.status = reader.Finish();
    if (dtype == v1::FLOAT32) {
      std::vector<float> f(bytes.size() / 4);
      std::memcpy(f.data(), bytes.data(), f.size() * 4);
      reply.values.assign(f.begin(), f.end());
    } else {
      reply.values.resize(bytes.size() / 8);
      std::memcpy(reply.values.data(), bytes.data(), reply.values.size() * 8);
    }
    return reply;
  }
  template <typename Request, typename Method>
  Reply Stream(v1::Compute::Stub& stub, Method method, const Request& request) {
    grpc::ClientContext context;
    auto reader = (stub.*method)(&context, request);
    return Drain(*reader);
  }
  Reply Discount(const v1::DiscountProductRequest& r) {
    return Stream(server_->compute(), &v1::Compute::Stub::DiscountProduct, r);
  }
  Reply Haversine(const v1::HaversineGridRequest& r) {
    return Stream(server_->compute(), &v1::Compute::Stub::HaversineGrid, r);
  }
  Reply Normalize(const v1::NormalizeRequest& r) {
    return Stream(server_->compute(), &v1::Compute::Stub::Normalize, r);
  }
  Reply Lomb(const v1::LombScargleRequest& r) {
    return Stream(server_->compute(), &v1::Compute::Stub::LombScargle, r);
  }
  Reply Download(const std::string& id) {
    grpc::ClientContext context;
    v1::DownloadRequest request;
    request.set_buffer_id(id);
    auto reader = server_->buffers().Download(&context, request);
    return Drain(*reader);
  }
  Reply Delete(const std::string& id) {
    grpc::ClientContext context;
    v1::DeleteRequest request;
    request.set_buffer_id(id);
    v1::DeleteResponse response;
    return {server_->buffers().Delete(&context, request, &response), {}};
  }

  static v1::HaversineGridRequest Mesh(double lon_start, double lon_stop, double radius = 0) {
    v1::HaversineGridRequest r;
    v1::LatLonMesh* m = r.mutable_mesh();
    m->set_lat_start(-10);
    m->set_lat_stop(10);
    m->set_n_lat(3);
    m->set_lon_start(lon_start);
    m->set_lon_stop(lon_stop);
    m->set_n_lon(3);
    v1::GeoPoint* p = r.add_references();
    p->set_lat(0);
    p->set_lon(0);
    r.set_radius(radius);
    return r;
  }
  static v1::HaversineGridRequest Points(std::vector<double> lat, std::vector<double> lon) {
    v1::HaversineGridRequest r = Mesh(0, 1);
    const Shape shape = {static_cast<int64_t>(lat.size())};
    *r.mutable_points()->mutable_lat() = Operand(F64(std::move(lat), shape));
    *r.mutable_points()->mutable_lon() = Operand(F64(std::move(lon), shape));
    return r;
  }
  static v1::LombScargleRequest LombWith(std::vector<double> x, std::vector<double> freqs) {
    v1::LombScargleRequest r;
    *r.mutable_x() = Operand(F64(std::move(x), {4}));
    *r.mutable_y() = Operand(F64({1, -1, 0.5, 0.25}, {4}));
    const Shape shape = {static_cast<int64_t>(freqs.size())};
    *r.mutable_freqs() = Operand(F64(std::move(freqs), shape));
    return r;
  }
  static v1::LombScargleRequest Grid(double start, double stop, uint64_t count) {
    v1::LombScargleRequest r = LombWith({0.1, 0.7, 1.3, 2.9}, {1});
    r.mutable_freq_grid()->set_start(start);
    r.mutable_freq_grid()->set_stop(stop);
    r.mutable_freq_grid()->set_count(count);
    return r;
  }
  static v1::NormalizeRequest NormalizeOf(v1::Tensor input, v1::Norm norm) {
    v1::NormalizeRequest r;
    *r.mutable_input() = Operand(std::move(input));
    r.set_norm(norm);
    return r;
  }
  static v1::Tensor EmptyHuge(Shape shape) {
    v1::Tensor t;
    t.set_dtype(v1::FLOAT64);
    for (int64_t extent : shape) t.add_shape(extent);
    return t;
  }
  static v1::DiscountProductRequest DiscountOn(v1::Operand factors) {
    v1::DiscountProductRequest r;
    *r.mutable_factors() = std::move(factors);
    *r.mutable_values() = Operand(F64({1, 2}, {2}));
    return r;
  }
  static v1::Operand Id(std::string id) {
    v1::Operand operand;
    operand.set_buffer_id(std::move(id));
    return operand;
  }

  std::unique_ptr<test::TestServer> server_;
  std::unique_ptr<v1::Compute::Stub> default_compute_;
};

TEST_F(HostileInputsTest, EveryCaseGetsItsCodeAndMessageAndEveryOkResultIsFinite) {
  using R = grpc::StatusCode;
  const auto INVALID = R::INVALID_ARGUMENT;
  const std::string huge_id(200'000, '0');
  const std::vector<Case> cases = {
      // Finite inputs whose results overflow.
      {"radius 1e308", INVALID, "radius is 1e+308; it must be finite, > 0 and <= 1e30",
       [&] { return Haversine(Mesh(0, 1, 1e308)); }},
      {"radius at the bound", R::OK, "", [&] { return Haversine(Mesh(0, 1, 1e30)); }},
      {"mesh longitudes +-1e308", INVALID,
       "mesh.lon_start is -1e+308; longitude must be finite with |lon| <= 1e6 degrees",
       [&] { return Haversine(Mesh(-1e308, 1e308)); }},
      {"mesh lon_stop past the bound", INVALID, "mesh.lon_stop is 1.5e+06; longitude must be",
       [&] { return Haversine(Mesh(0, 1.5e6)); }},
      {"reference longitude 1e308", INVALID, "references[0].lon is 1e+308; longitude must be",
       [&] { return Haversine([] { auto r = Mesh(0, 1); r.mutable_references(0)->set_lon(1e308); return r; }()); }},
      {"mesh longitudes at the bound", R::OK, "", [&] { return Haversine(Mesh(-1e6, 1e6)); }},
      {"frequency grid +-1e308", INVALID,
       "freq_grid.start is -1e+308; frequencies must be non-zero (SciPy raises "
       "ZeroDivisionError) and finite with |f| <= 1e150",
       [&] { return Lomb(Grid(-1e308, 1e308, 4)); }},
      {"frequency grid through 0", INVALID, "freq_grid point 1 is 0; frequencies must be non-zero",
       [&] { return Lomb(Grid(-1, 1, 3)); }},
      {"frequency grid from 0", INVALID, "freq_grid.start is 0; frequencies must be non-zero",
       [&] { return Lomb(Grid(0, 1, 5)); }},
      {"frequency grid across 0, missing it", R::OK, "", [&] { return Lomb(Grid(-1, 1, 4)); }},
      // Haversine points validated like mesh and reference points.
      {"points latitude 1000", INVALID, "points.lat[1] is 1000; latitude must lie in [-90, 90]",
       [&] { return Haversine(Points({10, 1000}, {0, 0})); }},
      {"points latitude NaN", INVALID, "points.lat[0] is nan; latitude must lie in [-90, 90]",
       [&] { return Haversine(Points({kNaN, 0}, {0, 0})); }},
      {"points longitude inf", INVALID, "points.lon[1] is inf; longitude must be finite",
       [&] { return Haversine(Points({0, 0}, {0, kInf})); }},
      {"points float32 latitude -91", INVALID, "points.lat[0] is -91; latitude must lie",
       [&] { return Haversine([] { auto r = Points({0}, {0});
          *r.mutable_points()->mutable_lat() = Operand(F32({-91}, {1}));
          *r.mutable_points()->mutable_lon() = Operand(F32({0}, {1})); return r; }()); }},
      // Lomb-Scargle x and freqs (SciPy 1.10 raises ZeroDivisionError at f = 0).
      {"lombscargle x NaN", INVALID, "x[2] is nan; sample times must be finite with |x| <= 1e150",
       [&] { return Lomb(LombWith({0.1, 0.7, kNaN, 2.9}, {1})); }},
      {"lombscargle x -inf", INVALID, "x[0] is -inf; sample times must be finite",
       [&] { return Lomb(LombWith({-kInf, 0.7, 1.3, 2.9}, {1})); }},
      {"lombscargle freqs inf", INVALID, "freqs[1] is inf; frequencies must be",
       [&] { return Lomb(LombWith({0.1, 0.7, 1.3, 2.9}, {1, kInf})); }},
      {"lombscargle freqs NaN", INVALID, "freqs[0] is nan; frequencies must be",
       [&] { return Lomb(LombWith({0.1, 0.7, 1.3, 2.9}, {kNaN})); }},
      {"lombscargle zero frequency", INVALID,
       "freqs[1] is 0; frequencies must be non-zero (SciPy raises ZeroDivisionError)",
       [&] { return Lomb(LombWith({0.1, 0.7, 1.3, 2.9}, {1, 0})); }},
      {"lombscargle negative frequency", R::OK, "",
       [&] { return Lomb(LombWith({0.1, 0.7, 1.3, 2.9}, {-1, 2})); }},
      // Empty shapes are empty, however large their other extents.
      {"factors (2^40, 0)", INVALID,
       "factors.shape (1099511627776, 0) is empty; operands need >= 1 element",
       [&] { return Discount(DiscountOn(Operand(EmptyHuge({kHugeExtent, 0})))); }},
      {"normalize input (2^40, 0)", INVALID,
       "input.shape (1099511627776, 0) has empty rows (last axis is 0)",
       [&] { return Normalize(NormalizeOf(EmptyHuge({kHugeExtent, 0}), v1::NORM_SUM)); }},
      // Norms whose squares over- or underflow, and quotients that overflow.
      {"L2 of [1e200, 1e200]", R::OK, "",
       [&] { return Normalize(NormalizeOf(F64({1e200, 1e200}, {2}), v1::NORM_L2)); }},
      {"L2 of [1e-200, 1e-200]", R::OK, "",
       [&] { return Normalize(NormalizeOf(F64({1e-200, 1e-200}, {2}), v1::NORM_L2)); }},
      {"float32 SUM tiny next to its elements", INVALID,
       "input row 0 has sum norm 1e-10; rows must have a finite, non-zero norm "
       "that leaves every element divided by it finite in float32",
       [&] { return Normalize(NormalizeOf(F32({1e30, -1e30, 1e-10}, {3}), v1::NORM_SUM)); }},
      // Client strings: bounded at admission, escaped when quoted.
      {"200 KB buffer id", INVALID, "values.buffer_id has 200000 bytes; buffer ids have 32",
       [&] { return Discount([&] { auto r = DiscountOn(Operand(F64({1}, {1})));
          *r.mutable_values() = Id(huge_id); return r; }()); }},
      {"200 KB buffer id, Download", INVALID, "buffer_id has 200000 bytes; buffer ids have 32",
       [&] { return Download(huge_id); }},
      {"200 KB buffer id, Delete", INVALID, "buffer_id has 200000 bytes; buffer ids have 32",
       [&] { return Delete(huge_id); }},
      {"buffer id with a newline is escaped", R::NOT_FOUND,
       "factors.buffer_id 'bad\\nid' is not a stored buffer",
       [&] { return Discount(DiscountOn(Id("bad\nid"))); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Reply reply = c.call();
    EXPECT_EQ(reply.status.error_code(), c.code) << reply.status.error_message();
    EXPECT_THAT(reply.status.error_message(), HasSubstr(c.message));
    if (reply.status.ok()) {
      EXPECT_FALSE(reply.values.empty());
      for (double v : reply.values) EXPECT_TRUE(std::isfinite(v)) << v;
    }
  }
  // Still serving.
  EXPECT_TRUE(Haversine(Mesh(0, 1)).status.ok());
}

// Stored x and freqs are checked on the backend before the run, with the
// messages inline data gets.
TEST_F(HostileInputsTest, StoredLombScargleSampleTimesAndFrequenciesAreChecked) {
  const auto store = [&](std::vector<double> values) {
    const int64_t n = static_cast<int64_t>(values.size());
    absl::StatusOr<v1::BufferInfo> info =
        server_->client().Upload("", F64(std::move(values), {n}));
    EXPECT_TRUE(info.ok()) << info.status().message();
    return info.ok() ? Id(info->id()) : v1::Operand();
  };
  v1::LombScargleRequest bad_x = LombWith({0.1, 0.7, 1.3, 2.9}, {1});
  *bad_x.mutable_x() = store({0.1, 0.7, 1.3, kNaN});
  Reply reply = Lomb(bad_x);
  EXPECT_EQ(reply.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(reply.status.error_message(),
              HasSubstr("x[3] is nan; sample times must be finite with |x| <= 1e150"));

  v1::LombScargleRequest bad_freqs = LombWith({0.1, 0.7, 1.3, 2.9}, {1});
  *bad_freqs.mutable_freqs() = store({1, 2, 0});
  reply = Lomb(bad_freqs);
  EXPECT_EQ(reply.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(reply.status.error_message(),
              HasSubstr("freqs[2] is 0; frequencies must be non-zero"));

  v1::LombScargleRequest good = LombWith({0.1, 0.7, 1.3, 2.9}, {1});
  *good.mutable_x() = store({0.1, 0.7, 1.3, 2.9});
  *good.mutable_freqs() = store({1, 2, -3});
  reply = Lomb(good);
  EXPECT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(reply.values.size(), 3u);
}

TEST_F(HostileInputsTest, ScaledL2NormsAreTheTrueOnes) {
  const Reply big = Normalize(NormalizeOf(F64({3e200, 4e200}, {2}), v1::NORM_L2));
  ASSERT_TRUE(big.status.ok()) << big.status.error_message();
  EXPECT_THAT(big.values, testing::ElementsAre(testing::DoubleNear(0.6, 1e-15),
                                               testing::DoubleNear(0.8, 1e-15)));
  const Reply tiny = Normalize(NormalizeOf(F64({3e-200, 4e-200}, {2}), v1::NORM_L2));
  ASSERT_TRUE(tiny.status.ok()) << tiny.status.error_message();
  EXPECT_THAT(tiny.values, testing::ElementsAre(testing::DoubleNear(0.6, 1e-15),
                                                testing::DoubleNear(0.8, 1e-15)));
}

TEST_F(HostileInputsTest, LargestChunkReachesADefaultClient) {
  // 4.5 MiB of float64 in chunks of the largest size allowed (4 MiB).
  const int64_t n = (int64_t{9} << 20) / 2 / 8;
  v1::NormalizeRequest request = NormalizeOf(F64(std::vector<double>(n, 1.0), {n}), v1::NORM_MAX_ABS);
  request.mutable_output()->set_chunk_bytes(4u << 20);
  const Reply reply = Stream(*default_compute_, &v1::Compute::Stub::Normalize, request);
  ASSERT_TRUE(reply.status.ok()) << reply.status.error_message();
  EXPECT_EQ(reply.values.size(), static_cast<size_t>(n));
}

// ---- kernel level -----------------------------------------------------------------

TEST(HostileKernelsTest, EmptyShapeCountsZeroElementsHoweverLargeTheOtherExtents) {
  absl::StatusOr<int64_t> count = CheckedElementCount({kHugeExtent, 0}, 1 << 20, "x");
  ASSERT_TRUE(count.ok()) << count.status().message();
  EXPECT_EQ(*count, 0);
  count = CheckedElementCount({kHugeExtent, kHugeExtent, 0}, 1 << 20, "x");
  ASSERT_TRUE(count.ok()) << count.status().message();
  EXPECT_EQ(*count, 0);
  EXPECT_FALSE(CheckedElementCount({kHugeExtent, 0, -1}, 1 << 20, "x").ok());
}

TEST(HostileKernelsTest, QuotedClientStringsAreBoundedAndEscaped) {
  EXPECT_EQ(QuoteClientString("feedface"), "'feedface'");
  EXPECT_EQ(QuoteClientString("a'b\n"), "'a\\'b\\n'");
  const std::string quoted = QuoteClientString(std::string(200'000, 'z'));
  EXPECT_EQ(quoted, "'" + std::string(kMaxQuotedBytes, 'z') + "'... (200000 bytes)");
}

class CpuNormalizeTest : public ::testing::Test {
 protected:
  template <typename T>
  absl::StatusOr<std::vector<double>> Run(const std::vector<T>& row, NormKind norm) {
    const Shape shape = {static_cast<int64_t>(row.size())};
    std::shared_ptr<Array> in = test::Put(*backend_, shape, row);
    std::shared_ptr<Array> out = test::Poisoned(*backend_, test::DTypeOf<T>(), shape);
    OpContext ctx;
    absl::Status status = backend_->Normalize(*in, norm, *out, ctx);
    if (!status.ok()) return status;
    return test::ToDoubles(test::Read<T>(*backend_, *out));
  }
  std::unique_ptr<Backend> backend_ = CreateCpuBackend(2);
};

// Rows of cancelling +-1e12 pairs among ones and halves, short (one thread) and
// long (segments over the pool). Compensated sums are within about
// 2 eps |sum| + n eps^2 sum |x| of the exact sum (the small terms); the plain
// within-block sums before were off by ~1e-5 relative.
TEST_F(CpuNormalizeTest, SumOfCancellingLargeTermsIsCompensatedWithinBlocks) {
  constexpr double kEps = std::numeric_limits<double>::epsilon();
  for (int64_t length : {int64_t{4096}, int64_t{1} << 18}) {
    SCOPED_TRACE(length);
    std::vector<double> row(length);
    double exact = 0;
    double sum_abs = 0;
    for (int64_t i = 0; i < length; i += 4) {
      row[i] = 1e12 * static_cast<double>(1 + (i % 7)) + 0.25;
      row[i + 1] = 1;
      row[i + 2] = -row[i];
      row[i + 3] = (i % 3 == 0) ? 1 : 0.5;
      exact += row[i + 1] + row[i + 3];  // exact: small integers and halves
      sum_abs += 2 * row[i] + row[i + 1] + row[i + 3];
    }
    const double bound = 2 * kEps * exact + static_cast<double>(length) * kEps * kEps * sum_abs;
    absl::StatusOr<std::vector<double>> out = Run(row, NormKind::kSum);
    ASSERT_TRUE(out.ok()) << out.status().message();
    // out[1] = 1 / computed sum.
    EXPECT_NEAR(1 / (*out)[1], exact, bound);
  }
}

TEST_F(CpuNormalizeTest, L2ScalesRowsWhoseSquaresOverflowOrUnderflow) {
  for (double scale : {1e200, 1e-200, 1e300, 1e-300, 4e-320}) {
    SCOPED_TRACE(scale);
    absl::StatusOr<std::vector<double>> out = Run<double>({3 * scale, 4 * scale}, NormKind::kL2);
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_NEAR((*out)[0], 0.6, scale < 1e-300 ? 1e-3 : 1e-15);
    EXPECT_NEAR((*out)[1], 0.8, scale < 1e-300 ? 1e-3 : 1e-15);
  }
  // One huge element among ordinary ones, past one block.
  std::vector<double> row(3000, 1.0);
  row[2500] = 1e250;
  absl::StatusOr<std::vector<double>> out = Run(row, NormKind::kL2);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_DOUBLE_EQ((*out)[2500], 1.0);
  EXPECT_NEAR((*out)[0], 1e-250, 1e-264);
  // A norm past the largest double is still refused.
  absl::Status inf = Run<double>({1.5e308, 1.5e308}, NormKind::kL2).status();
  EXPECT_THAT(std::string(inf.message()), HasSubstr("L2 norm inf"));
}

TEST_F(CpuNormalizeTest, SumQuotientsThatOverflowTheDtypeAreRefused) {
  absl::Status f32 = Run<float>({1e30f, -1e30f, 1e-10f}, NormKind::kSum).status();
  EXPECT_EQ(f32.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(f32.message()), HasSubstr("finite in float32"));
  absl::Status f64 = Run<double>({1e300, -1e300, 1e-300}, NormKind::kSum).status();
  EXPECT_THAT(std::string(f64.message()), HasSubstr("input row 0 has sum norm 1e-300"));
  EXPECT_THAT(std::string(f64.message()), HasSubstr("finite in float64"));
}

TEST(CpuHaversineTest, StoredPointsAreCheckedByTheBackend) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  std::shared_ptr<Array> lat = test::Put<double>(*backend, {3}, {0, 1000, 0});
  std::shared_ptr<Array> lon = test::Put<double>(*backend, {3}, {0, 0, kNaN});
  std::shared_ptr<Array> out = test::Poisoned(*backend, DType::kFloat64, {1, 3});
  const std::vector<GeoPoint> refs = {{0, 0}};
  OpContext ctx;
  absl::Status status = backend->HaversinePoints(*lat, *lon, refs, 1.0, *out, ctx);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("lat[1] is 1000; latitude must lie"));
  lat = test::Put<double>(*backend, {3}, {0, 10, 0});
  status = backend->HaversinePoints(*lat, *lon, refs, 1.0, *out, ctx);
  EXPECT_THAT(std::string(status.message()), HasSubstr("lon[2] is nan; longitude must be"));
}

}  // namespace
}  // namespace gpucompute
