// The C++ client's Compute.Session (client/session.h) against an in-process server
// (CPU backend; GPUCOMPUTE_TEST_BACKEND=cuda, ctest's client_session_test_cuda: CUDA):
// each operation's result as the unary call's, byte for byte; many requests from
// several threads in flight at once, each answered once with its own result; a bad
// request failing alone with the unary call's status; a session closed with requests
// in flight answering them all; a server gone answering what is pending with
// UNAVAILABLE.
#include "client/session.h"

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using client::Result;
using client::Session;
using ::testing::HasSubstr;

// One request on `session`, waited for.
template <typename Request>
absl::StatusOr<Result> RunOn(Session& session, const Request& request) {
  absl::Notification done;
  absl::StatusOr<Result> out;
  session.StartSingleMessage(request, [&](absl::StatusOr<Result> result) {
    out = std::move(result);
    done.Notify();
  });
  done.WaitForNotification();
  return out;
}

v1::OutputOptions OneMessage() {
  v1::OutputOptions output;
  output.set_accept_complete_result(true);
  output.set_single_message(true);
  return output;
}

// A row of `n` float32 values k + 1 .. k + n: each request's result tells which it was.
v1::NormalizeRequest NormalizeOf(int k, int n = 64) {
  std::vector<double> row(n);
  for (int i = 0; i < n; ++i) row[i] = k + i + 1;
  v1::NormalizeRequest request;
  *request.mutable_input() = test::Operand(test::F32(row, {1, n}));
  *request.mutable_output() = OneMessage();
  return request;
}

class SessionTest : public test::ServerOnTestBackendTest {
 protected:
  // Both forms of `request`, compared byte for byte.
  template <typename Request, typename UnaryCall>
  void ExpectSameAsUnary(Session& session, const Request& request, UnaryCall unary) {
    absl::StatusOr<Result> on_session = RunOn(session, request);
    absl::StatusOr<Result> alone = unary(request);
    ASSERT_TRUE(on_session.ok()) << on_session.status().message();
    ASSERT_TRUE(alone.ok()) << alone.status().message();
    EXPECT_EQ(on_session->header.SerializeAsString(), alone->header.SerializeAsString());
    EXPECT_EQ(std::string(on_session->data.view()), std::string(alone->data.view()));
    EXPECT_GT(on_session->data.size(), 0u);
  }
};

TEST_F(SessionTest, EveryOperationAsTheUnaryCall) {
  client::Client& client = server_->client();
  Session session(server_->channel());
  ExpectSameAsUnary(session, NormalizeOf(3), [&](const auto& r) { return client.Normalize(r); });

  v1::DiscountProductRequest discount;
  *discount.mutable_factors() = test::Operand(test::F64({0.9, 0.8, 0.7}, {1, 3}));
  *discount.mutable_values() = test::Operand(test::F64({1, 2, 3, 4, 5, 6}, {2, 1, 3}));
  *discount.mutable_output() = OneMessage();
  ExpectSameAsUnary(session, discount, [&](const auto& r) { return client.DiscountProduct(r); });

  v1::HaversineGridRequest haversine;
  v1::LatLonMesh& mesh = *haversine.mutable_mesh();
  mesh.set_lat_start(-10);
  mesh.set_lat_stop(10);
  mesh.set_n_lat(5);
  mesh.set_lon_start(0);
  mesh.set_lon_stop(40);
  mesh.set_n_lon(7);
  mesh.set_dtype(v1::FLOAT64);
  v1::GeoPoint& ref = *haversine.add_references();
  ref.set_lat(48.8566);
  ref.set_lon(2.3522);
  *haversine.mutable_output() = OneMessage();
  ExpectSameAsUnary(session, haversine, [&](const auto& r) { return client.HaversineGrid(r); });

  v1::LombScargleRequest lombscargle;
  std::vector<double> x(50), y(50);
  for (int i = 0; i < 50; ++i) {
    x[i] = 0.37 * i + 0.01 * i * i;
    y[i] = std::sin(0.9 * x[i]);
  }
  *lombscargle.mutable_x() = test::Operand(test::F64(x, {50}));
  *lombscargle.mutable_y() = test::Operand(test::F64(y, {50}));
  lombscargle.mutable_freq_grid()->set_start(0.1);
  lombscargle.mutable_freq_grid()->set_stop(3.0);
  lombscargle.mutable_freq_grid()->set_count(40);
  *lombscargle.mutable_output() = OneMessage();
  ExpectSameAsUnary(session, lombscargle, [&](const auto& r) { return client.LombScargle(r); });
}

TEST_F(SessionTest, ManyInFlightFromSeveralThreadsEachAnsweredOnce) {
  constexpr int kThreads = 4, kPerThread = 30;  // under the 128 a connection may have in flight
  Session session(server_->channel());
  absl::Mutex mu;
  int answered = 0;
  std::vector<std::string> failures;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          const int k = t * kPerThread + i;
          session.StartSingleMessage(NormalizeOf(k), [&, k](absl::StatusOr<Result> result) {
            absl::MutexLock lock(&mu);
            ++answered;
            if (!result.ok()) {
              failures.push_back(std::string(result.status().message()));
              return;
            }
            // Row k + 1 .. k + 64 over its sum: the first element tells the row.
            const std::vector<double> got = test::Values(*result);
            const double sum = 64.0 * (k + 1) + 64.0 * 63.0 / 2.0;
            if (got.size() != 64 || std::abs(got[0] - (k + 1) / sum) > 1e-6 * got[0]) {
              failures.push_back(absl::StrCat("request ", k, " got another's result"));
            }
          });
        }
      });
    }
  }
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(+[](int* n) { return *n == kThreads * kPerThread; }, &answered));
  EXPECT_THAT(failures, ::testing::IsEmpty());
}

TEST_F(SessionTest, ABadRequestFailsAloneWithTheUnaryStatus) {
  Session session(server_->channel());
  v1::NormalizeRequest bad = NormalizeOf(1);
  bad.set_norm(static_cast<v1::Norm>(99));
  const absl::Status alone = server_->client().Normalize(bad).status();
  ASSERT_FALSE(alone.ok());

  absl::StatusOr<Result> before = RunOn(session, NormalizeOf(1));
  absl::StatusOr<Result> failed = RunOn(session, bad);
  absl::StatusOr<Result> after = RunOn(session, NormalizeOf(2));
  EXPECT_TRUE(before.ok()) << before.status().message();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), alone.code());
  EXPECT_EQ(failed.status().message(), alone.message());
  EXPECT_TRUE(after.ok()) << after.status().message();
}

TEST_F(SessionTest, ClosingWithRequestsInFlightAnswersThemAll) {
  absl::Mutex mu;
  int ok = 0, answered = 0;
  {
    Session session(server_->channel());
    for (int k = 0; k < 50; ++k) {
      session.StartSingleMessage(NormalizeOf(k), [&](absl::StatusOr<Result> result) {
        absl::MutexLock lock(&mu);
        ++answered;
        ok += result.ok();
      });
    }
  }  // half-closes, then waits for every answer and the call's end
  absl::MutexLock lock(&mu);
  EXPECT_EQ(answered, 50);
  EXPECT_EQ(ok, 50);
}

TEST_F(SessionTest, AServerGoneAnswersWithUnavailable) {
  Session session(server_->channel());
  ASSERT_TRUE(RunOn(session, NormalizeOf(1)).ok());
  server_.reset();
  absl::StatusOr<Result> after = RunOn(session, NormalizeOf(2));
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << after.status().message();
}

}  // namespace
}  // namespace gpucompute
