// Compute.Session: many small requests on one open call. Each
// request's answer carries its id and equals the unary call's one message (or
// its status); requests run at once and are answered as they complete; a bad
// request, a cancelled one or one over an in-flight limit fails alone while the
// session goes on; half-closing ends the call once every request is answered;
// cancelling the call cancels them all.
#include <chrono>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "grpcpp/generic/generic_stub.h"
#include "tests/testing/eventually.h"
#include "tests/testing/faulty_server.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

v1::NormalizeRequest NormalizeOf(std::vector<double> values, int64_t cols) {
  v1::NormalizeRequest request;
  const int64_t rows = static_cast<int64_t>(values.size()) / cols;
  *request.mutable_input() = test::Operand(test::F32(std::move(values), {rows, cols}));
  request.set_norm(v1::NORM_L2);
  return request;
}

v1::NormalizeRequest RandomRows(int64_t rows, int64_t cols) {
  return NormalizeOf(test::Uniform<double>(rows * cols, 0.5, 1.5, test::FreshSeed()), cols);
}

using test::Eventually;

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(test::LoopbackConfig()); }

  // A server whose operations `faults_` can hold (PauseOperations).
  void Start(ServerConfig config) {
    server_.reset();
    auto server = test::StartWithFaults(config, faults_);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = *std::move(server);
  }

  // The unary call's one message (output.single_message), or its status.
  template <typename Request, typename Method>
  v1::ResultChunk Unary(Request request, Method method, grpc::Status& status) {
    request.mutable_output()->set_single_message(true);
    grpc::ClientContext context;
    auto reader = (server_->compute().*method)(&context, request);
    v1::ResultChunk message;
    v1::ResultChunk extra;
    if (reader->Read(&message)) EXPECT_FALSE(reader->Read(&extra));
    status = reader->Finish();
    return message;
  }

  // One open session.
  struct Session {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> stream;

    void Send(uint64_t id, const v1::NormalizeRequest& request) {
      v1::SessionRequest message;
      message.set_id(id);
      *message.mutable_normalize() = request;
      ASSERT_TRUE(stream->Write(message));
    }
    void Cancel(uint64_t id) {
      v1::SessionRequest message;
      message.mutable_cancel()->set_id(id);
      ASSERT_TRUE(stream->Write(message));
    }
    // The next `n` answers by id.
    absl::flat_hash_map<uint64_t, v1::SessionResponse> Answers(int n) {
      absl::flat_hash_map<uint64_t, v1::SessionResponse> answers;
      v1::SessionResponse response;
      for (int i = 0; i < n && stream->Read(&response); ++i) {
        EXPECT_FALSE(answers.contains(response.id())) << "two answers for id " << response.id();
        answers[response.id()] = response;
      }
      EXPECT_EQ(answers.size(), static_cast<size_t>(n));
      return answers;
    }
    // Half-closes; the call must end OK, with no answer left.
    void CloseOk() {
      stream->WritesDone();
      v1::SessionResponse extra;
      EXPECT_FALSE(stream->Read(&extra)) << "an answer nobody asked for: id " << extra.id();
      const grpc::Status status = stream->Finish();
      EXPECT_TRUE(status.ok()) << status.error_message();
    }
  };

  std::unique_ptr<Session> Open() {
    auto session = std::make_unique<Session>();
    session->stream = server_->compute().Session(&session->context);
    return session;
  }

  // With operations paused: a session with requests 1 to `requests` sent, once
  // `held` of them wait on the pause.
  std::unique_ptr<Session> OpenHolding(uint64_t requests, int held) {
    faults_->PauseOperations();
    auto session = Open();
    for (uint64_t id = 1; id <= requests; ++id) session->Send(id, RandomRows(2, 8));
    EXPECT_TRUE(Eventually([&] { return faults_->PausedOperations() >= held; }));
    return session;
  }

  std::shared_ptr<InjectedFaults> faults_ = std::make_shared<InjectedFaults>();
  std::unique_ptr<test::TestServer> server_;
};

// Each of `ids` was answered with a result.
void ExpectResults(absl::flat_hash_map<uint64_t, v1::SessionResponse>& answers,
                   std::initializer_list<uint64_t> ids) {
  for (uint64_t id : ids) {
    EXPECT_TRUE(answers[id].has_complete()) << id << ": " << answers[id].error().message();
  }
}

// The answer's result equals the unary call's message, but for the timing.
void ExpectSameResult(const v1::SessionResponse& answer, const v1::ResultChunk& unary) {
  ASSERT_TRUE(answer.has_complete()) << answer.error().message();
  ASSERT_TRUE(unary.has_complete());
  EXPECT_EQ(answer.complete().header().SerializeAsString(),
            unary.complete().header().SerializeAsString());
  EXPECT_EQ(answer.complete().data(), unary.complete().data());
  EXPECT_EQ(answer.complete().trailer().backend(), unary.complete().trailer().backend());
  EXPECT_EQ(answer.complete().trailer().method(), unary.complete().trailer().method());
}

TEST_F(SessionTest, EachOperationAnswersAsItsUnaryCall) {
  v1::DiscountProductRequest discount;
  *discount.mutable_factors() = test::Operand(test::F64({0.9, 0.8, 0.7}, {3}));
  *discount.mutable_values() =
      test::Operand(test::F64(test::Uniform<double>(12, 1, 2, test::FreshSeed()), {4, 3}));
  v1::HaversineGridRequest haversine;
  haversine.mutable_mesh()->set_lat_start(29);
  haversine.mutable_mesh()->set_lat_stop(31);
  haversine.mutable_mesh()->set_n_lat(20);
  haversine.mutable_mesh()->set_lon_start(99);
  haversine.mutable_mesh()->set_lon_stop(101);
  haversine.mutable_mesh()->set_n_lon(30);
  haversine.mutable_mesh()->set_dtype(v1::FLOAT32);
  haversine.add_references()->set_lat(30);
  v1::LombScargleRequest lombscargle;
  const std::vector<double> x = test::Uniform<double>(64, 0, 10, test::FreshSeed());
  *lombscargle.mutable_x() = test::Operand(test::F64(x, {64}));
  *lombscargle.mutable_y() =
      test::Operand(test::F64(test::Uniform<double>(64, -1, 1, test::FreshSeed()), {64}));
  lombscargle.mutable_freq_grid()->set_start(0.1);
  lombscargle.mutable_freq_grid()->set_stop(3);
  lombscargle.mutable_freq_grid()->set_count(100);
  const v1::NormalizeRequest normalize = RandomRows(4, 256);

  grpc::Status status[4];
  const v1::ResultChunk unary[4] = {
      Unary(discount, &v1::Compute::Stub::DiscountProduct, status[0]),
      Unary(haversine, &v1::Compute::Stub::HaversineGrid, status[1]),
      Unary(normalize, &v1::Compute::Stub::Normalize, status[2]),
      Unary(lombscargle, &v1::Compute::Stub::LombScargle, status[3])};
  for (const grpc::Status& s : status) ASSERT_TRUE(s.ok()) << s.error_message();

  auto session = Open();
  v1::SessionRequest message;
  message.set_id(10);
  *message.mutable_discount_product() = discount;
  ASSERT_TRUE(session->stream->Write(message));
  message.set_id(11);
  *message.mutable_haversine_grid() = haversine;
  ASSERT_TRUE(session->stream->Write(message));
  message.set_id(12);
  *message.mutable_normalize() = normalize;
  ASSERT_TRUE(session->stream->Write(message));
  message.set_id(13);
  *message.mutable_lombscargle() = lombscargle;
  ASSERT_TRUE(session->stream->Write(message));
  auto answers = session->Answers(4);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    ExpectSameResult(answers[10 + i], unary[i]);
  }
  session->CloseOk();
}

TEST_F(SessionTest, ManyRequestsInFlightAreAnsweredById) {
  constexpr int kRequests = 100;
  std::vector<v1::NormalizeRequest> requests;
  for (int i = 0; i < kRequests; ++i) requests.push_back(RandomRows(1 + i % 3, 64 + i % 5));
  auto session = Open();
  for (int i = 0; i < kRequests; ++i) session->Send(1000 + i, requests[i]);  // none read yet
  auto answers = session->Answers(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE(i);
    grpc::Status status;
    const v1::ResultChunk unary = Unary(requests[i], &v1::Compute::Stub::Normalize, status);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ExpectSameResult(answers[1000 + i], unary);
  }
  // Ids may be used again once answered.
  session->Send(1000, requests[0]);
  EXPECT_TRUE(session->Answers(1)[1000].has_complete());
  session->CloseOk();
}

TEST_F(SessionTest, ABadRequestFailsAloneWithTheUnaryStatus) {
  const v1::NormalizeRequest bad = NormalizeOf({1.0, 2.0, 0.0, 0.0}, 2);  // row 1's norm is 0
  grpc::Status unary_status;
  Unary(bad, &v1::Compute::Stub::Normalize, unary_status);
  ASSERT_EQ(unary_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  auto session = Open();
  session->Send(1, RandomRows(2, 8));
  session->Send(2, bad);
  session->Send(3, RandomRows(2, 8));
  v1::SessionRequest empty;
  empty.set_id(4);
  ASSERT_TRUE(session->stream->Write(empty));
  session->Send(5, RandomRows(2, 8));
  auto answers = session->Answers(5);
  ExpectResults(answers, {1, 3, 5});
  ASSERT_TRUE(answers[2].has_error());
  EXPECT_EQ(answers[2].error().code(), unary_status.error_code());
  EXPECT_EQ(answers[2].error().message(), unary_status.error_message());
  ASSERT_TRUE(answers[4].has_error());
  EXPECT_EQ(answers[4].error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(answers[4].error().message(), HasSubstr("sets no operation and no cancel"));
  session->CloseOk();
}

TEST_F(SessionTest, DuplicateIdInFlightIsRefusedAlone) {
  faults_->PauseOperations();
  auto session = Open();
  session->Send(7, RandomRows(2, 8));
  ASSERT_TRUE(Eventually([&] { return faults_->PausedOperations() == 1; }));
  session->Send(7, RandomRows(2, 8));
  v1::SessionResponse refused;
  ASSERT_TRUE(session->stream->Read(&refused));
  EXPECT_EQ(refused.id(), 7u);
  EXPECT_EQ(refused.error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error().message(), HasSubstr("id 7 is already in flight"));
  faults_->ResumeOperations();
  EXPECT_TRUE(session->Answers(1)[7].has_complete());
  session->CloseOk();
}

TEST_F(SessionTest, ALargeResultIsRefusedNamingTheLimit) {
  auto session = Open();
  v1::NormalizeRequest large = RandomRows(8, 1024);  // 32 KiB in 4 KiB chunks
  large.mutable_output()->set_chunk_bytes(4096);
  session->Send(1, large);
  large.mutable_output()->set_single_message(true);
  session->Send(2, large);
  large.mutable_output()->set_keep_on_device(true);  // kept: one message whatever its size
  session->Send(3, large);
  auto answers = session->Answers(3);
  EXPECT_EQ(answers[1].error().code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(answers[1].error().message(),
              StartsWith("Session: the result is 32768 bytes, more than one chunk of 4096 "
                         "(output.chunk_bytes"));
  EXPECT_EQ(answers[2].error().code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(answers[2].error().message(), StartsWith("output.single_message: the result is"));
  ASSERT_TRUE(answers[3].has_complete()) << answers[3].error().message();
  EXPECT_FALSE(answers[3].complete().trailer().stored_buffer().id().empty());
  session->CloseOk();
}

TEST_F(SessionTest, CancellingOneRequestLeavesTheOthers) {
  ServerConfig config = test::LoopbackConfig();
  config.batching = false;
  config.executor_threads = 4;
  Start(config);
  auto session = OpenHolding(3, 3);
  session->Cancel(2);
  session->Cancel(99);  // not in flight: ignored
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the cancel reaches the server
  faults_->ResumeOperations();
  auto answers = session->Answers(3);
  ExpectResults(answers, {1, 3});
  EXPECT_EQ(answers[2].error().code(), grpc::StatusCode::CANCELLED) << answers[2].error().message();
  session->CloseOk();
}

TEST_F(SessionTest, HalfCloseEndsTheCallOnceEveryRequestIsAnswered) {
  auto session = OpenHolding(3, 1);
  session->stream->WritesDone();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  faults_->ResumeOperations();
  auto answers = session->Answers(3);
  ExpectResults(answers, {1, 2, 3});
  v1::SessionResponse extra;
  EXPECT_FALSE(session->stream->Read(&extra));
  const grpc::Status closed = session->stream->Finish();
  EXPECT_TRUE(closed.ok()) << closed.error_message();
}

TEST_F(SessionTest, ARequestOverTheInFlightLimitFailsAlone) {
  ServerConfig config = test::LoopbackConfig();
  config.max_in_flight_per_connection = 2;
  config.batching = false;
  config.executor_threads = 4;
  Start(config);
  auto session = OpenHolding(2, 2);
  session->Send(3, RandomRows(2, 8));
  v1::SessionResponse refused;
  ASSERT_TRUE(session->stream->Read(&refused));
  EXPECT_EQ(refused.id(), 3u);
  EXPECT_EQ(refused.error().code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.error().message();
  EXPECT_THAT(refused.error().message(), HasSubstr("max_in_flight_per_connection 2"));
  faults_->ResumeOperations();
  auto answers = session->Answers(2);
  ExpectResults(answers, {1, 2});
  session->Send(4, RandomRows(2, 8));  // the session goes on
  EXPECT_TRUE(session->Answers(1)[4].has_complete());
  session->CloseOk();
}

TEST_F(SessionTest, CancellingTheCallCancelsEveryRequest) {
  {
    auto session = OpenHolding(3, 1);
    session->context.TryCancel();
    const grpc::Status status = session->stream->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();
    faults_->ResumeOperations();
  }
  // Nothing is left holding a place: a full set of new requests is admitted.
  auto session = Open();
  for (uint64_t id = 1; id <= 3; ++id) session->Send(id, RandomRows(2, 8));
  auto answers = session->Answers(3);
  ExpectResults(answers, {1, 2, 3});
  session->CloseOk();
}

TEST_F(SessionTest, DrainingEndsOpenSessionsOnceTheirRequestsAreAnswered) {
  auto idle = Open();
  idle->Send(1, RandomRows(2, 8));
  EXPECT_TRUE(idle->Answers(1)[1].has_complete());
  auto busy = OpenHolding(1, 1);
  server_->server().StopServing();
  v1::SessionResponse extra;
  EXPECT_FALSE(idle->stream->Read(&extra));  // at once, not after a grace period
  grpc::Status status = idle->stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("draining"));
  faults_->ResumeOperations();
  EXPECT_TRUE(busy->Answers(1)[1].has_complete());  // its request first
  EXPECT_FALSE(busy->stream->Read(&extra));
  status = busy->stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  auto late = Open();  // opened while the server drains
  EXPECT_FALSE(late->stream->Read(&extra));
  status = late->stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(SessionTest, AMessageThatIsNoSessionRequestEndsTheCall) {
  grpc::GenericStub generic(server_->channel());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  // Field 2 claims 5 bytes and has 2: not a SessionRequest.
  const std::string junk("\x12\x05" "ab", 4);
  grpc::Slice slice(junk);
  grpc::ByteBuffer request(&slice, 1);
  auto call = generic.PrepareCall(&context, "/gpucompute.v1.Compute/Session", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  call->Write(request, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("session message 1"));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace gpucompute
