// A table of malformed requests, field by field through every message, sent
// with the raw stubs (no client-side checks): each must get its status code and
// a message naming the field, and the server must keep serving throughout.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

namespace v1 = ::gpucompute::v1;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using test::F32;
using test::F64;
using test::Operand;

struct Case {
  std::string name;
  grpc::StatusCode code;
  std::string message;
  std::function<grpc::Status()> call;
  std::string reason = "";  // a second part of the message, when there is one
};

class MalformedRequestsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(test::LoopbackConfig()); }

  void Start(ServerConfig config) {
    config.buffer_quota_bytes = 1 << 20;
    config.max_elements = 1 << 24;
    auto server = test::TestServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
  }

  template <typename Request, typename Method>
  grpc::Status Stream(Method method, const Request& request) {
    grpc::ClientContext context;
    auto reader = (server_->compute().*method)(&context, request);
    v1::ResultChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  }
  grpc::Status Discount(const v1::DiscountProductRequest& r) {
    return Stream(&v1::Compute::Stub::DiscountProduct, r);
  }
  grpc::Status Haversine(const v1::HaversineGridRequest& r) {
    return Stream(&v1::Compute::Stub::HaversineGrid, r);
  }
  grpc::Status Normalize(const v1::NormalizeRequest& r) {
    return Stream(&v1::Compute::Stub::Normalize, r);
  }
  grpc::Status Lomb(const v1::LombScargleRequest& r) {
    return Stream(&v1::Compute::Stub::LombScargle, r);
  }
  grpc::Status Upload(const std::vector<v1::UploadRequest>& messages) {
    grpc::ClientContext context;
    v1::BufferInfo info;
    auto writer = server_->buffers().Upload(&context, &info);
    for (const auto& m : messages) {
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }
  grpc::Status Download(const v1::DownloadRequest& r) {
    grpc::ClientContext context;
    auto reader = server_->buffers().Download(&context, r);
    v1::ResultChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  }

  // Valid requests that each case breaks in one place.
  static v1::DiscountProductRequest GoodDiscount() {
    v1::DiscountProductRequest r;
    *r.mutable_factors() = Operand(F64({1, 2}, {2}));
    *r.mutable_values() = Operand(F64({1, 2, 3, 4}, {2, 2}));
    return r;
  }
  static v1::HaversineGridRequest GoodMesh() {
    v1::HaversineGridRequest r;
    v1::LatLonMesh* m = r.mutable_mesh();
    m->set_lat_start(29);
    m->set_lat_stop(31);
    m->set_n_lat(3);
    m->set_lon_start(99);
    m->set_lon_stop(101);
    m->set_n_lon(3);
    v1::GeoPoint* p = r.add_references();
    p->set_lat(30);
    p->set_lon(101);
    return r;
  }
  static v1::HaversineGridRequest GoodPoints() {
    v1::HaversineGridRequest r = GoodMesh();
    *r.mutable_points()->mutable_lat() = Operand(F64({1, 2}, {2}));
    *r.mutable_points()->mutable_lon() = Operand(F64({3, 4}, {2}));
    return r;
  }
  static v1::NormalizeRequest GoodNormalize() {
    v1::NormalizeRequest r;
    *r.mutable_input() = Operand(F64({1, 2, 3, 4}, {2, 2}));
    return r;
  }
  static v1::LombScargleRequest GoodLomb() {
    v1::LombScargleRequest r;
    *r.mutable_x() = Operand(F64({0.1, 0.7, 1.3, 2.9}, {4}));
    *r.mutable_y() = Operand(F64({1, -1, 0.5, 0.25}, {4}));
    *r.mutable_freqs() = Operand(F64({0.5, 1.0}, {2}));
    return r;
  }
  static v1::UploadRequest Header(v1::DType dtype, std::vector<int64_t> shape,
                                  std::string name = "x") {
    v1::UploadRequest m;
    m.mutable_header()->set_dtype(dtype);
    for (int64_t e : shape) m.mutable_header()->add_shape(e);
    m.mutable_header()->set_name(std::move(name));
    return m;
  }
  static v1::UploadRequest Data(size_t bytes) {
    v1::UploadRequest m;
    m.set_data(std::string(bytes, '\x01'));
    return m;
  }

  template <typename Request, typename Mutate>
  static Request With(Request request, Mutate mutate) {
    mutate(request);
    return request;
  }

  // Sends `messages` as they are to `method` ("/gpucompute.v1.Compute/Normalize"),
  // half-closes, reads every reply and returns the status.
  grpc::Status SendBytes(const std::string& method, const std::vector<std::string>& messages) {
    grpc::GenericStub stub(server_->channel());
    grpc::CompletionQueue queue;
    grpc::ClientContext context;
    auto next = [&queue] {
      void* tag = nullptr;
      bool ok = false;
      return queue.Next(&tag, &ok) && ok;
    };
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
        stub.PrepareCall(&context, method, &queue);
    call->StartCall(nullptr);
    next();
    for (const std::string& message : messages) {
      grpc::Slice slice(message);
      call->Write(grpc::ByteBuffer(&slice, 1), nullptr);
      if (!next()) break;
    }
    call->WritesDone(nullptr);
    next();
    grpc::ByteBuffer reply;
    do call->Read(&reply, nullptr);
    while (next());
    grpc::Status status;
    call->Finish(&status, nullptr);
    next();
    queue.Shutdown();
    while (next()) {
    }
    return status;
  }

  // Runs every case, checking that the server still answers health checks after each.
  void ExpectEach(const std::vector<Case>& cases) {
    client::Client& healthy = server_->client();
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name);
      const grpc::Status status = c.call();
      EXPECT_EQ(status.error_code(), c.code) << status.error_message();
      EXPECT_THAT(status.error_message(), ::testing::HasSubstr(c.message));
      EXPECT_THAT(status.error_message(), ::testing::HasSubstr(c.reason));
      ASSERT_EQ(*healthy.Health(), grpc::health::v1::HealthCheckResponse::SERVING);
    }
  }

  std::unique_ptr<test::TestServer> server_;
};

TEST_F(MalformedRequestsTest, EveryCaseGetsItsCodeAndMessageAndTheServerKeepsServing) {
  using R = grpc::StatusCode;
  const auto INVALID = R::INVALID_ARGUMENT;
  std::vector<Case> cases = {
      // Tensor, through DiscountProduct.factors
      {"tensor dtype unspecified", INVALID, "factors.dtype is DTYPE_UNSPECIFIED",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.mutable_factors()->mutable_tensor()->set_dtype(v1::DTYPE_UNSPECIFIED); })); }},
      {"tensor dtype unknown enum", INVALID, "factors.dtype has unknown value 99",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.mutable_factors()->mutable_tensor()->set_dtype(static_cast<v1::DType>(99)); })); }},
      {"tensor negative extent", INVALID, "factors.shape[0] is -2",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.mutable_factors()->mutable_tensor()->set_shape(0, -2); })); }},
      {"tensor overflowing shape", INVALID, "max_elements",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) {
          auto* t = r.mutable_factors()->mutable_tensor();
          t->set_shape(0, int64_t{1} << 62);
          t->add_shape(int64_t{1} << 62); })); }},
      {"tensor rank 9", INVALID, "factors.shape has rank 9",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) {
          auto* t = r.mutable_factors()->mutable_tensor();
          for (int i = 0; i < 8; ++i) t->add_shape(1); })); }},
      {"tensor data short", INVALID, "factors.data has 15 bytes",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.mutable_factors()->mutable_tensor()->mutable_data()->resize(15); })); }},
      {"tensor data short names the size needed", INVALID, "input.data has 31 bytes but shape (4,) of float64 needs 32",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) {
          *r.mutable_input() = Operand(F64({1, 2, 3, 4}, {4}));
          r.mutable_input()->mutable_tensor()->mutable_data()->resize(31); })); }},
      {"tensor dtype unknown, through Normalize", INVALID, "input.dtype has unknown value 7",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { r.mutable_input()->mutable_tensor()->set_dtype(static_cast<v1::DType>(7)); })); }},
      {"tensor dtype unspecified, through Normalize", INVALID, "input.dtype is DTYPE_UNSPECIFIED",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { r.mutable_input()->mutable_tensor()->set_dtype(v1::DTYPE_UNSPECIFIED); })); }},
      {"tensor 2^80 elements", INVALID, "elements (the server's max_elements)",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) {
          auto* t = r.mutable_input()->mutable_tensor();
          t->clear_shape();
          t->add_shape(int64_t{1} << 40);
          t->add_shape(int64_t{1} << 40); })); }},
      {"tensor rank 9 names the limit", INVALID, "input.shape has rank 9; the limit is 8",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { *r.mutable_input() = Operand(F64({1}, {1, 1, 1, 1, 1, 1, 1, 1, 1})); })); }},
      {"tensor negative extent, through Normalize", INVALID, "input.shape[0] is -3",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { r.mutable_input()->mutable_tensor()->set_shape(0, -3); })); }},
      {"tensor data long", INVALID, "factors.data has 17 bytes",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.mutable_factors()->mutable_tensor()->mutable_data()->resize(17); })); }},
      // Operand
      {"operand oneof empty", INVALID, "values is not set",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.clear_values(); })); }},
      {"operand unknown buffer", R::NOT_FOUND, "values.buffer_id 'feedface' is not a stored buffer",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.mutable_values()->set_buffer_id("feedface"); })); }},
      {"operand foreign buffer, through Normalize", R::FAILED_PRECONDITION,
       "input.buffer_id '00000000000000000000000000000000' was stored by replica instance 00000000",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { r.mutable_input()->set_buffer_id(std::string(32, '0')); })); }},
      {"operand empty buffer id", R::NOT_FOUND, "values.buffer_id '' is not a stored buffer",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.mutable_values()->set_buffer_id(""); })); }},
      // OutputOptions
      {"chunk_bytes below the minimum", INVALID, "output.chunk_bytes is 100; it must lie in",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.mutable_output()->set_chunk_bytes(100); })); }},
      {"chunk_bytes 1 names the range", INVALID, "output.chunk_bytes is 1; it must lie in [4096, 4194304]",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.mutable_output()->set_chunk_bytes(1); })); }},
      {"chunk_bytes 8 MiB", INVALID, "output.chunk_bytes is 8388608",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { r.mutable_output()->set_chunk_bytes(8u << 20); })); }},
      {"chunk_bytes above the maximum", INVALID, "output.chunk_bytes is 4294967295",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.mutable_output()->set_chunk_bytes(0xffffffffu); })); }},
      {"buffer_name too long", INVALID, "output.buffer_name has 300 bytes; the limit is 256",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.mutable_output()->set_buffer_name(std::string(300, 'n')); })); }},
      {"kept result over quota", R::RESOURCE_EXHAUSTED, "buffer quota (buffer_quota_bytes 1048576)",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) {
          r.mutable_mesh()->set_n_lat(1000);
          r.mutable_mesh()->set_n_lon(1000);
          r.mutable_output()->set_keep_on_device(true); })); }},
      // DiscountProduct
      {"discount factors missing", INVALID, "factors is not set",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { r.clear_factors(); })); }},
      {"discount not broadcastable", INVALID, "do not broadcast",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { *r.mutable_factors() = Operand(F64({1, 2, 3}, {3})); })); }},
      {"discount not broadcastable names both shapes", INVALID,
       "factors.shape (3, 5) and values.shape (2, 4, 5) do not broadcast",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) {
          *r.mutable_factors() = Operand(F64(std::vector<double>(15, 1), {3, 5}));
          *r.mutable_values() = Operand(F64(std::vector<double>(40, 1), {2, 4, 5})); })); }},
      {"discount empty factors", INVALID, "factors.shape (0, 5) is empty",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { *r.mutable_factors() = Operand(F64({}, {0, 5})); })); }},
      {"discount dtype mismatch", INVALID, "factors is float32 but values is float64",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { *r.mutable_factors() = Operand(F32({1, 2}, {2})); })); }},
      {"discount empty operand", INVALID, "values.shape (0, 2) is empty",
       [&] { return Discount(With(GoodDiscount(), [](auto& r) { *r.mutable_values() = Operand(F64({}, {0, 2})); })); }},
      // HaversineGrid
      {"haversine grid not set", INVALID, "grid is not set",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.clear_mesh(); })); }},
      {"haversine no references", INVALID, "references is empty",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.clear_references(); })); }},
      {"haversine reference latitude 91", INVALID, "references[0].lat is 91",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.mutable_references(0)->set_lat(91); })); }},
      {"haversine reference latitude 95 names the range", INVALID,
       "references[0].lat is 95; latitude must lie in [-90, 90]",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.mutable_references(0)->set_lat(95); })); }},
      {"haversine reference latitude NaN", INVALID, "references[0].lat is nan",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.mutable_references(0)->set_lat(kNaN); })); }},
      {"haversine reference longitude inf", INVALID, "references[0].lon is inf",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.mutable_references(0)->set_lon(kInf); })); }},
      {"haversine negative radius", INVALID, "radius is -1",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.set_radius(-1); })); }},
      {"haversine NaN radius", INVALID, "radius is nan",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.set_radius(kNaN); })); }},
      {"mesh lat_start -91", INVALID, "mesh.lat_start is -91",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.mutable_mesh()->set_lat_start(-91); })); }},
      {"mesh lat_stop NaN", INVALID, "mesh.lat_stop is nan",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.mutable_mesh()->set_lat_stop(kNaN); })); }},
      {"mesh lon_start -inf", INVALID, "mesh.lon_start is -inf",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.mutable_mesh()->set_lon_start(-kInf); })); }},
      {"mesh n_lat 0", INVALID, "mesh.n_lat is 0",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.mutable_mesh()->set_n_lat(0); })); }},
      {"mesh n_lon 0", INVALID, "mesh.n_lon is 0",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.mutable_mesh()->set_n_lon(0); })); }},
      {"mesh n_lon huge", INVALID, "mesh.n_lon is 1099511627776; the limit is 16777216",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.mutable_mesh()->set_n_lon(uint64_t{1} << 40); })); }},
      {"mesh output over max_elements", INVALID, "result.shape (1, 10000, 10000) has more than",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) {
          r.mutable_mesh()->set_n_lat(10000);
          r.mutable_mesh()->set_n_lon(10000); })); }},
      {"mesh dtype unknown", INVALID, "mesh.dtype has unknown value 7",
       [&] { return Haversine(With(GoodMesh(), [](auto& r) { r.mutable_mesh()->set_dtype(static_cast<v1::DType>(7)); })); }},
      {"points lat missing", INVALID, "points.lat is not set",
       [&] { return Haversine(With(GoodPoints(), [](auto& r) { r.mutable_points()->clear_lat(); })); }},
      {"points shapes differ", INVALID, "points.lat.shape (2,) and points.lon.shape (1, 2) differ",
       [&] { return Haversine(With(GoodPoints(), [](auto& r) { *r.mutable_points()->mutable_lon() = Operand(F64({3, 4}, {1, 2})); })); }},
      {"points dtypes differ", INVALID, "points.lat is float64 but points.lon is float32",
       [&] { return Haversine(With(GoodPoints(), [](auto& r) { *r.mutable_points()->mutable_lon() = Operand(F32({3, 4}, {2})); })); }},
      {"points empty", INVALID, "points.lat.shape (0,) is empty",
       [&] { return Haversine(With(GoodPoints(), [](auto& r) { *r.mutable_points()->mutable_lat() = Operand(F64({}, {0})); })); }},
      {"points rank 8 (result would be 9)", INVALID, "points.lat has rank 8",
       [&] { return Haversine(With(GoodPoints(), [](auto& r) {
          *r.mutable_points()->mutable_lat() = Operand(F64({1}, {1, 1, 1, 1, 1, 1, 1, 1}));
          *r.mutable_points()->mutable_lon() = Operand(F64({1}, {1, 1, 1, 1, 1, 1, 1, 1})); })); }},
      // Normalize
      {"normalize input missing", INVALID, "input is not set",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { r.clear_input(); })); }},
      {"normalize scalar", INVALID, "input is a scalar",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { *r.mutable_input() = Operand(F64({1}, {})); })); }},
      {"normalize empty rows", INVALID, "input.shape (2, 0) has empty rows",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { *r.mutable_input() = Operand(F64({}, {2, 0})); })); }},
      {"normalize norm unknown", INVALID, "norm has unknown value 9",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { r.set_norm(static_cast<v1::Norm>(9)); })); }},
      {"normalize zero row", INVALID, "input row 1 has",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { *r.mutable_input() = Operand(F64({1, 2, 1, -1}, {2, 2})); })); }},
      {"normalize NaN row", INVALID, "input row 0 has",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { *r.mutable_input() = Operand(F64({kNaN, 2, 1, 1}, {2, 2})); })); }},
      {"normalize NaN in a later row", INVALID, "input row 1 has",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) { *r.mutable_input() = Operand(F64({1, 2, 3, 4, 5, kNaN}, {2, 3})); })); }},
      {"normalize inf row", INVALID, "input row 1 has",
       [&] { return Normalize(With(GoodNormalize(), [](auto& r) {
          r.set_norm(v1::NORM_MAX_ABS);
          *r.mutable_input() = Operand(F64({1, 2, kInf, 1}, {2, 2})); })); }},
      // LombScargle
      {"lombscargle x missing", INVALID, "x is not set",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { r.clear_x(); })); }},
      {"lombscargle y missing", INVALID, "y is not set",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { r.clear_y(); })); }},
      {"lombscargle frequencies not set", INVALID, "frequencies are not set",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { r.clear_freqs(); })); }},
      {"lombscargle length mismatch", INVALID, "x.shape (4,) and y.shape (3,) differ in length",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { *r.mutable_y() = Operand(F64({1, 2, 3}, {3})); })); }},
      {"lombscargle length mismatch, longer y", INVALID, "x.shape (10,) and y.shape (11,) differ in length",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) {
          *r.mutable_x() = Operand(F64(std::vector<double>(10, 1), {10}));
          *r.mutable_y() = Operand(F64(std::vector<double>(11, 1), {11})); })); }},
      {"lombscargle dtype mismatch", INVALID, "y is float32 but x is float64",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { *r.mutable_y() = Operand(F32({1, 2, 3, 4}, {4})); })); }},
      {"lombscargle y rank 3", INVALID, "y.shape (1, 1, 4) must be (N) or (B, N)",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { *r.mutable_y() = Operand(F64({1, 2, 3, 4}, {1, 1, 4})); })); }},
      {"lombscargle x batched, y not", INVALID, "is batched but y.shape (4,)",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { *r.mutable_x() = Operand(F64({1, 2, 3, 4}, {1, 4})); })); }},
      {"lombscargle weights shape", INVALID, "weights.shape (3,) must equal y.shape (4,)",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { *r.mutable_weights() = Operand(F64({1, 1, 1}, {3})); })); }},
      {"lombscargle weights dtype", INVALID, "y is float64 but weights is float32",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { *r.mutable_weights() = Operand(F32({1, 1, 1, 1}, {4})); })); }},
      {"lombscargle negative weight", INVALID, "weights row 0 has weight -1",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { *r.mutable_weights() = Operand(F64({1, -1, 1, 1}, {4})); })); }},
      {"lombscargle zero weights", INVALID, "weights row 0 sums to 0",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { *r.mutable_weights() = Operand(F64({0, 0, 0, 0}, {4})); })); }},
      {"lombscargle freq_grid count 0", INVALID, "freq_grid.count is 0",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { r.mutable_freq_grid()->set_stop(1); })); }},
      {"lombscargle freq_grid start NaN", INVALID, "freq_grid.start is nan",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) {
          r.mutable_freq_grid()->set_start(kNaN);
          r.mutable_freq_grid()->set_count(4); })); }},
      {"lombscargle freqs rank 2", INVALID, "freqs.shape (1, 2) must be (M,)",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { *r.mutable_freqs() = Operand(F64({1, 2}, {1, 2})); })); }},
      {"lombscargle freqs dtype", INVALID, "y is float64 but freqs is float32",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) { *r.mutable_freqs() = Operand(F32({1, 2}, {2})); })); }},
      {"lombscargle normalize with amplitude", INVALID,
       "normalize is true but normalization is LOMB_SCARGLE_NORMALIZATION_AMPLITUDE",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) {
          r.set_normalize(true);
          r.set_normalization(v1::LOMB_SCARGLE_NORMALIZATION_AMPLITUDE); })); }},
      {"lombscargle normalization unknown", INVALID, "normalization has unknown value 9",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) {
          r.set_normalization(static_cast<v1::LombScargleNormalization>(9)); })); }},
      {"lombscargle empty", INVALID, "y.shape (0,) is empty",
       [&] { return Lomb(With(GoodLomb(), [](auto& r) {
          *r.mutable_x() = Operand(F64({}, {0}));
          *r.mutable_y() = Operand(F64({}, {0})); })); }},
      // Upload framing and header
      {"upload data before header", INVALID, "data before the header",
       [&] { return Upload({Data(8)}); }},
      {"upload duplicate header", INVALID, "second header",
       [&] { return Upload({Header(v1::FLOAT64, {1}), Header(v1::FLOAT64, {1})}); }},
      {"upload header then header after data", INVALID, "second header",
       [&] { return Upload({Header(v1::FLOAT64, {2}), Data(8), Header(v1::FLOAT64, {1})}); }},
      {"upload too much data", INVALID, "exceeds the declared size",
       [&] { return Upload({Header(v1::FLOAT64, {1}), Data(16)}); }},
      {"upload too little data", INVALID, "ended after 8 of 16 declared bytes",
       [&] { return Upload({Header(v1::FLOAT64, {2}), Data(8)}); }},
      {"upload empty message", INVALID, "has neither header nor data",
       [&] { return Upload({v1::UploadRequest()}); }},
      {"upload no messages", INVALID, "ended before a header",
       [&] { return Upload({}); }},
      {"upload header dtype unknown", INVALID, "header.dtype has unknown value 5",
       [&] { return Upload({Header(static_cast<v1::DType>(5), {1})}); }},
      {"upload header negative extent", INVALID, "header.shape[0] is -1",
       [&] { return Upload({Header(v1::FLOAT64, {-1})}); }},
      {"upload header empty shape", INVALID, "header.shape (0,) is empty",
       [&] { return Upload({Header(v1::FLOAT64, {0})}); }},
      {"upload header name too long", INVALID, "header.name has 1000 bytes",
       [&] { return Upload({Header(v1::FLOAT64, {1}, std::string(1000, 'n'))}); }},
      {"upload over quota", R::RESOURCE_EXHAUSTED, "buffer quota (buffer_quota_bytes 1048576)",
       [&] { return Upload({Header(v1::FLOAT64, {1 << 20})}); }},
      {"upload over quota names the upload and its size", R::RESOURCE_EXHAUSTED,
       "upload 'big' needs 8388608 bytes but the buffer quota (buffer_quota_bytes 1048576)",
       [&] { return Upload({Header(v1::FLOAT64, {1 << 20}, "big")}); }},
      // Download and Delete
      {"download unknown id", R::NOT_FOUND, "buffer_id 'nope' is not a stored buffer",
       [&] {
         v1::DownloadRequest r;
         r.set_buffer_id("nope");
         return Download(r);
       }},
      {"download chunk_bytes out of range", INVALID, "chunk_bytes is 1",
       [&] {
         v1::DownloadRequest r;
         r.set_buffer_id("nope");
         r.set_chunk_bytes(1);
         return Download(r);
       }},
      {"delete unknown id", R::NOT_FOUND, "buffer_id 'nope' is not a stored buffer",
       [&] {
         grpc::ClientContext context;
         v1::DeleteRequest r;
         r.set_buffer_id("nope");
         v1::DeleteResponse response;
         return server_->buffers().Delete(&context, r, &response);
       }},
  };

  ExpectEach(cases);
  client::Client& healthy = server_->client();
  // Still serving, correctly, with nothing stored or leaked.
  EXPECT_TRUE(Discount(GoodDiscount()).ok());
  EXPECT_TRUE(Lomb(GoodLomb()).ok());
  v1::NormalizeRequest normalize;
  *normalize.mutable_input() = Operand(F64({1, 3}, {2}));
  auto normalized = healthy.Normalize(normalize);
  ASSERT_TRUE(normalized.ok()) << normalized.status().message();
  EXPECT_THAT(test::Values(*normalized), ::testing::ElementsAre(0.25, 0.75));
  EXPECT_EQ(healthy.List()->buffers_size(), 0);
  EXPECT_EQ(healthy.List()->used_bytes(), 0u);
  EXPECT_EQ(server_->PoolUsedBytes(), 0u);
  std::printf("malformed request cases tried: %zu\n", cases.size());
}

// Bytes that are no valid message of their method's request type, in each way
// protobuf can refuse them, sent to every method (and to each message of an
// Upload): INVALID_ARGUMENT naming the type (and the Upload message) and why.
TEST_F(MalformedRequestsTest, UnparseableBytesAreInvalidArgumentNamingTheType) {
  struct Corruption {
    std::string name;
    std::string reason;
    // The bytes, from a valid message's (`good`, not empty) or, for the UTF-8
    // case, from one whose string field holds the placeholder "@@@@".
    std::function<std::string(const std::string& good)> bytes;
  };
  const std::string kPlaceholder = "@@@@";
  const std::vector<Corruption> corruptions = {
      {"truncated", "is cut short", [](const std::string& good) { return good.substr(0, good.size() - 1); }},
      {"wire type 7", "has wire type 7", [](const std::string& good) { return good + "\x0f\x01"; }},
      {"field number 0", "field number 0", [](const std::string& good) { return good + std::string("\x00\x01", 2); }},
      {"bad length prefix", "field 15 (wire type 2)",
       [](const std::string& good) { return good + "\x7a\xff\xff\xff\xff\x0f" + "abc"; }},
      {"11-byte varint", "field 15 (wire type 0)",
       [](const std::string& good) { return good + "\x78" + std::string(10, '\x80') + "\x01"; }},
      {"invalid UTF-8 in a string field", "a string field is not valid UTF-8",
       [&](const std::string& with_placeholder) {
         std::string bytes = with_placeholder;
         bytes.replace(bytes.find(kPlaceholder), kPlaceholder.size(), "\xc3\x28\xa0\xa1");
         return bytes;
       }},
  };
  struct Target {
    std::string method;        // e.g. "Compute/Normalize"
    std::string type;          // the request message, e.g. "NormalizeRequest"
    std::string what;          // how the server names the broken message
    std::vector<std::string> before;  // valid messages sent first (Upload)
    std::string good;          // a valid message, serialized
    std::string with_placeholder;     // the same with a string field "@@@@"; "": none
  };
  const std::string header = Header(v1::FLOAT64, {4}).SerializeAsString();  // 32 bytes
  const std::string data = Data(8).SerializeAsString();
  const std::string bad_header = Header(v1::FLOAT64, {4}, kPlaceholder).SerializeAsString();
  v1::DownloadRequest download;
  download.set_buffer_id(std::string(32, '0'));
  v1::DeleteRequest remove;
  remove.set_buffer_id(std::string(32, '0'));
  v1::ListRequest list;
  list.set_page_size(5);
  const std::vector<Target> targets = {
      {"Compute/DiscountProduct", "DiscountProductRequest", "request", {}, GoodDiscount().SerializeAsString(),
       With(GoodDiscount(), [&](auto& r) { r.mutable_output()->set_buffer_name(kPlaceholder); }).SerializeAsString()},
      {"Compute/HaversineGrid", "HaversineGridRequest", "request", {}, GoodMesh().SerializeAsString(),
       With(GoodMesh(), [&](auto& r) { r.mutable_output()->set_buffer_name(kPlaceholder); }).SerializeAsString()},
      {"Compute/Normalize", "NormalizeRequest", "request", {}, GoodNormalize().SerializeAsString(),
       With(GoodNormalize(), [&](auto& r) { r.mutable_input()->set_buffer_id(kPlaceholder); }).SerializeAsString()},
      {"Compute/LombScargle", "LombScargleRequest", "request", {}, GoodLomb().SerializeAsString(),
       With(GoodLomb(), [&](auto& r) { r.mutable_weights()->set_buffer_id(kPlaceholder); }).SerializeAsString()},
      {"Buffers/Upload", "UploadRequest", "upload message 1", {}, header, bad_header},
      {"Buffers/Upload", "UploadRequest", "upload message 2", {header}, data, bad_header},
      {"Buffers/Upload", "UploadRequest", "upload message 3", {header, data}, data, bad_header},
      {"Buffers/Download", "DownloadRequest", "request", {}, download.SerializeAsString(),
       With(download, [&](auto& r) { r.set_buffer_id(kPlaceholder); }).SerializeAsString()},
      {"Buffers/Delete", "DeleteRequest", "request", {}, remove.SerializeAsString(),
       With(remove, [&](auto& r) { r.set_buffer_id(kPlaceholder); }).SerializeAsString()},
      {"Buffers/List", "ListRequest", "request", {}, list.SerializeAsString(),
       With(list, [&](auto& r) { r.set_page_token(kPlaceholder); }).SerializeAsString()},
      // GetInfoRequest has no fields: its good message is an unknown varint field.
      {"Server/GetInfo", "GetInfoRequest", "request", {}, "\x08\x01", ""},
  };
  std::vector<Case> cases;
  for (const Target& target : targets) {
    for (const Corruption& corruption : corruptions) {
      const bool utf8 = &corruption == &corruptions.back();
      if (utf8 && target.with_placeholder.empty()) continue;
      std::vector<std::string> messages = target.before;
      messages.push_back(corruption.bytes(utf8 ? target.with_placeholder : target.good));
      cases.push_back(
          {absl::StrCat(target.method, " ", target.what, ": ", corruption.name),
           grpc::StatusCode::INVALID_ARGUMENT,
           absl::StrCat(target.what, " is not a valid gpucompute.v1.", target.type, " ("),
           [this, method = "/gpucompute.v1." + target.method, messages] { return SendBytes(method, messages); },
           corruption.reason});
    }
  }
  ExpectEach(cases);
  // Well-formed bytes through the same path still work.
  EXPECT_TRUE(SendBytes("/gpucompute.v1.Compute/Normalize", {GoodNormalize().SerializeAsString()}).ok());
  EXPECT_EQ(server_->client().List()->buffers_size(), 0);
  EXPECT_EQ(server_->PoolUsedBytes(), 0u);
  std::printf("unparseable request cases tried: %zu\n", cases.size());
}

// A message over max_receive_message_bytes is refused by gRPC before the service sees it.
TEST_F(MalformedRequestsTest, MessageOverTheLimitIsResourceExhausted) {
  ServerConfig config = test::LoopbackConfig();
  config.max_receive_message_bytes = 1 << 20;
  Start(config);
  v1::NormalizeRequest request;
  *request.mutable_input() = Operand(F64(std::vector<double>(200000, 1.5), {200000}));  // 1.6 MB
  const grpc::Status status = Normalize(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("larger than max"));
}

}  // namespace
}  // namespace gpucompute
