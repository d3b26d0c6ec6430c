// End to end over real gRPC on loopback (port 0): every operation against an
// independent float64 reference written here, buffers, streaming, cancellation,
// and the bad inputs each with its status code and message.
#include "server/server.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
namespace v1 = ::gpucompute::v1;
using client::Client;
using client::Result;

constexpr double kPi = 3.14159265358979323846;

class ServerTest : public ::testing::Test {
 protected:
  // GPUCOMPUTE_TEST_BACKEND=cuda runs the same suite on the CUDA backend (ctest
  // label gpu); it skips where no GPU is usable.
  static bool OnCuda() {
    const char* backend = std::getenv("GPUCOMPUTE_TEST_BACKEND");
    return backend != nullptr && std::string(backend) == "cuda";
  }
  static std::string ExpectedBackend() { return OnCuda() ? "cuda" : "cpu"; }

  static ServerConfig TestConfig() {
    ServerConfig config;
    config.address = "127.0.0.1:0";
    config.metrics_address = "";
    config.backend.kind = OnCuda() ? BackendKind::kCuda : BackendKind::kCpu;
    config.buffer_quota_bytes = 64ull << 20;
    config.grace_period = absl::Seconds(5);
    return config;
  }

  void SetUp() override { StartServer(TestConfig()); }

  void StartServer(const ServerConfig& config) {
    auto server = GpuComputeServer::Start(config);
    if (OnCuda() && !server.ok()) GTEST_SKIP() << "no usable GPU: " << server.status().message();
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
    channel_ = client::MakeChannel(absl::StrCat("127.0.0.1:", server_->port()));
    client_ = std::make_unique<Client>(channel_);
  }

  std::mt19937_64& rng() { return rng_; }

  std::vector<double> Uniform(size_t n, double lo, double hi) {
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<double> v(n);
    for (double& x : v) x = dist(rng_);
    return v;
  }

  // The tensor of `values` in `dtype`; `rounded` receives the values as stored.
  static v1::Tensor Encode(const std::vector<double>& values, const std::vector<int64_t>& shape,
                           v1::DType dtype, std::vector<double>* rounded = nullptr) {
    std::string data;
    if (dtype == v1::FLOAT32) {
      std::vector<float> f(values.begin(), values.end());
      data.assign(reinterpret_cast<const char*>(f.data()), f.size() * 4);
      if (rounded != nullptr) rounded->assign(f.begin(), f.end());
    } else {
      data.assign(reinterpret_cast<const char*>(values.data()), values.size() * 8);
      if (rounded != nullptr) *rounded = values;
    }
    auto tensor = client::MakeTensor(dtype, shape, data);
    EXPECT_TRUE(tensor.ok()) << tensor.status().message();
    return *tensor;
  }

  static std::vector<double> Decode(const Result& result) {
    auto values = result.AsDoubles();
    EXPECT_TRUE(values.ok()) << values.status().message();
    return values.ok() ? *values : std::vector<double>{};
  }

  // max |out - ref| / max(|ref|, floor), with NaN failing.
  static void ExpectClose(const std::vector<double>& out, const std::vector<double>& ref,
                          double tolerance) {
    ASSERT_EQ(out.size(), ref.size());
    double scale = 0;
    for (double r : ref) scale = std::max(scale, std::abs(r));
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_FALSE(std::isnan(out[i])) << "element " << i;
      ASSERT_LE(std::abs(out[i] - ref[i]), tolerance * std::max(std::abs(ref[i]), scale * 1e-3))
          << "element " << i << ": got " << out[i] << ", want " << ref[i];
    }
  }

  static double Tolerance(v1::DType dtype) { return dtype == v1::FLOAT32 ? 2e-6 : 1e-12; }

  // ||out - ref|| / ||ref||: for results that are ill-conditioned at some points
  // (a float32 periodogram near D = CC*SS - CS^2 = 0), where elementwise bounds
  // would measure the conditioning rather than the implementation.
  static void ExpectRelativeL2(const std::vector<double>& out, const std::vector<double>& ref,
                               double tolerance) {
    ASSERT_EQ(out.size(), ref.size());
    double err = 0, norm = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_FALSE(std::isnan(out[i])) << "element " << i;
      err += (out[i] - ref[i]) * (out[i] - ref[i]);
      norm += ref[i] * ref[i];
    }
    EXPECT_LE(std::sqrt(err), tolerance * std::sqrt(norm));
  }

  std::mt19937_64 rng_{std::random_device{}()};
  std::unique_ptr<GpuComputeServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Client> client_;
};

class ServerDTypeTest : public ServerTest, public ::testing::WithParamInterface<v1::DType> {};

INSTANTIATE_TEST_SUITE_P(BothDTypes, ServerDTypeTest, ::testing::Values(v1::FLOAT32, v1::FLOAT64),
                         [](const auto& info) { return info.param == v1::FLOAT32 ? "f32" : "f64"; });

TEST_P(ServerDTypeTest, DiscountProductMatchesBroadcastReference) {
  const v1::DType dtype = GetParam();
  // (factors shape, values shape): the seed case, odd sizes, and broadcasting both ways.
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{40, 5}, {10, 40, 5}}, {{1}, {1}},       {{7}, {7}},
      {{1}, {1000003}},       {{3, 1}, {1, 7}}, {{2, 1, 3}, {4, 1}}};
  for (const auto& [fshape, vshape] : cases) {
    auto count = [](const std::vector<int64_t>& s) {
      int64_t n = 1;
      for (int64_t e : s) n *= e;
      return n;
    };
    std::vector<double> f, v;
    v1::DiscountProductRequest request;
    *request.mutable_factors()->mutable_tensor() = Encode(Uniform(count(fshape), -2, 2), fshape, dtype, &f);
    *request.mutable_values()->mutable_tensor() = Encode(Uniform(count(vshape), -2, 2), vshape, dtype, &v);
    auto result = client_->DiscountProduct(request);
    ASSERT_TRUE(result.ok()) << result.status().message();

    // Reference: walk the broadcast output index by index.
    const size_t rank = std::max(fshape.size(), vshape.size());
    std::vector<int64_t> out_shape(rank);
    auto extent = [rank](const std::vector<int64_t>& s, size_t axis) {
      const size_t offset = rank - s.size();
      return axis < offset ? int64_t{1} : s[axis - offset];
    };
    for (size_t a = 0; a < rank; ++a) out_shape[a] = std::max(extent(fshape, a), extent(vshape, a));
    ASSERT_EQ(std::vector<int64_t>(result->header.shape().begin(), result->header.shape().end()),
              out_shape);
    const int64_t total = count(out_shape);
    std::vector<double> ref(total);
    for (int64_t flat = 0; flat < total; ++flat) {
      int64_t rem = flat, fi = 0, vi = 0, fstride = 1, vstride = 1;
      for (size_t a = rank; a-- > 0;) {
        const int64_t idx = rem % out_shape[a];
        rem /= out_shape[a];
        const int64_t fe = extent(fshape, a), ve = extent(vshape, a);
        if (fe != 1) fi += idx * fstride;
        if (ve != 1) vi += idx * vstride;
        fstride *= fe;
        vstride *= ve;
      }
      ref[flat] = f[fi] * v[vi];
    }
    ExpectClose(Decode(*result), ref, Tolerance(dtype));
    EXPECT_EQ(result->trailer.backend(), ExpectedBackend());
  }
}

double HaversineReference(double lat1, double lon1, double lat2, double lon2, double radius) {
  const double rad = kPi / 180;
  const double dlat = (lat2 - lat1) * rad, dlon = (lon2 - lon1) * rad;
  const double h = std::pow(std::sin(dlat / 2), 2) +
                   std::cos(lat1 * rad) * std::cos(lat2 * rad) * std::pow(std::sin(dlon / 2), 2);
  return 2 * radius * std::asin(std::sqrt(std::min(1.0, h)));
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
          ref.push_back(HaversineReference(rlat, rlon, lat, lon, 6371.0088));
        }
      }
    }
    ExpectClose(Decode(*result), ref, dtype == v1::FLOAT32 ? 2e-6 : 1e-9);
  }
}

TEST_P(ServerDTypeTest, HaversinePointsMatchesReference) {
  const v1::DType dtype = GetParam();
  std::vector<double> lat, lon;
  v1::HaversineGridRequest request;
  *request.mutable_points()->mutable_lat()->mutable_tensor() =
      Encode(Uniform(21, -89, 89), {3, 7}, dtype, &lat);
  *request.mutable_points()->mutable_lon()->mutable_tensor() =
      Encode(Uniform(21, -180, 180), {3, 7}, dtype, &lon);
  v1::GeoPoint* p = request.add_references();
  p->set_lat(10);
  p->set_lon(20);
  request.set_radius(1.0);
  auto result = client_->HaversineGrid(request);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_THAT(std::vector<int64_t>(result->header.shape().begin(), result->header.shape().end()),
              ::testing::ElementsAre(1, 3, 7));
  std::vector<double> ref;
  for (size_t i = 0; i < lat.size(); ++i) ref.push_back(HaversineReference(10, 20, lat[i], lon[i], 1));
  ExpectClose(Decode(*result), ref, dtype == v1::FLOAT32 ? 2e-6 : 1e-9);
}

TEST_P(ServerDTypeTest, NormalizeEachNormMatchesReference) {
  const v1::DType dtype = GetParam();
  for (v1::Norm norm : {v1::NORM_SUM, v1::NORM_L1, v1::NORM_L2, v1::NORM_MAX_ABS}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {1, 7}, {3, 1000003}, {5, 3}}) {
      std::vector<double> x;
      // Positive inputs keep the SUM norm well away from zero.
      v1::NormalizeRequest request;
      *request.mutable_input()->mutable_tensor() =
          Encode(Uniform(rows * cols, 0.5, 2.0), {rows, cols}, dtype, &x);
      request.set_norm(norm);
      auto result = client_->Normalize(request);
      ASSERT_TRUE(result.ok()) << result.status().message();
      std::vector<double> ref(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        double n = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double v = x[r * cols + c];
          if (norm == v1::NORM_SUM) n += v;
          if (norm == v1::NORM_L1) n += std::abs(v);
          if (norm == v1::NORM_L2) n += v * v;
          if (norm == v1::NORM_MAX_ABS) n = std::max(n, std::abs(v));
        }
        if (norm == v1::NORM_L2) n = std::sqrt(n);
        for (int64_t c = 0; c < cols; ++c) ref[r * cols + c] = x[r * cols + c] / n;
      }
      ExpectClose(Decode(*result), ref, dtype == v1::FLOAT32 ? 2e-6 : 1e-12);
    }
  }
}

// SciPy 1.10's classic formula (tau form): independent of the generalized form
// the server implements, and equal to it without weights and floating mean.
std::vector<double> ClassicLombScargle(const std::vector<double>& x, std::vector<double> y,
                                       const std::vector<double>& freqs, bool precenter,
                                       bool normalize) {
  if (precenter) {
    double mean = 0;
    for (double v : y) mean += v;
    mean /= y.size();
    for (double& v : y) v -= mean;
  }
  std::vector<double> p(freqs.size());
  for (size_t i = 0; i < freqs.size(); ++i) {
    double xc = 0, xs = 0, cc = 0, ss = 0, cs = 0;
    for (size_t j = 0; j < x.size(); ++j) {
      const double c = std::cos(freqs[i] * x[j]), s = std::sin(freqs[i] * x[j]);
      xc += y[j] * c;
      xs += y[j] * s;
      cc += c * c;
      ss += s * s;
      cs += c * s;
    }
    const double tau = std::atan2(2 * cs, cc - ss) / (2 * freqs[i]);
    const double ct = std::cos(freqs[i] * tau), st = std::sin(freqs[i] * tau);
    p[i] = 0.5 * (std::pow(ct * xc + st * xs, 2) / (ct * ct * cc + 2 * ct * st * cs + st * st * ss) +
                  std::pow(ct * xs - st * xc, 2) / (ct * ct * ss - 2 * ct * st * cs + st * st * cc));
  }
  if (normalize) {
    double yy = 0;
    for (double v : y) yy += v * v;
    for (double& v : p) v *= 2 / yy;
  }
  return p;
}

TEST_P(ServerDTypeTest, LombScargleMatchesClassicReference) {
  const v1::DType dtype = GetParam();
  // N = 1 is degenerate (CC*SS - CS^2 = 0): SciPy >= 1.15 returns NaN there too.
  for (auto [n, m] : {std::pair<int, int>{2, 7}, {7, 1}, {7, 1000003}, {200, 300}}) {
    for (bool precenter : {false, true}) {
      for (bool normalize : {false, true}) {
        std::vector<double> x, y, freqs;
        v1::LombScargleRequest request;
        *request.mutable_x()->mutable_tensor() = Encode(Uniform(n, 0, 30), {n}, dtype, &x);
        std::vector<double> signal(n);
        for (int j = 0; j < n; ++j) signal[j] = 2 * std::sin(1.3 * x[j]) + 0.5 + Uniform(1, -1, 1)[0];
        *request.mutable_y()->mutable_tensor() = Encode(signal, {n}, dtype, &y);
        *request.mutable_freqs()->mutable_tensor() = Encode(Uniform(m, 0.1, 5), {m}, dtype, &freqs);
        request.set_precenter(precenter);
        request.set_normalize(normalize);
        auto result = client_->LombScargle(request);
        ASSERT_TRUE(result.ok()) << result.status().message();
        SCOPED_TRACE(absl::StrCat("n=", n, " m=", m, " precenter=", precenter, " normalize=", normalize));
        const std::vector<double> ref = ClassicLombScargle(x, y, freqs, precenter, normalize);
        // Two samples fit any frequency exactly: D = CC*SS - CS^2 = sin^2(w dx)/4 is tiny
        // at many frequencies and float32 (the GPU's arithmetic) cannot resolve it.
        if (dtype == v1::FLOAT32 && n < 7) continue;
        if (dtype == v1::FLOAT32) {
          ExpectRelativeL2(Decode(*result), ref, 1e-3);  // GPUs accumulate float32 in float32
        } else {
          ExpectClose(Decode(*result), ref, 1e-8);
        }
      }
    }
  }
}

TEST_F(ServerTest, LombScargleFrequencyGridEqualsExplicitFrequencies) {
  std::vector<double> x, y;
  v1::LombScargleRequest request;
  *request.mutable_x()->mutable_tensor() = Encode(Uniform(64, 0, 10), {64}, v1::FLOAT64, &x);
  *request.mutable_y()->mutable_tensor() = Encode(Uniform(64, -1, 1), {64}, v1::FLOAT64, &y);
  v1::FrequencyGrid* grid = request.mutable_freq_grid();
  grid->set_start(0.01);
  grid->set_stop(10);
  grid->set_count(1001);
  auto from_grid = client_->LombScargle(request);
  ASSERT_TRUE(from_grid.ok()) << from_grid.status().message();
  std::vector<double> freqs(1001);
  for (int i = 0; i < 1001; ++i) freqs[i] = i == 1000 ? 10.0 : 0.01 + i * ((10 - 0.01) / 1000);
  ExpectClose(Decode(*from_grid), ClassicLombScargle(x, y, freqs, false, false), 1e-8);
}

TEST_F(ServerTest, UploadDownloadListDeleteRoundTripsByteExact) {
  // 1 MiB + 3 floats in 4096-byte chunks: ~257 data messages each way.
  const int64_t n = (1 << 18) + 3;
  std::vector<double> values;
  const v1::Tensor tensor = Encode(Uniform(n, -1, 1), {n}, v1::FLOAT32, &values);
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
  const std::vector<double> out = Decode(*downloaded);
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
  const v1::Tensor factors = Encode(Uniform(12, 1, 2), {3, 4}, v1::FLOAT64, &f);
  const v1::Tensor values = Encode(Uniform(24, 1, 2), {2, 3, 4}, v1::FLOAT64, &v);
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
  ExpectClose(Decode(*result), ref, 1e-15);
}

TEST_F(ServerTest, CancellingMidStreamFreesTheResult) {
  const uint64_t baseline = server_->backend_stats().devices.at(0).pool_used_bytes;
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

  auto stub = v1::Compute::NewStub(channel_);
  grpc::ClientContext context;
  auto reader = stub->HaversineGrid(&context, request);
  v1::ResultChunk chunk;
  ASSERT_TRUE(reader->Read(&chunk));
  ASSERT_TRUE(chunk.has_header());
  ASSERT_TRUE(reader->Read(&chunk));
  ASSERT_TRUE(chunk.has_data());
  EXPECT_GT(server_->backend_stats().devices.at(0).pool_used_bytes, baseline);
  context.TryCancel();
  while (reader->Read(&chunk)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::CANCELLED);
  // The server frees the result once its reactor sees the cancellation.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server_->backend_stats().devices.at(0).pool_used_bytes != baseline &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->backend_stats().devices.at(0).pool_used_bytes, baseline);
}

TEST_F(ServerTest, InfoReportsBackendOperationsAndLimits) {
  auto info = client_->GetInfo();
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->backend(), ExpectedBackend());
  EXPECT_THAT(info->backend_note(), HasSubstr(ExpectedBackend()));
  ASSERT_GE(info->devices_size(), 1);
  EXPECT_GT(info->devices(0).memory_bytes(), 0u);
  EXPECT_EQ(info->operations_size(), 4);
  EXPECT_EQ(info->limits().buffer_quota_bytes(), 64ull << 20);
  EXPECT_EQ(info->limits().default_chunk_bytes(), 1u << 20);
  EXPECT_EQ(info->limits().max_rank(), 8u);
  // Every admission limit is reported, with ServerConfig's defaults.
  const ServerConfig defaults;
  EXPECT_EQ(info->limits().max_queue_depth(), static_cast<uint32_t>(defaults.max_queue_depth));
  EXPECT_EQ(info->limits().max_device_queue_depth(),
            static_cast<uint32_t>(defaults.max_device_queue_depth));
  EXPECT_EQ(info->limits().max_in_flight(), static_cast<uint32_t>(defaults.max_in_flight));
  EXPECT_EQ(info->limits().max_in_flight_per_connection(),
            static_cast<uint32_t>(defaults.max_in_flight_per_connection));
  EXPECT_EQ(info->limits().max_concurrent_streams(),
            static_cast<uint32_t>(defaults.max_concurrent_streams));
  EXPECT_EQ(info->limits().resource_quota_bytes(), defaults.resource_quota_bytes);
  auto health = client_->Health();
  ASSERT_TRUE(health.ok()) << health.status().message();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
}

// ---------------------------------------------------------------------------
// Bad input: each case gets its code and a message naming the field and limit,
// and the server keeps serving afterwards.

struct BadInputCase {
  std::string name;
  absl::StatusCode code;
  std::string message;
};

class BadInputTest : public ServerTest {
 protected:
  void TearDown() override {
    if (server_ == nullptr) return;  // skipped
    // Still serving, and still computing correctly.
    auto health = client_->Health();
    ASSERT_TRUE(health.ok()) << health.status().message();
    EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
    v1::NormalizeRequest request;
    *request.mutable_input()->mutable_tensor() = Encode({1, 3}, {2}, v1::FLOAT64);
    auto result = client_->Normalize(request);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_THAT(Decode(*result), ::testing::ElementsAre(0.25, 0.75));
  }

  static void ExpectError(const absl::Status& status, absl::StatusCode code,
                          const std::string& message) {
    EXPECT_EQ(status.code(), code) << status.message();
    EXPECT_THAT(std::string(status.message()), HasSubstr(message));
  }

  v1::Tensor Good(std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    return Encode(Uniform(n, 1, 2), shape, v1::FLOAT64);
  }
};

TEST_F(BadInputTest, TensorEncodingErrors) {
  v1::NormalizeRequest request;
  v1::Tensor* t = request.mutable_input()->mutable_tensor();
  *t = Good({4});
  t->set_dtype(static_cast<v1::DType>(7));
  ExpectError(client_->Normalize(request).status(), absl::StatusCode::kInvalidArgument,
              "input.dtype has unknown value 7");
  t->set_dtype(v1::DTYPE_UNSPECIFIED);
  ExpectError(client_->Normalize(request).status(), absl::StatusCode::kInvalidArgument,
              "input.dtype is DTYPE_UNSPECIFIED");
  *t = Good({4});
  t->mutable_data()->resize(31);
  ExpectError(client_->Normalize(request).status(), absl::StatusCode::kInvalidArgument,
              "input.data has 31 bytes but shape (4,) of float64 needs 32");
  t->clear_shape();
  t->add_shape(int64_t{1} << 40);
  t->add_shape(int64_t{1} << 40);
  ExpectError(client_->Normalize(request).status(), absl::StatusCode::kInvalidArgument,
              "elements (the server's max_elements)");
  t->clear_shape();
  for (int i = 0; i < 9; ++i) t->add_shape(1);
  ExpectError(client_->Normalize(request).status(), absl::StatusCode::kInvalidArgument,
              "input.shape has rank 9; the limit is 8");
  t->clear_shape();
  t->add_shape(-3);
  ExpectError(client_->Normalize(request).status(), absl::StatusCode::kInvalidArgument,
              "input.shape[0] is -3");
  request.clear_input();
  ExpectError(client_->Normalize(request).status(), absl::StatusCode::kInvalidArgument,
              "input is not set");
}

TEST_F(BadInputTest, OperationRuleErrors) {
  v1::DiscountProductRequest discount;
  *discount.mutable_factors()->mutable_tensor() = Good({3, 5});
  *discount.mutable_values()->mutable_tensor() = Good({2, 4, 5});
  ExpectError(client_->DiscountProduct(discount).status(), absl::StatusCode::kInvalidArgument,
              "factors.shape (3, 5) and values.shape (2, 4, 5) do not broadcast");
  *discount.mutable_factors()->mutable_tensor() = Good({0, 5});
  ExpectError(client_->DiscountProduct(discount).status(), absl::StatusCode::kInvalidArgument,
              "factors.shape (0, 5) is empty");

  v1::HaversineGridRequest haversine;
  v1::LatLonMesh* mesh = haversine.mutable_mesh();
  mesh->set_lat_stop(10);
  mesh->set_n_lat(0);
  mesh->set_lon_stop(10);
  mesh->set_n_lon(5);
  v1::GeoPoint* ref = haversine.add_references();
  ref->set_lat(10);
  ExpectError(client_->HaversineGrid(haversine).status(), absl::StatusCode::kInvalidArgument,
              "mesh.n_lat is 0");
  mesh->set_n_lat(5);
  ref->set_lat(95);
  ExpectError(client_->HaversineGrid(haversine).status(), absl::StatusCode::kInvalidArgument,
              "references[0].lat is 95; latitude must lie in [-90, 90]");
  ref->set_lat(0);
  mesh->set_lat_start(-91);
  ExpectError(client_->HaversineGrid(haversine).status(), absl::StatusCode::kInvalidArgument,
              "mesh.lat_start is -91");

  v1::LombScargleRequest lomb;
  *lomb.mutable_x()->mutable_tensor() = Good({10});
  *lomb.mutable_y()->mutable_tensor() = Good({11});
  *lomb.mutable_freqs()->mutable_tensor() = Good({4});
  ExpectError(client_->LombScargle(lomb).status(), absl::StatusCode::kInvalidArgument,
              "x.shape (10,) and y.shape (11,) differ in length");
  *lomb.mutable_y()->mutable_tensor() = Encode(Uniform(10, 0, 1), {10}, v1::FLOAT32);
  ExpectError(client_->LombScargle(lomb).status(), absl::StatusCode::kInvalidArgument,
              "y is float32 but x is float64");

  v1::NormalizeRequest normalize;
  *normalize.mutable_input()->mutable_tensor() =
      Encode({1, 2, 3, 4, -4, 0, 0, 0, 0}, {3, 3}, v1::FLOAT64);
  ExpectError(client_->Normalize(normalize).status(), absl::StatusCode::kInvalidArgument,
              "input row 1 has");
  *normalize.mutable_input()->mutable_tensor() =
      Encode({1, 2, 3, 4, 5, std::nan("")}, {2, 3}, v1::FLOAT64);
  ExpectError(client_->Normalize(normalize).status(), absl::StatusCode::kInvalidArgument,
              "input row 1 has");
}

TEST_F(BadInputTest, BufferAndLimitErrors) {
  v1::NormalizeRequest normalize;
  normalize.mutable_input()->set_buffer_id("00000000000000000000000000000000");
  ExpectError(client_->Normalize(normalize).status(), absl::StatusCode::kNotFound,
              "input.buffer_id '00000000000000000000000000000000' is not a stored buffer");
  ExpectError(client_->Delete("nope").status(), absl::StatusCode::kNotFound, "buffer_id 'nope'");

  // 64 MiB quota: a 72 MiB upload is refused from its header, before any data.
  {
    auto stub = v1::Buffers::NewStub(channel_);
    grpc::ClientContext context;
    v1::BufferInfo info;
    auto writer = stub->Upload(&context, &info);
    v1::UploadRequest header;
    header.mutable_header()->set_name("big");
    header.mutable_header()->set_dtype(v1::FLOAT64);
    header.mutable_header()->add_shape(9 << 20);
    writer->Write(header);
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    EXPECT_EQ(status.error_code(), grpc::RESOURCE_EXHAUSTED);
    EXPECT_THAT(status.error_message(),
                HasSubstr("upload 'big' needs 75497472 bytes but the buffer quota "
                          "(buffer_quota_bytes 67108864)"));
  }
  EXPECT_EQ(client_->List()->used_bytes(), 0u);

  *normalize.mutable_input()->mutable_tensor() = Good({8});
  normalize.mutable_output()->set_chunk_bytes(1);
  ExpectError(client_->Normalize(normalize).status(), absl::StatusCode::kInvalidArgument,
              "output.chunk_bytes is 1; it must lie in [4096, 4194304]");
  normalize.mutable_output()->set_chunk_bytes(8u << 20);
  ExpectError(client_->Normalize(normalize).status(), absl::StatusCode::kInvalidArgument,
              "output.chunk_bytes is 8388608");
}

TEST_F(BadInputTest, UploadFramingErrorsStoreNothing) {
  auto stub = v1::Buffers::NewStub(channel_);
  auto upload = [&](const std::vector<v1::UploadRequest>& messages) {
    grpc::ClientContext context;
    v1::BufferInfo info;
    auto writer = stub->Upload(&context, &info);
    for (const auto& m : messages) {
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  };
  v1::UploadRequest header;
  header.mutable_header()->set_dtype(v1::FLOAT32);
  header.mutable_header()->add_shape(4);
  v1::UploadRequest data;
  data.set_data(std::string(8, 'x'));
  grpc::Status s = upload({data});
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("data before the header"));
  s = upload({header, data});
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("ended after 8 of 16 declared bytes"));
  s = upload({header, data, data, data});
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("exceeds the declared size"));
  s = upload({header, header});
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("second header"));
  s = upload({});
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("before a header"));
  EXPECT_EQ(client_->List()->buffers_size(), 0);
  EXPECT_EQ(client_->List()->used_bytes(), 0u);
}

TEST_F(BadInputTest, MessageOverTheLimitIsResourceExhausted) {
  ServerConfig config = TestConfig();
  config.max_receive_message_bytes = 1 << 20;
  StartServer(config);
  v1::NormalizeRequest request;
  *request.mutable_input()->mutable_tensor() = Good({200000});  // 1.6 MB
  ExpectError(client_->Normalize(request).status(), absl::StatusCode::kResourceExhausted,
              "larger than max");
}

}  // namespace
}  // namespace gpucompute
