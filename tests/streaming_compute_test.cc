// Compute.StreamingCompute (inputs larger than the GPU): results byte
// for byte the unary operation's for each operation and dtype, an input larger
// than the server's memory budget streamed through with bounded memory, a client
// that stops reading held back at the chunk bound, cancellation freeing every
// charged byte, and bad headers and chunks refused naming the field and the limit.
// GPUCOMPUTE_TEST_BACKEND=cuda runs it on the CUDA backend.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"
#include "tests/testing/server_fixture.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using test::TestServer;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kBudget = 64 * kMiB;
constexpr int kChunksInFlight = 4;
// gRPC's own memory, set apart from the host budget these tests bound. At the 64 MiB
// floor the budget's 1/8 would give, gRPC's reclaimer reset large uploads (RST_STREAM
// ENHANCE_YOUR_CALM) on a loaded machine: a server starved of CPU acks BDP pings late,
// the estimate and the stream window grow past the quota, and the client fills the
// window while the handler holds its chunks. 256 MiB holds (docs/operations.md,
// --resource_quota_bytes).
constexpr uint64_t kGrpcQuota = 256 * kMiB;

ServerConfig StreamingConfig() {
  ServerConfig config = test::LoopbackConfig();
  if (test::OnCuda()) config.backend.kind = BackendKind::kCuda;
  // The CUDA backend charges its pinned staging to the host budget at start.
  config.backend.host_memory_budget_bytes =
      kBudget + (test::OnCuda() ? config.backend.pinned_staging_bytes : 0);
  config.backend.memory_budget_wait = absl::Milliseconds(200);
  config.streaming_chunks_in_flight = kChunksInFlight;
  config.resource_quota_bytes = kGrpcQuota;
  return config;
}

template <typename T>
std::string RandomBytes(size_t count, double lo, double hi, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::string bytes(count * sizeof(T), '\0');
  for (size_t i = 0; i < count; ++i) {
    const T value = static_cast<T>(dist(rng));
    std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
  }
  return bytes;
}

// Where two results first differ (their size when they do not), for failure messages.
std::string FirstDifference(absl::string_view a, absl::string_view b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return absl::StrCat("first difference at byte ", ia - a.begin(), " of ", a.size(), " and ",
                      b.size());
}

// The streamed result against the unary operation's: header and bytes equal, and
// more than `min_chunks` chunks streamed.
void ExpectSameResult(const absl::StatusOr<client::Result>& streamed,
                      const absl::StatusOr<client::Result>& expected, uint64_t min_chunks = 3) {
  ASSERT_TRUE(expected.ok()) << expected.status().message();
  ASSERT_TRUE(streamed.ok()) << streamed.status().message();
  EXPECT_EQ(streamed->header.SerializeAsString(), expected->header.SerializeAsString());
  EXPECT_TRUE(streamed->data == expected->data) << FirstDifference(streamed->data, expected->data);
  EXPECT_GT(streamed->trailer.streamed_chunks(), min_chunks);
}

v1::Tensor TensorOf(v1::DType dtype, const std::vector<int64_t>& shape, std::string data) {
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  tensor.mutable_shape()->Add(shape.begin(), shape.end());
  tensor.set_data(std::move(data));
  return tensor;
}

v1::StreamingComputeHeader Header(v1::StreamingOperation op, v1::DType dtype,
                                  const std::vector<int64_t>& shape) {
  v1::StreamingComputeHeader header;
  header.set_operation(op);
  header.set_dtype(dtype);
  header.mutable_shape()->Add(shape.begin(), shape.end());
  return header;
}

// A client sending chunks of about 24 KiB (many chunks per stream).
std::unique_ptr<client::Client> SmallChunkClient(TestServer& server) {
  client::ClientOptions options;
  options.upload_chunk_bytes = 24 << 10;
  return std::make_unique<client::Client>(server.channel(), options);
}

class StreamingComputeTest : public ::testing::TestWithParam<v1::DType> {
 protected:
  void SetUp() override {
    auto started = TestServer::Start(StreamingConfig());
    ASSERT_TRUE(started.ok()) << started.status().message();
    server_ = *std::move(started);
    client_ = SmallChunkClient(*server_);
  }
  v1::DType dtype() const { return GetParam(); }
  std::string Random(size_t count, double lo, double hi, uint32_t seed) const {
    return dtype() == v1::FLOAT32 ? RandomBytes<float>(count, lo, hi, seed)
                                  : RandomBytes<double>(count, lo, hi, seed);
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<client::Client> client_;
};

// Chunks of any element count: they start and end inside the factors' period,
// which may be broadcast within (extents of 1) or the whole input.
TEST_P(StreamingComputeTest, DiscountProductMatchesTheUnaryOperationByteForByte) {
  const std::vector<int64_t> shape = {301, 24, 7};
  const std::string values = Random(301 * 24 * 7, -100, 100, 2);
  const std::vector<std::vector<int64_t>> factor_shapes = {
      {24, 7}, {24, 1}, {7}, {1, 1, 7}, {1, 24, 1}, {301, 1, 7}, {301, 24, 7}};
  for (const std::vector<int64_t>& factor_shape : factor_shapes) {
    int64_t count = 1;
    for (int64_t extent : factor_shape) count *= extent;
    const std::string factors = Random(count, 0.5, 1.0, 1);
    v1::DiscountProductRequest unary;
    *unary.mutable_factors()->mutable_tensor() = TensorOf(dtype(), factor_shape, factors);
    *unary.mutable_values()->mutable_tensor() = TensorOf(dtype(), shape, values);
    v1::StreamingComputeHeader header = Header(v1::STREAMING_DISCOUNT_PRODUCT, dtype(), shape);
    *header.mutable_factors()->mutable_tensor() = TensorOf(dtype(), factor_shape, factors);
    const absl::string_view operands[] = {values};
    ExpectSameResult(client_->StreamingCompute(header, operands), client_->DiscountProduct(unary));
  }
}

TEST_P(StreamingComputeTest, HaversinePointsMatchTheUnaryOperationByteForByte) {
  const std::vector<int64_t> shape = {4003, 3};
  const std::string lat = Random(4003 * 3, -90, 90, 3);
  const std::string lon = Random(4003 * 3, -180, 180, 4);
  v1::HaversineGridRequest unary;
  *unary.mutable_points()->mutable_lat()->mutable_tensor() = TensorOf(dtype(), shape, lat);
  *unary.mutable_points()->mutable_lon()->mutable_tensor() = TensorOf(dtype(), shape, lon);
  v1::StreamingComputeHeader header;
  for (auto [la, lo] : {std::pair{10.0, 20.0}, {-45.5, 170.0}, {89.0, -3.0}}) {
    v1::GeoPoint* ref = unary.add_references();
    ref->set_lat(la);
    ref->set_lon(lo);
    *header.add_references() = *ref;
  }
  header.set_operation(v1::STREAMING_HAVERSINE_POINTS);
  header.set_dtype(dtype());
  header.mutable_shape()->Add(shape.begin(), shape.end());
  header.set_chunk_bytes(4096);  // several result messages per reference and chunk
  const absl::string_view operands[] = {lat, lon};
  ExpectSameResult(client_->StreamingCompute(header, operands), client_->HaversineGrid(unary));
}

TEST_P(StreamingComputeTest, NormalizeMatchesTheUnaryOperationByteForByte) {
  const std::vector<int64_t> shape = {7, 131, 37};
  const std::string input = Random(7 * 131 * 37, 0.1, 10, 5);
  for (v1::Norm norm : {v1::NORM_SUM, v1::NORM_L2, v1::NORM_MAX_ABS}) {
    v1::NormalizeRequest unary;
    *unary.mutable_input()->mutable_tensor() = TensorOf(dtype(), shape, input);
    unary.set_norm(norm);
    v1::StreamingComputeHeader header = Header(v1::STREAMING_NORMALIZE, dtype(), shape);
    header.set_norm(norm);
    const absl::string_view operands[] = {input};
    ExpectSameResult(client_->StreamingCompute(header, operands), client_->Normalize(unary));
  }
}

// Hundreds of small chunks: reads, chunk tasks and writes all interleave.
TEST_P(StreamingComputeTest, ManySmallChunksKeepTheirOrder) {
  client::ClientOptions options;
  options.upload_chunk_bytes = 2048;
  client::Client tiny(server_->channel(), options);
  const std::vector<int64_t> shape = {8192, 16};
  const std::string input = Random(8192 * 16, 0.1, 10, 6);
  v1::NormalizeRequest unary;
  *unary.mutable_input()->mutable_tensor() = TensorOf(dtype(), shape, input);
  v1::StreamingComputeHeader header = Header(v1::STREAMING_NORMALIZE, dtype(), shape);
  header.set_chunk_bytes(4096);
  const absl::string_view operands[] = {input};
  ExpectSameResult(tiny.StreamingCompute(header, operands), client_->Normalize(unary), 255);
}

// A striped client: calls over ranges of the leading axis on three connections,
// wherever that gives the whole's result; one call elsewhere. Each result byte for
// byte the unary operation's.
TEST_P(StreamingComputeTest, StripedCallsMatchTheUnaryOperationByteForByte) {
  client::ClientOptions options;
  options.upload_chunk_bytes = 24 << 10;
  options.stripes = 3;
  options.stripe_bytes = 4096;
  options.stripe_channels = client::MakeStripeChannels(server_->target(), 2);
  client::Client striped(server_->channel(), options);
  const std::vector<int64_t> shape = {301, 24, 7};
  const std::string values = Random(301 * 24 * 7, -100, 100, 7);
  // Repeating along the leading axis (split), spanning it (one call), and stored
  // on the server (its shape looked up).
  struct Factors {
    std::vector<int64_t> shape;
    bool stored;
  };
  for (const Factors& f : {Factors{{24, 7}, false}, Factors{{1, 24, 1}, false},
                           Factors{{301, 1, 7}, false}, Factors{{24, 7}, true}}) {
    SCOPED_TRACE(absl::StrCat("factors ", absl::StrJoin(f.shape, "x"), f.stored ? " stored" : ""));
    int64_t count = 1;
    for (int64_t extent : f.shape) count *= extent;
    const std::string factors = Random(count, 0.5, 1.0, 8);
    v1::DiscountProductRequest unary;
    *unary.mutable_factors()->mutable_tensor() = TensorOf(dtype(), f.shape, factors);
    *unary.mutable_values()->mutable_tensor() = TensorOf(dtype(), shape, values);
    v1::StreamingComputeHeader header = Header(v1::STREAMING_DISCOUNT_PRODUCT, dtype(), shape);
    if (f.stored) {
      absl::StatusOr<v1::BufferInfo> info = client_->Upload("factors", dtype(), f.shape, factors);
      ASSERT_TRUE(info.ok()) << info.status().message();
      header.mutable_factors()->set_buffer_id(info->id());
    } else {
      *header.mutable_factors()->mutable_tensor() = TensorOf(dtype(), f.shape, factors);
    }
    const absl::string_view operands[] = {values};
    ExpectSameResult(striped.StreamingCompute(header, operands), client_->DiscountProduct(unary));
  }
  const std::string input = Random(301 * 24 * 7, 0.1, 10, 9);
  v1::NormalizeRequest unary;
  *unary.mutable_input()->mutable_tensor() = TensorOf(dtype(), shape, input);
  v1::StreamingComputeHeader header = Header(v1::STREAMING_NORMALIZE, dtype(), shape);
  const absl::string_view operands[] = {input};
  ExpectSameResult(striped.StreamingCompute(header, operands), client_->Normalize(unary));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, StreamingComputeTest, ::testing::Values(v1::FLOAT32, v1::FLOAT64),
                         [](const auto& info) { return v1::DType_Name(info.param); });

// 160 MiB streamed through a server whose host budget is 64 MiB: the call
// succeeds, the budget's use stays within the chunk bound, and returns to where
// it was.
TEST(StreamingComputeMemoryTest, InputLargerThanTheBudgetStreamsWithBoundedMemory) {
  auto started = TestServer::Start(StreamingConfig());
  ASSERT_TRUE(started.ok()) << started.status().message();
  TestServer& server = **started;
  const uint64_t baseline = server.HostBudgetUsed();
  constexpr int64_t kRows = 40 * 1024;  // rows of 1024 float32: 160 MiB
  constexpr int64_t kRow = 1024;
  std::string values(kRows * kRow * sizeof(float), '\0');
  float* v = reinterpret_cast<float*>(values.data());
  for (int64_t i = 0; i < kRows * kRow; ++i) v[i] = static_cast<float>(i % 1000) * 0.5f;
  std::vector<float> f(kRow);
  for (int64_t i = 0; i < kRow; ++i) f[i] = 1.0f + static_cast<float>(i) / 1024.0f;
  v1::StreamingComputeHeader header;
  header.set_operation(v1::STREAMING_DISCOUNT_PRODUCT);
  header.set_dtype(v1::FLOAT32);
  header.add_shape(kRows);
  header.add_shape(kRow);
  *header.mutable_factors()->mutable_tensor() =
      TensorOf(v1::FLOAT32, {kRow}, std::string(reinterpret_cast<const char*>(f.data()),
                                                f.size() * sizeof(float)));

  std::atomic<bool> done{false};
  std::atomic<uint64_t> peak{0};
  std::thread sampler([&] {
    while (!done.load()) {
      peak.store(std::max(peak.load(), server.HostBudgetUsed()));
      absl::SleepFor(absl::Milliseconds(2));
    }
  });
  const absl::string_view operands[] = {values};
  client::ClientOptions options;
  options.upload_chunk_bytes = (4 << 20) - (64 << 10);  // the largest a server takes
  client::Client client(server.channel(), options);
  absl::StatusOr<client::Result> streamed = client.StreamingCompute(header, operands);
  done.store(true);
  sampler.join();
  ASSERT_TRUE(streamed.ok()) << streamed.status().message();
  ASSERT_EQ(streamed->data.size(), values.size());
  const float* out = reinterpret_cast<const float*>(streamed->data.data());
  for (int64_t i = 0; i < kRows * kRow; ++i) {
    ASSERT_EQ(out[i], f[i % kRow] * v[i]) << "element " << i;
  }
  // Per chunk in flight: the received message, its input and output arrays and
  // (on a GPU) the result copy, each about a 4 MiB message.
  const uint64_t chunk = options.upload_chunk_bytes + 64 * 1024;
  EXPECT_LE(peak.load() - baseline, kChunksInFlight * 4 * chunk) << "peak " << peak.load();
  EXPECT_EQ(server.AwaitHostBudgetUsed(baseline), baseline);
}

using RawStream = grpc::ClientReaderWriter<v1::StreamingComputeRequest, v1::ResultChunk>;

v1::StreamingComputeRequest HeaderMessage(v1::StreamingOperation op, std::vector<int64_t> shape) {
  v1::StreamingComputeRequest message;
  v1::StreamingComputeHeader* header = message.mutable_header();
  header->set_operation(op);
  header->set_dtype(v1::FLOAT64);
  header->mutable_shape()->Add(shape.begin(), shape.end());
  if (op == v1::STREAMING_HAVERSINE_POINTS) header->add_references();
  return message;
}

// `bytes` bytes of float64 `value`s (the last one cut short if they do not divide).
v1::StreamingComputeRequest DataMessage(size_t bytes, double value = 1.0) {
  std::string data(bytes, '\0');
  for (size_t at = 0; at + sizeof(double) <= bytes; at += sizeof(double)) {
    std::memcpy(data.data() + at, &value, sizeof(double));
  }
  v1::StreamingComputeRequest message;
  message.set_data(std::move(data));
  return message;
}

// Writes `messages` (then closes the sending side) and reads to the end: the status.
grpc::Status Exchange(TestServer& server, const std::vector<v1::StreamingComputeRequest>& messages) {
  grpc::ClientContext context;
  std::unique_ptr<RawStream> stream = server.compute().StreamingCompute(&context);
  for (const v1::StreamingComputeRequest& message : messages) {
    if (!stream->Write(message)) break;
  }
  stream->WritesDone();
  v1::ResultChunk chunk;
  while (stream->Read(&chunk)) {
  }
  return stream->Finish();
}

// A client that sends without reading holds at most the chunk bound on the
// server; cancelling it frees every charged byte.
TEST(StreamingComputeMemoryTest, StalledReaderIsHeldAtTheChunkBoundAndCancelFreesEverything) {
  auto started = TestServer::Start(StreamingConfig());
  ASSERT_TRUE(started.ok()) << started.status().message();
  TestServer& server = **started;
  const uint64_t baseline = server.HostBudgetUsed();
  grpc::ClientContext context;
  std::unique_ptr<RawStream> stream = server.compute().StreamingCompute(&context);
  constexpr int64_t kRowsPerChunk = 2048;  // 2048 x 256 float64: 4 MiB
  constexpr int kChunks = 64;
  std::atomic<int> written{0};
  std::thread writer([&] {
    if (!stream->Write(HeaderMessage(v1::STREAMING_NORMALIZE, {kRowsPerChunk * kChunks, 256}))) {
      return;
    }
    const v1::StreamingComputeRequest chunk = [&] {
      v1::StreamingComputeRequest message;
      std::vector<double> ones(kRowsPerChunk * 256, 1.0);
      message.set_data(std::string(reinterpret_cast<const char*>(ones.data()),
                                   ones.size() * sizeof(double)));
      return message;
    }();
    for (int i = 0; i < kChunks && stream->Write(chunk); ++i) written.fetch_add(1);
  });
  absl::SleepFor(absl::Seconds(1));
  EXPECT_LT(written.load(), kChunks);  // flow control holds the writer back
  const uint64_t held = server.HostBudgetUsed() - baseline;
  EXPECT_LE(held, kChunksInFlight * 3 * 4 * kMiB + kMiB) << held;
  context.TryCancel();
  writer.join();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(server.AwaitHostBudgetUsed(baseline), baseline);
}

// A client that sends a header and then nothing, or stops taking results, is
// cancelled after --stream_idle_timeout and holds nothing.
TEST(StreamingComputeMemoryTest, SilentOrStalledClientsAreCancelledAfterTheIdleTimeout) {
  ServerConfig config = StreamingConfig();
  config.stream_idle_timeout = absl::Milliseconds(300);
  auto started = TestServer::Start(config);
  ASSERT_TRUE(started.ok()) << started.status().message();
  TestServer& server = **started;
  const uint64_t baseline = server.HostBudgetUsed();
  {
    grpc::ClientContext context;
    std::unique_ptr<RawStream> stream = server.compute().StreamingCompute(&context);
    ASSERT_TRUE(stream->Write(HeaderMessage(v1::STREAMING_NORMALIZE, {1000, 50})));
    v1::ResultChunk header;
    EXPECT_TRUE(stream->Read(&header) && header.has_header());
    v1::ResultChunk more;
    EXPECT_FALSE(stream->Read(&more));  // ended by the server after 300 ms
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_THAT(status.error_message(), HasSubstr("no message for 300ms (stream_idle_timeout)"));
  }
  {
    // 64 MiB of results the client never takes.
    grpc::ClientContext context;
    std::unique_ptr<RawStream> stream = server.compute().StreamingCompute(&context);
    constexpr int64_t kRows = 8192;
    ASSERT_TRUE(stream->Write(HeaderMessage(v1::STREAMING_NORMALIZE, {kRows * 32, 64})));
    const v1::StreamingComputeRequest chunk = DataMessage(kRows * 64 * 8);
    for (int i = 0; i < 32 && stream->Write(chunk); ++i) {
    }
    EXPECT_EQ(server.AwaitHostBudgetUsed(baseline), baseline);  // before the client reads
    v1::ResultChunk result;
    while (stream->Read(&result)) {  // what its transport had taken in
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_EQ(server.AwaitHostBudgetUsed(baseline), baseline);
}

// A zero row in the last of three striped calls: that call fails, naming its rows,
// the others are cancelled, and the server frees every charged byte.
TEST(StreamingComputeErrorsTest, AFailingStripeCancelsTheOthersAndFreesEverything) {
  auto started = TestServer::Start(StreamingConfig());
  ASSERT_TRUE(started.ok()) << started.status().message();
  TestServer& server = **started;
  const uint64_t baseline = server.HostBudgetUsed();
  client::ClientOptions options;
  options.upload_chunk_bytes = 64 << 10;
  options.stripes = 3;
  options.stripe_bytes = 4096;
  options.stripe_channels = client::MakeStripeChannels(server.target(), 2);
  client::Client striped(server.channel(), options);
  const int64_t rows = 3000, columns = 64;
  std::string input = RandomBytes<double>(rows * columns, 0.1, 10, 10);
  std::memset(input.data() + (rows - 1) * columns * 8, 0, columns * 8);  // a zero sum
  v1::StreamingComputeHeader header = Header(v1::STREAMING_NORMALIZE, v1::FLOAT64, {rows, columns});
  const absl::string_view operands[] = {input};
  const absl::StatusOr<client::Result> result = striped.StreamingCompute(header, operands);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status().message();
  EXPECT_THAT(result.status().message(),
              HasSubstr("striped StreamingCompute, call 2 (leading rows 2000 to 2999)"));
  EXPECT_EQ(server.AwaitHostBudgetUsed(baseline), baseline);
}

// A striped call whose connection does not open (no server on its port yet) fails
// UNAVAILABLE, waits for the connection and runs again whole: the result is right.
TEST(StreamingComputeErrorsTest, AStripeWhoseConnectionFailsRunsAgain) {
  auto started = TestServer::Start(StreamingConfig());
  ASSERT_TRUE(started.ok()) << started.status().message();
  TestServer& server = **started;
  int port = 0;
  {
    auto gone = TestServer::Start(StreamingConfig());  // a free port, closed again
    ASSERT_TRUE(gone.ok()) << gone.status().message();
    port = (*gone)->port();
  }
  client::ClientOptions options;
  options.upload_chunk_bytes = 64 << 10;
  options.stripes = 2;
  options.stripe_bytes = 4096;
  options.stripe_channels = client::MakeStripeChannels(absl::StrCat("127.0.0.1:", port), 1);
  client::Client striped(server.channel(), options);
  std::unique_ptr<TestServer> late;
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(300));
    ServerConfig config = StreamingConfig();
    config.address = absl::StrCat("127.0.0.1:", port);
    absl::StatusOr<std::unique_ptr<TestServer>> up = TestServer::Start(config);
    if (up.ok()) late = *std::move(up);
  });
  const std::string input = RandomBytes<double>(600 * 50, 0.1, 10, 11);
  v1::StreamingComputeHeader header = Header(v1::STREAMING_NORMALIZE, v1::FLOAT64, {600, 50});
  const absl::string_view operands[] = {input};
  const absl::StatusOr<client::Result> streamed = striped.StreamingCompute(header, operands);
  starter.join();
  ASSERT_NE(late, nullptr) << "port " << port << " was taken";
  v1::NormalizeRequest unary;
  *unary.mutable_input()->mutable_tensor() = TensorOf(v1::FLOAT64, {600, 50}, input);
  ExpectSameResult(streamed, server.client().Normalize(unary), 1);
}

TEST(StreamingComputeErrorsTest, BadHeadersAndChunksNameTheFieldAndTheLimit) {
  auto started = TestServer::Start(StreamingConfig());
  ASSERT_TRUE(started.ok()) << started.status().message();
  TestServer& server = **started;
  const uint64_t baseline = server.HostBudgetUsed();
  struct Case {
    std::vector<v1::StreamingComputeRequest> messages;
    grpc::StatusCode code;
    std::string message;
  };
  v1::StreamingComputeRequest wide_factors = HeaderMessage(v1::STREAMING_DISCOUNT_PRODUCT, {10, 4});
  *wide_factors.mutable_header()->mutable_factors()->mutable_tensor() =
      TensorOf(v1::FLOAT64, {2, 4}, std::string(64, '\0'));
  v1::StreamingComputeRequest widening_factors =
      HeaderMessage(v1::STREAMING_DISCOUNT_PRODUCT, {10, 4});
  *widening_factors.mutable_header()->mutable_factors()->mutable_tensor() =
      TensorOf(v1::FLOAT64, {3, 1, 4}, std::string(96, '\0'));
  v1::StreamingComputeRequest f32_factors = HeaderMessage(v1::STREAMING_DISCOUNT_PRODUCT, {10, 4});
  *f32_factors.mutable_header()->mutable_factors()->mutable_tensor() =
      TensorOf(v1::FLOAT32, {4}, std::string(16, '\0'));
  const std::vector<Case> cases = {
      {{DataMessage(8)}, grpc::INVALID_ARGUMENT, "the first message must be the header"},
      {{}, grpc::INVALID_ARGUMENT, "stream ended before a header"},
      {{HeaderMessage(v1::STREAMING_OPERATION_UNSPECIFIED, {4})}, grpc::INVALID_ARGUMENT,
       "header.operation 0 is not a streaming operation"},
      {{HeaderMessage(v1::STREAMING_NORMALIZE, {})}, grpc::INVALID_ARGUMENT,
       "header.shape is ()"},
      {{HeaderMessage(v1::STREAMING_NORMALIZE, {4, 0})}, grpc::INVALID_ARGUMENT,
       "header.shape (4, 0) is empty"},
      {{HeaderMessage(v1::STREAMING_DISCOUNT_PRODUCT, {10, 4})}, grpc::INVALID_ARGUMENT,
       "header.factors is not set"},
      {{wide_factors}, grpc::INVALID_ARGUMENT,
       "header.factors.shape (2, 4) and header.shape (10, 4) do not broadcast"},
      {{widening_factors}, grpc::INVALID_ARGUMENT,
       "header.factors.shape (3, 1, 4) widens header.shape (10, 4) to (3, 10, 4)"},
      {{f32_factors}, grpc::INVALID_ARGUMENT, "header.factors is float32 but header.dtype is float64"},
      {{HeaderMessage(v1::STREAMING_NORMALIZE, {10, 50}), DataMessage(50 * 8 + 8)},
       grpc::INVALID_ARGUMENT, "a positive multiple of 400 bytes (50 float64 elements per row)"},
      {{HeaderMessage(v1::STREAMING_HAVERSINE_POINTS, {10}), DataMessage(8)},
       grpc::INVALID_ARGUMENT, "a positive multiple of 16 bytes (1 float64 elements per row, lat then lon)"},
      {{HeaderMessage(v1::STREAMING_NORMALIZE, {10, 50}), DataMessage(400 * 8),
        DataMessage(400 * 3)},
       grpc::INVALID_ARGUMENT, "data message 2 carries 3 rows past row 8; header.shape (10, 50) declares 10 rows"},
      {{HeaderMessage(v1::STREAMING_NORMALIZE, {10, 50}), DataMessage(400 * 4)},
       grpc::INVALID_ARGUMENT, "stream ended after 4 of the 10 rows"},
      {{HeaderMessage(v1::STREAMING_NORMALIZE, {10, 50}), HeaderMessage(v1::STREAMING_NORMALIZE, {10, 50})},
       grpc::INVALID_ARGUMENT, "message 2 is not a data chunk"},
      // Zero rows have a zero sum: the kernel's error names the chunk.
      {{HeaderMessage(v1::STREAMING_NORMALIZE, {10, 50}), DataMessage(400 * 10, 0.0)},
       grpc::INVALID_ARGUMENT, "chunk 0 (rows 0 to 9): "},
  };
  for (const Case& c : cases) {
    const grpc::Status status = Exchange(server, c.messages);
    EXPECT_EQ(status.error_code(), c.code) << c.message << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
  }
  EXPECT_EQ(server.AwaitHostBudgetUsed(baseline), baseline);
}

}  // namespace
}  // namespace gpucompute
