#include "server/executor.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpucompute {
namespace {

TEST(ExecutorTest, RunsEverySubmittedTask) {
  std::atomic<int> ran{0};
  {
    Executor executor(3, 1000);
    for (int i = 0; i < 500; ++i) {
      ASSERT_TRUE(executor.SubmitRequest([&] { ran++; }).ok());
      executor.SubmitContinuation([&] { ran++; });
    }
  }  // the destructor drains the queue
  EXPECT_EQ(ran.load(), 1000);
}

TEST(ExecutorTest, FullQueueRefusesRequestsButAcceptsContinuations) {
  Executor executor(1, 2);
  absl::Notification release;
  absl::Notification started;
  ASSERT_TRUE(executor.SubmitRequest([&] {
    started.Notify();
    release.WaitForNotification();
  }).ok());
  started.WaitForNotification();
  ASSERT_TRUE(executor.SubmitRequest([] {}).ok());
  ASSERT_TRUE(executor.SubmitRequest([] {}).ok());
  EXPECT_EQ(executor.queued_requests(), 2u);
  const absl::Status refused = executor.SubmitRequest([] {});
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("max_queue_depth 2"));
  std::atomic<bool> continued{false};
  executor.SubmitContinuation([&] { continued = true; });
  release.Notify();
  while (!continued.load()) {
  }
  EXPECT_TRUE(continued.load());
}

}  // namespace
}  // namespace gpucompute
