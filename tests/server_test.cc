// End to end over real gRPC on loopback (port 0): every operation against an
// independent float64 reference (tests/testing/tensors.h), buffers, streaming and
// cancellation. Malformed requests are in tests/malformed_requests_test.cc.
#include "server/server.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
namespace v1 = ::gpucompute::v1;

class ServerTest : public ::testing::Test {
 protected:
  // test::OnCuda(): the same suite on the CUDA backend; it skips where no GPU is usable.
  static bool OnCuda() { return test::OnCuda(); }
  static std::string ExpectedBackend() { return OnCuda() ? "cuda" : "cpu"; }

  static ServerConfig TestConfig() {
    ServerConfig config = test::LoopbackConfig();
    config.backend.kind = OnCuda() ? BackendKind::kCuda : BackendKind::kCpu;
    config.buffer_quota_bytes = 64ull << 20;
    config.grace_period = absl::Seconds(5);
    return config;
  }

  void SetUp() override { StartServer(TestConfig()); }

  void StartServer(const ServerConfig& config) {
    auto server = test::TestServer::Start(config);
    if (OnCuda() && !server.ok()) GTEST_SKIP() << "no usable GPU: " << server.status().message();
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
    client_ = &server_->client();
  }

  std::vector<double> Uniform(int64_t n, double lo, double hi) { return random_.Uniform(n, lo, hi); }

  static double Tolerance(v1::DType dtype) { return dtype == v1::FLOAT32 ? 2e-6 : 1e-12; }

  test::RandomInputs random_;
  std::unique_ptr<test::TestServer> server_;
  client::Client* client_ = nullptr;
};

class ServerDTypeTest : public ServerTest, public ::testing::WithParamInterface<v1::DType> {};

INSTANTIATE_TEST_SUITE_P(BothDTypes, ServerDTypeTest, ::testing::Values(v1::FLOAT32, v1::FLOAT64),
                         [](const auto& info) { return info.param == v1::FLOAT32 ? "f32" : "f64"; });

TEST_P(ServerDTypeTest, DiscountProductMatchesBroadcastReference) {
  const v1::DType dtype = GetParam();
  // (factors shape, values shape): the seed case, odd sizes, and broadcasting both ways.
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{40, 5}, {10, 40, 5}}, {{1}, {1}},       {{7}, {7}},
      {{1}, {1000003}},       {{3, 1}, {1, 7}}, {{2, 1, 3}, {4, 1}}};
  for (const auto& [fshape, vshape] : cases) {
    std::vector<double> f, v;
    v1::DiscountProductRequest request;
    *request.mutable_factors()->mutable_tensor() = test::ToProto(Uniform(test::ElementCount(fshape), -2, 2), fshape, dtype, &f);
    *request.mutable_values()->mutable_tensor() = test::ToProto(Uniform(test::ElementCount(vshape), -2, 2), vshape, dtype, &v);
    auto result = client_->DiscountProduct(request);
    ASSERT_TRUE(result.ok()) << result.status().message();

    const Shape out_shape = test::BroadcastShape(fshape, vshape);
    ASSERT_EQ(Shape(result->header.shape().begin(), result->header.shape().end()), out_shape);
    const std::vector<double> ref = test::BroadcastProduct(f, fshape, v, vshape, out_shape);
    test::ExpectCloseAtScale(test::Values(*result), ref, Tolerance(dtype));
    EXPECT_EQ(result->trailer.backend(), ExpectedBackend());
  }
}

TEST_P(ServerDTypeTest, HaversineMeshMatchesReference) {
  const v1::DType dtype = GetParam();
  for (auto [n_lat, n_lon] : {std::pair<int64_t, int64_t>{1, 1}, {7, 1}, {1, 1000003}, {13, 17}}) {
    v1::HaversineGridRequest request;
    v1::LatLonMesh* mesh = request.mutable_mesh();
    mesh->set_lat_start(29);
    mesh->set_lat_stop(31);
    mesh->set_n_lat(n_lat);
    mesh->set_lon_start(99);
    mesh->set_lon_stop(101);
    mesh->set_n_lon(n_lon);
    mesh->set_dtype(dtype);
    const std::vector<std::pair<double, double>> refs = {{30, 101}, {-45.5, -170}};
    for (auto [lat, lon] : refs) {
      v1::GeoPoint* p = request.add_references();
      p->set_lat(lat);
      p->set_lon(lon);
    }
    auto result = client_->HaversineGrid(request);
    ASSERT_TRUE(result.ok()) << result.status().message();
    std::vector<double> ref;
    for (auto [rlat, rlon] : refs) {
      for (int64_t i = 0; i < n_lat; ++i) {
        const double lat = n_lat == 1 ? 29.0 : 29.0 + i * (2.0 / (n_lat - 1));
        for (int64_t j = 0; j < n_lon; ++j) {
          const double lon = n_lon == 1 ? 99.0 : 99.0 + j * (2.0 / (n_lon - 1));
          ref.push_back(test::HaversineDistance(rlat, rlon, lat, lon, 6371.0088));
        }
      }
    }
    test::ExpectCloseAtScale(test::Values(*result), ref, dtype == v1::FLOAT32 ? 2e-6 : 1e-9);
  }
}

TEST_P(ServerDTypeTest, HaversinePointsMatchesReference) {
  const v1::DType dtype = GetParam();
  std::vector<double> lat, lon;
  v1::HaversineGridRequest request;
  *request.mutable_points()->mutable_lat()->mutable_tensor() =
      test::ToProto(Uniform(21, -89, 89), {3, 7}, dtype, &lat);
  *request.mutable_points()->mutable_lon()->mutable_tensor() =
      test::ToProto(Uniform(21, -180, 180), {3, 7}, dtype, &lon);
  v1::GeoPoint* p = request.add_references();
  p->set_lat(10);
  p->set_lon(20);
  request.set_radius(1.0);
  auto result = client_->HaversineGrid(request);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_THAT(std::vector<int64_t>(result->header.shape().begin(), result->header.shape().end()),
              ::testing::ElementsAre(1, 3, 7));
  std::vector<double> ref;
  for (size_t i = 0; i < lat.size(); ++i) ref.push_back(test::HaversineDistance(10, 20, lat[i], lon[i], 1));
  test::ExpectCloseAtScale(test::Values(*result), ref, dtype == v1::FLOAT32 ? 2e-6 : 1e-9);
}

TEST_P(ServerDTypeTest, NormalizeEachNormMatchesReference) {
  const v1::DType dtype = GetParam();
  const std::pair<v1::Norm, NormKind> norms[] = {{v1::NORM_SUM, NormKind::kSum},
                                                 {v1::NORM_L1, NormKind::kL1},
                                                 {v1::NORM_L2, NormKind::kL2},
                                                 {v1::NORM_MAX_ABS, NormKind::kMaxAbs}};
  for (const auto& [norm, kind] : norms) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {1, 7}, {3, 1000003}, {5, 3}}) {
      std::vector<double> x;
      // Positive inputs keep the SUM norm well away from zero.
      v1::NormalizeRequest request;
      *request.mutable_input()->mutable_tensor() =
          test::ToProto(Uniform(rows * cols, 0.5, 2.0), {rows, cols}, dtype, &x);
      request.set_norm(norm);
      auto result = client_->Normalize(request);
      ASSERT_TRUE(result.ok()) << result.status().message();
      const std::vector<double> ref = test::NormalizeRows(x, cols, kind);
      test::ExpectCloseAtScale(test::Values(*result), ref, dtype == v1::FLOAT32 ? 2e-6 : 1e-12);
    }
  }
}

TEST_P(ServerDTypeTest, LombScargleMatchesClassicReference) {
  const v1::DType dtype = GetParam();
  // N = 1 is degenerate (CC*SS - CS^2 = 0): SciPy >= 1.15 returns NaN there too.
  for (auto [n, m] : {std::pair<int, int>{2, 7}, {7, 1}, {7, 1000003}, {200, 300}}) {
    for (bool precenter : {false, true}) {
      for (bool normalize : {false, true}) {
        std::vector<double> x, y, freqs;
        v1::LombScargleRequest request;
        *request.mutable_x()->mutable_tensor() = test::ToProto(Uniform(n, 0, 30), {n}, dtype, &x);
        std::vector<double> signal(n);
        for (int j = 0; j < n; ++j) signal[j] = 2 * std::sin(1.3 * x[j]) + 0.5 + Uniform(1, -1, 1)[0];
        *request.mutable_y()->mutable_tensor() = test::ToProto(signal, {n}, dtype, &y);
        *request.mutable_freqs()->mutable_tensor() = test::ToProto(Uniform(m, 0.1, 5), {m}, dtype, &freqs);
        request.set_precenter(precenter);
        request.set_normalize(normalize);
        auto result = client_->LombScargle(request);
        ASSERT_TRUE(result.ok()) << result.status().message();
        SCOPED_TRACE(absl::StrCat("n=", n, " m=", m, " precenter=", precenter, " normalize=", normalize));
        const std::vector<double> ref = test::ClassicLombScargle(x, y, freqs, precenter, normalize);
        // Two samples fit any frequency exactly: D = CC*SS - CS^2 = sin^2(w dx)/4 is tiny
        // at many frequencies and float32 (the GPU's arithmetic) cannot resolve it.
        if (dtype == v1::FLOAT32 && n < 7) continue;
        if (dtype == v1::FLOAT32) {
          test::ExpectRelativeL2(test::Values(*result), ref, 1e-3);  // GPUs accumulate float32 in float32
        } else {
          test::ExpectCloseAtScale(test::Values(*result), ref, 1e-8);
        }
      }
    }
  }
}

TEST_F(ServerTest, LombScargleFrequencyGridEqualsExplicitFrequencies) {
  std::vector<double> x, y;
  v1::LombScargleRequest request;
  *request.mutable_x()->mutable_tensor() = test::ToProto(Uniform(64, 0, 10), {64}, v1::FLOAT64, &x);
  *request.mutable_y()->mutable_tensor() = test::ToProto(Uniform(64, -1, 1), {64}, v1::FLOAT64, &y);
  v1::FrequencyGrid* grid = request.mutable_freq_grid();
  grid->set_start(0.01);
  grid->set_stop(10);
  grid->set_count(1001);
  auto from_grid = client_->LombScargle(request);
  ASSERT_TRUE(from_grid.ok()) << from_grid.status().message();
  std::vector<double> freqs(1001);
  for (int i = 0; i < 1001; ++i) freqs[i] = i == 1000 ? 10.0 : 0.01 + i * ((10 - 0.01) / 1000);
  test::ExpectCloseAtScale(test::Values(*from_grid), test::ClassicLombScargle(x, y, freqs, false, false), 1e-8);
}

TEST_F(ServerTest, UploadDownloadListDeleteRoundTripsByteExact) {
  // 1 MiB + 3 floats in 4096-byte chunks: ~257 data messages each way.
  const int64_t n = (1 << 18) + 3;
  std::vector<double> values;
  const v1::Tensor tensor = test::ToProto(Uniform(n, -1, 1), {n}, v1::FLOAT32, &values);
  auto info = client_->Upload("weights", tensor);
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->id().size(), 32u);
  EXPECT_EQ(info->bytes(), static_cast<uint64_t>(n) * 4);
  EXPECT_THAT(info->location(), ::testing::StartsWith(OnCuda() ? "cuda:" : "cpu"));

  auto downloaded = client_->Download(info->id(), 4096);
  ASSERT_TRUE(downloaded.ok()) << downloaded.status().message();
  EXPECT_EQ(downloaded->data, tensor.data());

  auto listed = client_->List();
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  ASSERT_EQ(listed->buffers_size(), 1);
  EXPECT_EQ(listed->buffers(0).name(), "weights");
  EXPECT_EQ(listed->used_bytes(), static_cast<uint64_t>(n) * 4);

  auto freed = client_->Delete(info->id());
  ASSERT_TRUE(freed.ok()) << freed.status().message();
  EXPECT_EQ(*freed, static_cast<uint64_t>(n) * 4);
  EXPECT_EQ(client_->Download(info->id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->List()->used_bytes(), 0u);
}

TEST_F(ServerTest, ChainsHaversineNormalizeDownloadThroughStoredBuffers) {
  v1::HaversineGridRequest haversine;
  v1::LatLonMesh* mesh = haversine.mutable_mesh();
  mesh->set_lat_start(-10);
  mesh->set_lat_stop(10);
  mesh->set_n_lat(50);
  mesh->set_lon_start(0);
  mesh->set_lon_stop(30);
  mesh->set_n_lon(40);
  v1::GeoPoint* p = haversine.add_references();
  p->set_lat(45);
  p->set_lon(7);
  haversine.mutable_output()->set_keep_on_device(true);
  haversine.mutable_output()->set_buffer_name("distances");
  auto kept = client_->HaversineGrid(haversine);
  ASSERT_TRUE(kept.ok()) << kept.status().message();
  EXPECT_TRUE(kept->data.empty());
  const v1::BufferInfo& distances = kept->trailer.stored_buffer();
  EXPECT_EQ(distances.name(), "distances");
  EXPECT_THAT(std::vector<int64_t>(distances.shape().begin(), distances.shape().end()),
              ::testing::ElementsAre(1, 50, 40));

  v1::NormalizeRequest normalize;
  normalize.mutable_input()->set_buffer_id(distances.id());
  normalize.mutable_output()->set_keep_on_device(true);
  auto normalized = client_->Normalize(normalize);
  ASSERT_TRUE(normalized.ok()) << normalized.status().message();
  auto downloaded = client_->Download(normalized->trailer.stored_buffer().id());
  ASSERT_TRUE(downloaded.ok()) << downloaded.status().message();
  const std::vector<double> out = test::Values(*downloaded);
  ASSERT_EQ(out.size(), 2000u);
  for (int row = 0; row < 50; ++row) {
    double sum = 0;
    for (int c = 0; c < 40; ++c) sum += out[row * 40 + c];
    EXPECT_NEAR(sum, 1.0, 1e-12) << "row " << row;
  }
  EXPECT_EQ(client_->List()->buffers_size(), 2);
}

// On a GPU, through the API: results kept on the device fill its memory until an
// allocation fails with RESOURCE_EXHAUSTED; deleting them frees it and requests
// run again. (The CPU backend would fill host memory instead: skipped there.)
TEST_F(ServerTest, FillingTheDeviceIsResourceExhaustedThenTheServerRecovers) {
  if (!OnCuda()) GTEST_SKIP() << "fills real device memory: CUDA backend only";
  ServerConfig config = TestConfig();
  config.buffer_quota_bytes = uint64_t{1} << 40;
  StartServer(config);
  // 2^15 x 2^15 float32 distances to 4 references: 16 GiB per result, no input.
  v1::HaversineGridRequest fill;
  v1::LatLonMesh* mesh = fill.mutable_mesh();
  mesh->set_lat_start(-60);
  mesh->set_lat_stop(60);
  mesh->set_n_lat(1 << 15);
  mesh->set_lon_start(-180);
  mesh->set_lon_stop(180);
  mesh->set_n_lon(1 << 15);
  mesh->set_dtype(v1::FLOAT32);
  for (int k = 0; k < 4; ++k) {
    v1::GeoPoint* p = fill.add_references();
    p->set_lat(10.0 * k);
    p->set_lon(20.0 * k);
  }
  fill.mutable_output()->set_keep_on_device(true);
  std::vector<std::string> kept;
  absl::Status full;
  for (int i = 0; i < 64 && full.ok(); ++i) {  // 1 TiB: more than any GPU holds
    auto result = client_->HaversineGrid(fill);
    if (result.ok()) {
      kept.push_back(result->trailer.stored_buffer().id());
    } else {
      full = result.status();
    }
  }
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full.message();
  EXPECT_GE(kept.size(), 1u);
  for (const std::string& id : kept) {
    auto freed = client_->Delete(id);
    EXPECT_TRUE(freed.ok()) << freed.status().message();
  }
  EXPECT_EQ(client_->List()->used_bytes(), 0u);
  EXPECT_EQ(*client_->Health(), grpc::health::v1::HealthCheckResponse::SERVING);
  auto again = client_->HaversineGrid(fill);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_TRUE(client_->Delete(again->trailer.stored_buffer().id()).ok());
}

TEST_F(ServerTest, StoredOperandsOnDifferentDevicesAreBroughtTogether) {
  // Uploads spread over the least-loaded devices; with several GPUs the two
  // operands usually land apart, and the operation still runs (on one device).
  std::vector<double> f, v;
  const v1::Tensor factors = test::ToProto(Uniform(12, 1, 2), {3, 4}, v1::FLOAT64, &f);
  const v1::Tensor values = test::ToProto(Uniform(24, 1, 2), {2, 3, 4}, v1::FLOAT64, &v);
  auto stored_f = client_->Upload("f", factors);
  ASSERT_TRUE(stored_f.ok()) << stored_f.status().message();
  absl::StatusOr<v1::BufferInfo> stored_v;
  for (int attempt = 0; attempt < 8; ++attempt) {
    stored_v = client_->Upload("v", values);
    ASSERT_TRUE(stored_v.ok()) << stored_v.status().message();
    if (stored_v->location() != stored_f->location()) break;
  }
  v1::DiscountProductRequest request;
  request.mutable_factors()->set_buffer_id(stored_f->id());
  request.mutable_values()->set_buffer_id(stored_v->id());
  auto result = client_->DiscountProduct(request);
  ASSERT_TRUE(result.ok()) << result.status().message();
  std::vector<double> ref(24);
  for (int i = 0; i < 24; ++i) ref[i] = f[i % 12] * v[i];
  test::ExpectCloseAtScale(test::Values(*result), ref, 1e-15);
}

TEST_F(ServerTest, CancellingMidStreamFreesTheResult) {
  const uint64_t baseline = server_->PoolUsedBytes();
  v1::HaversineGridRequest request;
  v1::LatLonMesh* mesh = request.mutable_mesh();
  mesh->set_lat_start(-80);
  mesh->set_lat_stop(80);
  mesh->set_n_lat(2000);
  mesh->set_lon_start(-180);
  mesh->set_lon_stop(180);
  mesh->set_n_lon(2000);  // 32 MB of float64
  v1::GeoPoint* p = request.add_references();
  p->set_lat(0);
  p->set_lon(0);
  request.mutable_output()->set_chunk_bytes(4096);

  v1::Compute::Stub& stub = server_->compute();
  grpc::ClientContext context;
  auto reader = stub.HaversineGrid(&context, request);
  v1::ResultChunk chunk;
  ASSERT_TRUE(reader->Read(&chunk));
  ASSERT_TRUE(chunk.has_header());
  ASSERT_TRUE(reader->Read(&chunk));
  ASSERT_TRUE(chunk.has_data());
  EXPECT_GT(server_->PoolUsedBytes(), baseline);
  context.TryCancel();
  while (reader->Read(&chunk)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::CANCELLED);
  // The server frees the result once its reactor sees the cancellation.
  test::Eventually([&] { return server_->PoolUsedBytes() == baseline; });
  EXPECT_EQ(server_->PoolUsedBytes(), baseline);
}

TEST_F(ServerTest, InfoReportsBackendOperationsAndLimits) {
  auto info = client_->GetInfo();
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->backend(), ExpectedBackend());
  EXPECT_THAT(info->backend_note(), HasSubstr(ExpectedBackend()));
  ASSERT_GE(info->devices_size(), 1);
  EXPECT_GT(info->devices(0).memory_bytes(), 0u);
  EXPECT_EQ(info->operations_size(), 5);  // the four compute RPCs and StreamingCompute
  EXPECT_EQ(info->limits().buffer_quota_bytes(), 64ull << 20);
  EXPECT_EQ(info->limits().default_chunk_bytes(), 1u << 20);
  EXPECT_EQ(info->limits().max_rank(), 8u);
  // Every admission limit is reported, with ServerConfig's defaults.
  const ServerConfig defaults;
  EXPECT_EQ(info->limits().max_queue_depth(), static_cast<uint32_t>(defaults.max_queue_depth));
  EXPECT_EQ(info->limits().streaming_chunks_in_flight(),
            static_cast<uint32_t>(defaults.streaming_chunks_in_flight));
  EXPECT_EQ(info->limits().max_device_queue_depth(),
            static_cast<uint32_t>(defaults.max_device_queue_depth));
  EXPECT_EQ(info->limits().max_in_flight(), static_cast<uint32_t>(defaults.max_in_flight));
  EXPECT_EQ(info->limits().small_request_work(),
            static_cast<uint64_t>(defaults.small_request_work));
  EXPECT_EQ(info->limits().max_small_queue_depth(),
            static_cast<uint32_t>(defaults.max_small_queue_depth));
  EXPECT_EQ(info->limits().max_work_per_request(),
            static_cast<uint64_t>(defaults.max_work_per_request));
  EXPECT_EQ(info->limits().max_metadata_bytes(), defaults.max_metadata_bytes);
  EXPECT_EQ(info->limits().max_in_flight_per_connection(),
            static_cast<uint32_t>(defaults.max_in_flight_per_connection));
  EXPECT_EQ(info->limits().max_concurrent_streams(),
            static_cast<uint32_t>(defaults.max_concurrent_streams));
  EXPECT_EQ(info->limits().max_open_streams(), static_cast<uint32_t>(defaults.max_open_streams));
  EXPECT_EQ(info->limits().max_open_streams_per_connection(),
            static_cast<uint32_t>(defaults.max_open_streams_per_connection));
  EXPECT_EQ(info->limits().session_answer_bytes(), defaults.session_answer_bytes);
  // Derived from the host budget (1/8 of it within [64 MiB, 2 GiB]).
  EXPECT_GE(info->limits().resource_quota_bytes(), uint64_t{64} << 20);
  EXPECT_LE(info->limits().resource_quota_bytes(), uint64_t{2} << 30);
  auto health = client_->Health();
  ASSERT_TRUE(health.ok()) << health.status().message();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
}

}  // namespace
}  // namespace gpucompute
