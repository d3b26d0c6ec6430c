// Client and OperandResolver against an in-process fake of the gpucompute
// services that replays scripted streams: chunking, error codes, framing
// checks, cancellation, deadlines and message size limits, without the server.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/npy.h"
#include "client/operand_resolver.h"
#include "gmock/gmock.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace gpucompute::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Check runs on a gRPC server thread; the test thread changes `status` and
// `delay` between calls, so they are guarded (the happens-before through gRPC's
// call is not something a test should rely on, and TSan cannot see it).
class FakeHealth final : public grpc::health::v1::Health::Service {
 public:
  grpc::Status Check(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest*,
                     grpc::health::v1::HealthCheckResponse* response) override {
    grpc::health::v1::HealthCheckResponse::ServingStatus serving_status;
    absl::Duration wait;
    {
      absl::MutexLock lock(&mutex);
      serving_status = status;
      wait = delay;
    }
    absl::SleepFor(wait);
    response->set_status(serving_status);
    return grpc::Status::OK;
  }

  absl::Mutex mutex;
  grpc::health::v1::HealthCheckResponse::ServingStatus status ABSL_GUARDED_BY(mutex) =
      grpc::health::v1::HealthCheckResponse::SERVING;
  absl::Duration delay ABSL_GUARDED_BY(mutex) = absl::ZeroDuration();
};

class FakeServer final : public v1::Server::Service {
 public:
  grpc::Status GetInfo(grpc::ServerContext*, const v1::GetInfoRequest*,
                       v1::ServerInfo* info) override {
    info->set_version("9.9.9");
    info->set_backend("cpu");
    info->mutable_limits()->set_max_rank(8);
    return grpc::Status::OK;
  }
};

class FakeBuffers final : public v1::Buffers::Service {
 public:
  grpc::Status Upload(grpc::ServerContext*, grpc::ServerReader<v1::UploadRequest>* reader,
                      v1::BufferInfo* info) override {
    v1::UploadRequest message;
    if (!reader->Read(&message) || !message.has_header()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "first message must be a header");
    }
    if (message.header().name() == "too-big") {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "buffer quota of 1 KiB exceeded");
    }
    absl::MutexLock lock(&mutex);
    upload_header = message.header();
    upload_chunk_sizes.clear();
    upload_data.clear();
    while (reader->Read(&message)) {
      upload_chunk_sizes.push_back(message.data().size());
      upload_data += message.data();
    }
    info->set_id(absl::StrCat("id", ++uploads));
    info->set_name(upload_header.name());
    info->set_bytes(upload_data.size());
    return grpc::Status::OK;
  }

  grpc::Status Download(grpc::ServerContext*, const v1::DownloadRequest* request,
                        grpc::ServerWriter<v1::ResultChunk>* writer) override {
    if (request->buffer_id() == "missing") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "buffer 'missing' not found");
    }
    absl::MutexLock lock(&mutex);
    download_chunk_bytes = request->chunk_bytes();
    for (const v1::ResultChunk& chunk : script) writer->Write(chunk);
    return grpc::Status::OK;
  }

  grpc::Status Delete(grpc::ServerContext*, const v1::DeleteRequest* request,
                      v1::DeleteResponse* response) override {
    absl::MutexLock lock(&mutex);
    deleted.push_back(request->buffer_id());
    response->set_freed_bytes(4096);
    return grpc::Status::OK;
  }

  grpc::Status List(grpc::ServerContext*, const v1::ListRequest*,
                    v1::ListResponse* response) override {
    response->add_buffers()->set_id("id1");
    response->set_used_bytes(24);
    response->set_quota_bytes(1 << 20);
    return grpc::Status::OK;
  }

  absl::Mutex mutex;
  std::vector<v1::ResultChunk> script ABSL_GUARDED_BY(mutex);
  uint32_t download_chunk_bytes ABSL_GUARDED_BY(mutex) = 0;
  v1::UploadHeader upload_header ABSL_GUARDED_BY(mutex);
  std::vector<size_t> upload_chunk_sizes ABSL_GUARDED_BY(mutex);
  std::string upload_data ABSL_GUARDED_BY(mutex);
  std::vector<std::string> deleted ABSL_GUARDED_BY(mutex);
  int uploads ABSL_GUARDED_BY(mutex) = 0;
};

// Normalize replays `script`; with `stream_until_cancelled` it then keeps
// sending well-formed chunks until the client cancels.
class FakeCompute final : public v1::Compute::Service {
 public:
  grpc::Status Normalize(grpc::ServerContext* context, const v1::NormalizeRequest* request,
                         grpc::ServerWriter<v1::ResultChunk>* writer) override {
    absl::MutexLock lock(&mutex);
    last_normalize = *request;
    for (const v1::ResultChunk& chunk : script) writer->Write(chunk);
    if (stream_until_cancelled) {
      v1::ResultChunk filler;
      filler.mutable_data()->set_data(std::string(1024, 'f'));
      const absl::Time give_up = absl::Now() + absl::Seconds(20);
      while (!context->IsCancelled() && absl::Now() < give_up) {
        writer->Write(filler);
        absl::SleepFor(absl::Milliseconds(1));
      }
      if (context->IsCancelled()) saw_cancellation.Notify();
    }
    return final_status;
  }

  absl::Mutex mutex;
  std::vector<v1::ResultChunk> script ABSL_GUARDED_BY(mutex);
  grpc::Status final_status ABSL_GUARDED_BY(mutex);
  bool stream_until_cancelled ABSL_GUARDED_BY(mutex) = false;
  v1::NormalizeRequest last_normalize ABSL_GUARDED_BY(mutex);
  absl::Notification saw_cancellation;
};

v1::ResultChunk HeaderChunk(v1::DType dtype, std::vector<int64_t> shape) {
  v1::ResultChunk chunk;
  v1::ResultHeader& header = *chunk.mutable_header();
  header.set_dtype(dtype);
  header.mutable_shape()->Add(shape.begin(), shape.end());
  header.set_total_bytes(*ByteCount(dtype, shape));
  return chunk;
}

v1::ResultChunk DataChunk(uint64_t offset, std::string bytes) {
  v1::ResultChunk chunk;
  chunk.mutable_data()->set_offset(offset);
  chunk.mutable_data()->set_data(std::move(bytes));
  return chunk;
}

v1::ResultChunk TrailerChunk() {
  v1::ResultChunk chunk;
  chunk.mutable_trailer()->set_backend("cpu");
  chunk.mutable_trailer()->mutable_timing()->set_total_us(7);
  return chunk;
}

// The stream of `data` (float32, shape {n}) in chunks of `chunk_bytes`.
std::vector<v1::ResultChunk> StreamOf(const std::string& data, size_t chunk_bytes) {
  std::vector<v1::ResultChunk> chunks = {
      HeaderChunk(v1::FLOAT32, {static_cast<int64_t>(data.size() / 4)})};
  for (size_t offset = 0; offset < data.size(); offset += chunk_bytes) {
    chunks.push_back(DataChunk(offset, data.substr(offset, chunk_bytes)));
  }
  chunks.push_back(TrailerChunk());
  return chunks;
}

std::string Pattern(size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i * 7 + i / 251);
  return bytes;
}

class ClientFakeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.SetMaxReceiveMessageSize(64 << 20);
    builder.RegisterService(&health_);
    builder.RegisterService(&info_);
    builder.RegisterService(&buffers_);
    builder.RegisterService(&compute_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    target_ = absl::StrCat("127.0.0.1:", port);
    client_ = std::make_unique<Client>(MakeChannel(target_),
                                       ClientOptions{.upload_chunk_bytes = 1 << 20});
  }

  void TearDown() override {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }

  FakeHealth health_;
  FakeServer info_;
  FakeBuffers buffers_;
  FakeCompute compute_;
  std::unique_ptr<grpc::Server> server_;
  std::string target_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientFakeServerTest, HealthInfoListDelete) {
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> health = client_->Health();
  ASSERT_TRUE(health.ok()) << health.status().message();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
  {
    absl::MutexLock lock(&health_.mutex);
    health_.status = grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  }
  EXPECT_EQ(*client_->Health(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);

  absl::StatusOr<v1::ServerInfo> info = client_->GetInfo();
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->version(), "9.9.9");
  EXPECT_EQ(info->limits().max_rank(), 8u);

  absl::StatusOr<v1::ListResponse> list = client_->List();
  ASSERT_TRUE(list.ok()) << list.status().message();
  EXPECT_EQ(list->buffers(0).id(), "id1");
  EXPECT_EQ(list->used_bytes(), 24u);

  absl::StatusOr<uint64_t> freed = client_->Delete("abc");
  ASSERT_TRUE(freed.ok()) << freed.status().message();
  EXPECT_EQ(*freed, 4096u);
  absl::MutexLock lock(&buffers_.mutex);
  EXPECT_THAT(buffers_.deleted, ElementsAre("abc"));
}

TEST_F(ClientFakeServerTest, UploadStreamsHeaderThenChunksOfTheConfiguredSize) {
  const std::string data = Pattern((5 << 19) + 8);  // 2.5 MiB + 8 bytes of float64
  const std::vector<int64_t> shape = {static_cast<int64_t>(data.size() / 8)};
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  absl::StatusOr<v1::BufferInfo> info =
      client_->Upload("weights", v1::FLOAT64, shape, data,
                      [&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); });
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->bytes(), data.size());

  absl::MutexLock lock(&buffers_.mutex);
  EXPECT_EQ(buffers_.upload_header.name(), "weights");
  EXPECT_EQ(buffers_.upload_header.dtype(), v1::FLOAT64);
  EXPECT_THAT(buffers_.upload_header.shape(), ElementsAre(shape[0]));
  EXPECT_THAT(buffers_.upload_chunk_sizes, ElementsAre(1 << 20, 1 << 20, (1 << 19) + 8));
  EXPECT_EQ(buffers_.upload_data, data);
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.front().first, 0u);
  EXPECT_EQ(progress.back().first, data.size());
  EXPECT_EQ(progress.back().second, data.size());
}

TEST_F(ClientFakeServerTest, UploadOfTensorAndOfEmptyArray) {
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  absl::StatusOr<v1::Tensor> tensor = MakeTensor(values, std::vector<int64_t>{2, 3});
  ASSERT_TRUE(tensor.ok()) << tensor.status().message();
  ASSERT_TRUE(client_->Upload("t", *tensor).ok());
  {
    absl::MutexLock lock(&buffers_.mutex);
    EXPECT_THAT(buffers_.upload_header.shape(), ElementsAre(2, 3));
    EXPECT_EQ(buffers_.upload_data, tensor->data());
  }
  ASSERT_TRUE(client_->Upload("empty", v1::FLOAT32, std::vector<int64_t>{0, 4}, "").ok());
  absl::MutexLock lock(&buffers_.mutex);
  EXPECT_TRUE(buffers_.upload_chunk_sizes.empty());
}

TEST_F(ClientFakeServerTest, UploadChecksTheDataSizeBeforeCalling) {
  absl::StatusOr<v1::BufferInfo> info =
      client_->Upload("x", v1::FLOAT32, std::vector<int64_t>{3}, std::string(8, '\0'));
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(info.status().message(), HasSubstr("needs 12 bytes, got 8"));
  absl::MutexLock lock(&buffers_.mutex);
  EXPECT_EQ(buffers_.uploads, 0);
}

TEST_F(ClientFakeServerTest, UploadRejectedMidStreamReturnsTheServerStatus) {
  absl::StatusOr<v1::BufferInfo> info = client_->Upload(
      "too-big", v1::FLOAT32, std::vector<int64_t>{1 << 20}, std::string(4 << 20, '\0'));
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(info.status().message(), "buffer quota of 1 KiB exceeded");
}

TEST_F(ClientFakeServerTest, DownloadReassemblesAndPassesChunkBytes) {
  const std::string data = Pattern(10000);
  {
    absl::MutexLock lock(&buffers_.mutex);
    buffers_.script = StreamOf(data, 4096);
  }
  absl::StatusOr<Result> result = client_->Download("id1", 4096);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->data, data);
  EXPECT_THAT(result->header.shape(), ElementsAre(2500));
  EXPECT_EQ(result->trailer.timing().total_us(), 7u);
  absl::MutexLock lock(&buffers_.mutex);
  EXPECT_EQ(buffers_.download_chunk_bytes, 4096u);
}

TEST_F(ClientFakeServerTest, ChunksLargerThanGrpcsDefaultLimitArrive) {
  const std::string data = Pattern(12 << 20);
  {
    absl::MutexLock lock(&buffers_.mutex);
    buffers_.script = StreamOf(data, 6 << 20);
  }
  absl::StatusOr<Result> result = client_->Download("id1");
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->data, data);
}

TEST_F(ClientFakeServerTest, ServerErrorsKeepCodeAndMessage) {
  absl::StatusOr<Result> result = client_->Download("missing");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(result.status().message(), "buffer 'missing' not found");

  {
    absl::MutexLock lock(&compute_.mutex);
    compute_.script = {HeaderChunk(v1::FLOAT32, {4})};
    compute_.final_status =
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "input: row 3 has norm 0");
  }
  result = client_->Normalize(v1::NormalizeRequest());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(result.status().message(), "input: row 3 has norm 0");
}

TEST_F(ClientFakeServerTest, BrokenFramingIsDataLossAndCancelsTheCall) {
  {
    absl::MutexLock lock(&compute_.mutex);
    compute_.script = {HeaderChunk(v1::FLOAT32, {1 << 20}), DataChunk(0, std::string(1024, 'a')),
                       DataChunk(4096, std::string(1024, 'b'))};
    compute_.stream_until_cancelled = true;
  }
  absl::StatusOr<Result> result = client_->Normalize(v1::NormalizeRequest());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status().message();
  EXPECT_THAT(result.status().message(), HasSubstr("chunk at offset 4096, expected offset 1024"));
  EXPECT_TRUE(compute_.saw_cancellation.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the server kept streaming after the client gave up";
}

TEST_F(ClientFakeServerTest, StreamEndingEarlyIsDataLoss) {
  {
    absl::MutexLock lock(&compute_.mutex);
    compute_.script = {HeaderChunk(v1::FLOAT32, {4}), DataChunk(0, std::string(8, 'a'))};
  }
  absl::StatusOr<Result> result = client_->Normalize(v1::NormalizeRequest());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(result.status().message(), HasSubstr("without a trailer after 8 of 16 bytes"));
}

TEST_F(ClientFakeServerTest, KeepOnDeviceExpectsNoData) {
  v1::ResultChunk trailer = TrailerChunk();
  trailer.mutable_trailer()->mutable_stored_buffer()->set_id("kept");
  {
    absl::MutexLock lock(&compute_.mutex);
    compute_.script = {HeaderChunk(v1::FLOAT64, {3, 3}), trailer};
  }
  v1::NormalizeRequest request;
  request.mutable_output()->set_keep_on_device(true);
  absl::StatusOr<Result> result = client_->Normalize(request);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_TRUE(result->data.empty());
  EXPECT_EQ(result->trailer.stored_buffer().id(), "kept");
  absl::MutexLock lock(&compute_.mutex);
  EXPECT_TRUE(compute_.last_normalize.output().keep_on_device());
}

TEST_F(ClientFakeServerTest, TimeoutBecomesDeadlineExceeded) {
  {
    absl::MutexLock lock(&health_.mutex);
    health_.delay = absl::Milliseconds(500);
  }
  Client impatient(MakeChannel(target_), ClientOptions{.timeout = absl::Milliseconds(50)});
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> health = impatient.Health();
  ASSERT_FALSE(health.ok());
  EXPECT_EQ(health.status().code(), absl::StatusCode::kDeadlineExceeded);
}

// The callback form frees its call before telling the caller: the call's context holds
// a reference to the channel, and a caller that drops its own on hearing of the end
// must close the channel on its thread, never on the gRPC thread running the callback
// (in gRPC 1.51 that deletes the callback queue under the thread polling it).
TEST_F(ClientFakeServerTest, SingleMessageCallbackRunsOnceTheCallIsFreed) {
  const std::weak_ptr<grpc::Channel> channel = client_->channel();
  const long held_before = channel.use_count();
  long held_in_callback = 0;
  absl::Notification done;
  client_->StartSingleMessage(v1::NormalizeRequest(), [&](absl::StatusOr<Result> result) {
    EXPECT_FALSE(result.ok());  // the fake has no single-message Normalize
    held_in_callback = channel.use_count();
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(held_in_callback, held_before);
}

TEST_F(ClientFakeServerTest, UnreachableServerIsUnavailable) {
  server_->Shutdown();
  Client client(MakeChannel(target_), ClientOptions{.timeout = absl::Seconds(5)});
  absl::StatusOr<v1::ServerInfo> info = client.GetInfo();
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable) << info.status().message();
}

class OperandResolverTest : public ClientFakeServerTest {
 protected:
  void SetUp() override {
    ClientFakeServerTest::SetUp();
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("resolver_test_", getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    ClientFakeServerTest::TearDown();
  }

  std::string WriteArray(const std::string& name, int64_t elements) {
    const std::string path = (dir_ / name).string();
    const std::string data = Pattern(elements * 4);
    EXPECT_TRUE(WriteNpyFile(path, v1::FLOAT32, std::vector<int64_t>{elements}, data).ok());
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(OperandResolverTest, SmallFilesGoInlineAndBufferIdsPassThrough) {
  const std::string path = WriteArray("small.npy", 16);
  OperandResolver resolver(*client_, /*inline_limit_bytes=*/64, /*show_progress=*/false);
  absl::StatusOr<v1::Operand> operand = resolver.Resolve(path, "input");
  ASSERT_TRUE(operand.ok()) << operand.status().message();
  ASSERT_TRUE(operand->has_tensor());
  EXPECT_THAT(operand->tensor().shape(), ElementsAre(16));
  EXPECT_EQ(operand->tensor().data(), Pattern(64));

  absl::StatusOr<v1::Operand> stored = resolver.Resolve("buffer:abc123", "input");
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  EXPECT_EQ(stored->buffer_id(), "abc123");
  ASSERT_TRUE(resolver.Release().ok());
  absl::MutexLock lock(&buffers_.mutex);
  EXPECT_EQ(buffers_.uploads, 0);
  EXPECT_TRUE(buffers_.deleted.empty()) << "deleted a buffer it did not upload";
}

TEST_F(OperandResolverTest, LargeFilesAreUploadedAndDeletedAfterwards) {
  const std::string path = WriteArray("large.npy", 17);
  {
    OperandResolver resolver(*client_, /*inline_limit_bytes=*/64, /*show_progress=*/false);
    absl::StatusOr<v1::Operand> operand = resolver.Resolve(path, "input");
    ASSERT_TRUE(operand.ok()) << operand.status().message();
    EXPECT_EQ(operand->buffer_id(), "id1");
    absl::MutexLock lock(&buffers_.mutex);
    EXPECT_EQ(buffers_.upload_header.name(), "large.npy");
    EXPECT_EQ(buffers_.upload_data, Pattern(68));
    EXPECT_TRUE(buffers_.deleted.empty());
  }
  absl::MutexLock lock(&buffers_.mutex);
  EXPECT_THAT(buffers_.deleted, ElementsAre("id1"));
}

TEST_F(OperandResolverTest, ErrorsNameTheFlagOrFile) {
  OperandResolver resolver(*client_, 64, false);
  absl::StatusOr<v1::Operand> missing = resolver.Resolve((dir_ / "nope.npy").string(), "values");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.npy"));

  absl::StatusOr<v1::Operand> empty_id = resolver.Resolve("buffer:", "values");
  ASSERT_FALSE(empty_id.ok());
  EXPECT_THAT(empty_id.status().message(), HasSubstr("--values=buffer: needs a buffer id"));
}

}  // namespace
}  // namespace gpucompute::client
