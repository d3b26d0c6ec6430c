#include "server/executor.h"

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpucompute {
namespace {

void Ignore(absl::Status) {}

// Occupies the one thread that takes general requests until `release` is notified.
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

TEST(ExecutorTest, EveryThreadRunsTheStartHookBeforeItsFirstTask) {
  absl::Mutex mu;
  std::set<std::thread::id> prepared;
  bool unprepared_task = false;
  {
    Executor executor(3, 1000, 1, 1000, absl::ZeroDuration(), [&] {
      absl::MutexLock lock(&mu);
      prepared.insert(std::this_thread::get_id());
    });
    for (int i = 0; i < 200; ++i) {
      executor.SubmitContinuation([&] {
        absl::MutexLock lock(&mu);
        unprepared_task |= !prepared.contains(std::this_thread::get_id());
      });
    }
  }
  EXPECT_EQ(prepared.size(), 3u);
  EXPECT_FALSE(unprepared_task);
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

TEST(ExecutorTest, BusyThreadsCountsEachLaneWhileItsTaskRuns) {
  Executor executor(2, 10, /*small_lane_threads=*/1);
  EXPECT_EQ(executor.busy_threads(Executor::Lane::kGeneral), 0);
  absl::Notification release;
  absl::Notification started;
  HoldTheOnlyThread(executor, started, release);
  EXPECT_EQ(executor.busy_threads(Executor::Lane::kGeneral), 1);
  EXPECT_EQ(executor.busy_threads(Executor::Lane::kSmall), 0);
  absl::Notification small_release;
  absl::Notification small_started;
  ASSERT_TRUE(executor
                  .SubmitRequest(
                      [&](absl::Status) {
                        small_started.Notify();
                        small_release.WaitForNotification();
                      },
                      "client", Executor::Lane::kSmall)
                  .ok());
  small_started.WaitForNotification();
  EXPECT_EQ(executor.busy_threads(Executor::Lane::kSmall), 1);
  release.Notify();
  small_release.Notify();
  while (executor.busy_threads(Executor::Lane::kGeneral) +
             executor.busy_threads(Executor::Lane::kSmall) >
         0) {
  }
}

// What each request's task was told, in the order the tasks ran.
class Outcomes {
 public:
  Executor::RequestTask Record(std::string name) {
    return [this, name](absl::Status status) {
      absl::MutexLock lock(&mu_);
      outcomes_.push_back(absl::StrCat(name, ": ", status.ok() ? "ran" : status.message()));
    };
  }
  std::vector<std::string> Await(size_t count) {
    absl::MutexLock lock(&mu_);
    const auto done = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return outcomes_.size() >= count; };
    mu_.Await(absl::Condition(&done));
    return outcomes_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> outcomes_ ABSL_GUARDED_BY(mu_);
};
TEST(ExecutorTest, ClientsTakeTurns) {
  Executor executor(1, 100);
  absl::Notification release;
  absl::Notification started;
  HoldTheOnlyThread(executor, started, release);
  Outcomes outcomes;
  for (const char* name : {"a1", "a2", "a3"}) {
    ASSERT_TRUE(executor.SubmitRequest(outcomes.Record(name), "flooding client").ok());
  }
  ASSERT_TRUE(executor.SubmitRequest(outcomes.Record("b1"), "other client").ok());
  release.Notify();
  EXPECT_THAT(outcomes.Await(4), ::testing::ElementsAre("a1: ran", "b1: ran", "a2: ran", "a3: ran"));
}

TEST(ExecutorTest, FullQueueDropsTheNewestRequestOfTheClientWithTheMostWaiting) {
  Executor executor(1, 3);
  absl::Notification release;
  absl::Notification started;
  HoldTheOnlyThread(executor, started, release);
  Outcomes outcomes;
  for (const char* name : {"a1", "a2", "a3"}) {
    ASSERT_TRUE(executor.SubmitRequest(outcomes.Record(name), "flooding client").ok());
  }
  // A client with none waiting gets in: a3 makes room.
  ASSERT_TRUE(executor.SubmitRequest(outcomes.Record("b1"), "other client").ok());
  // Now b has 1 and a has 2: b's second would tie with a, so it is refused.
  const absl::Status refused = executor.SubmitRequest(outcomes.Record("b2"), "other client");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("1 from this connection"));
  release.Notify();
  EXPECT_THAT(outcomes.Await(4),
              ::testing::ElementsAre(
                  "a3: request queue is full (max_queue_depth 3): this request was dropped for "
                  "one from a connection with fewer waiting",
                  "a1: ran", "b1: ran", "a2: ran"));
}

TEST(ExecutorTest, SpinningSmallLaneRunsEveryTask) {
  std::atomic<int> ran{0};
  {
    Executor executor(3, 1000, 1, 1000, absl::Milliseconds(2));
    std::vector<std::thread> submitters;
    for (int t = 0; t < 2; ++t) {
      submitters.emplace_back([&] {
        for (int i = 0; i < 300; ++i) {
          ASSERT_TRUE(executor
                          .SubmitRequest([&](absl::Status) { ran++; }, "c",
                                         Executor::Lane::kSmall)
                          .ok());
          ASSERT_TRUE(executor.SubmitRequest([&](absl::Status) { ran++; }, "c").ok());
          executor.SubmitContinuation([&] { ran++; });
          if (i % 50 == 0) absl::SleepFor(absl::Milliseconds(3));  // past the spin: threads sleep
        }
      });
    }
    for (std::thread& submitter : submitters) submitter.join();
  }  // the destructor drains the queues
  EXPECT_EQ(ran.load(), 1800);
}

TEST(ExecutorTest, SmallWorkTheSpinningThreadCannotTakeWakesAGeneralThread) {
  // The small-lane thread spins (for up to a second) and takes the first
  // request, which holds it; the second must not wait for it.
  Executor executor(2, 100, 1, 100, absl::Seconds(1));
  absl::Notification first_started, second_started, release;
  ASSERT_TRUE(executor
                  .SubmitRequest(
                      [&](absl::Status) {
                        first_started.Notify();
                        release.WaitForNotification();
                      },
                      "a", Executor::Lane::kSmall)
                  .ok());
  ASSERT_TRUE(first_started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(executor
                  .SubmitRequest([&](absl::Status) { second_started.Notify(); }, "b",
                                 Executor::Lane::kSmall)
                  .ok());
  EXPECT_TRUE(second_started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  release.Notify();
}

TEST(ExecutorTest, InPlaceOnlyWhenNothingWaitsAndAsManyAsTheSmallLaneHasThreads) {
  Executor executor(3, 100, 2, 100);
  ASSERT_TRUE(executor.BeginInPlace());
  ASSERT_TRUE(executor.BeginInPlace());
  EXPECT_FALSE(executor.BeginInPlace()) << "a third beyond the small lane's two threads";
  executor.EndInPlace();
  EXPECT_TRUE(executor.BeginInPlace());
  executor.EndInPlace();
  executor.EndInPlace();
}

TEST(ExecutorTest, NoRequestRunsInPlaceWhileAnotherWaits) {
  // The general thread is held, so the next general request waits (the small
  // lane's thread does not take it).
  Executor executor(2, 100, 1, 100);
  absl::Notification started, release;
  HoldTheOnlyThread(executor, started, release);
  absl::Notification queued_ran;
  ASSERT_TRUE(executor.SubmitRequest([&](absl::Status) { queued_ran.Notify(); }, "c").ok());
  EXPECT_FALSE(executor.BeginInPlace()) << "it would jump the queue";
  release.Notify();
  ASSERT_TRUE(queued_ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST(ExecutorTest, NothingRunsInPlaceWithoutASmallLane) {
  Executor executor(2, 100, /*small_lane_threads=*/0);
  EXPECT_FALSE(executor.BeginInPlace());
}

}  // namespace
}  // namespace gpucompute
