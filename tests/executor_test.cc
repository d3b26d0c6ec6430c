#include "server/executor.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpucompute {
namespace {

void Ignore(absl::Status) {}

// Occupies the single worker thread until `release` is notified.
void HoldTheOnlyThread(Executor& executor, absl::Notification& started,
                       absl::Notification& release) {
  ASSERT_TRUE(executor
                  .SubmitRequest(
                      [&](absl::Status) {
                        started.Notify();
                        release.WaitForNotification();
                      },
                      "holder")
                  .ok());
  started.WaitForNotification();
}

TEST(ExecutorTest, RunsEverySubmittedTask) {
  std::atomic<int> ran{0};
  {
    Executor executor(3, 1000);
    for (int i = 0; i < 500; ++i) {
      ASSERT_TRUE(executor.SubmitRequest([&](absl::Status) { ran++; }, "client").ok());
      executor.SubmitContinuation([&] { ran++; });
    }
  }  // the destructor drains the queue
  EXPECT_EQ(ran.load(), 1000);
}

TEST(ExecutorTest, FullQueueRefusesRequestsButAcceptsContinuations) {
  Executor executor(1, 2);
  absl::Notification release;
  absl::Notification started;
  HoldTheOnlyThread(executor, started, release);
  ASSERT_TRUE(executor.SubmitRequest(Ignore, "client").ok());
  ASSERT_TRUE(executor.SubmitRequest(Ignore, "client").ok());
  EXPECT_EQ(executor.queued_requests(), 2u);
  const absl::Status refused = executor.SubmitRequest(Ignore, "client");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()),
              ::testing::HasSubstr("2 requests waiting (max_queue_depth 2), 2 from this connection"));
  std::atomic<bool> continued{false};
  executor.SubmitContinuation([&] { continued = true; });
  release.Notify();
  while (!continued.load()) {
  }
  EXPECT_TRUE(continued.load());
}

TEST(ExecutorTest, ClientsTakeTurns) {
  Executor executor(1, 100);
  absl::Notification release;
  absl::Notification started;
  HoldTheOnlyThread(executor, started, release);
  absl::Mutex mu;
  std::vector<std::string> order;
  const auto record = [&](std::string name) {
    return [&, name](absl::Status status) {
      EXPECT_TRUE(status.ok()) << status.message();
      absl::MutexLock lock(&mu);
      order.push_back(name);
    };
  };
  for (const char* name : {"a1", "a2", "a3"}) {
    ASSERT_TRUE(executor.SubmitRequest(record(name), "flooding client").ok());
  }
  ASSERT_TRUE(executor.SubmitRequest(record("b1"), "other client").ok());
  release.Notify();
  while (true) {
    absl::SleepFor(absl::Milliseconds(1));
    absl::MutexLock lock(&mu);
    if (order.size() == 4) break;
  }
  absl::MutexLock lock(&mu);
  EXPECT_THAT(order, ::testing::ElementsAre("a1", "b1", "a2", "a3"));
}

TEST(ExecutorTest, FullQueueDropsTheNewestRequestOfTheClientWithTheMostWaiting) {
  Executor executor(1, 3);
  absl::Notification release;
  absl::Notification started;
  HoldTheOnlyThread(executor, started, release);
  absl::Mutex mu;
  std::vector<std::string> outcomes;
  const auto record = [&](std::string name) {
    return [&, name](absl::Status status) {
      absl::MutexLock lock(&mu);
      outcomes.push_back(absl::StrCat(name, ": ", status.ok() ? "ran" : status.message()));
    };
  };
  for (const char* name : {"a1", "a2", "a3"}) {
    ASSERT_TRUE(executor.SubmitRequest(record(name), "flooding client").ok());
  }
  // A client with none waiting gets in: a3 makes room.
  ASSERT_TRUE(executor.SubmitRequest(record("b1"), "other client").ok());
  // Now b has 1 and a has 2: b's second would tie with a, so it is refused.
  const absl::Status refused = executor.SubmitRequest(record("b2"), "other client");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("1 from this connection"));
  release.Notify();
  while (true) {
    absl::SleepFor(absl::Milliseconds(1));
    absl::MutexLock lock(&mu);
    if (outcomes.size() == 4) break;
  }
  absl::MutexLock lock(&mu);
  EXPECT_THAT(outcomes,
              ::testing::ElementsAre(
                  "a3: request queue is full (max_queue_depth 3): this request was dropped for "
                  "one from a connection with fewer waiting",
                  "a1: ran", "b1: ran", "a2: ran"));
}

}  // namespace
}  // namespace gpucompute
