// The CPU backend's thread pool: every index visited once, concurrent and nested
// callers, cancellation between blocks.
#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gpucompute {
namespace {

TEST(ThreadPoolTest, VisitsEveryIndexOnce) {
  ThreadPool pool(3);
  OpContext ctx;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000003}}) {
    std::vector<std::atomic<int>> visits(n);
    absl::Status status = pool.ParallelFor(n, 1000, ctx, [&](int64_t begin, int64_t end) {
      EXPECT_LE(end - begin, 1000);
      for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1);
    });
    ASSERT_TRUE(status.ok()) << status.message();
    int64_t wrong = 0;
    for (const std::atomic<int>& v : visits) wrong += v.load() != 1;
    EXPECT_EQ(wrong, 0) << "n = " << n;
  }
}

TEST(ThreadPoolTest, ConcurrentAndNestedCallersFinish) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int caller = 0; caller < 4; ++caller) {
    callers.emplace_back([&] {
      OpContext ctx;
      absl::Status status = pool.ParallelFor(16, 1, ctx, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          absl::Status inner =
              pool.ParallelFor(100, 7, ctx, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
          EXPECT_TRUE(inner.ok()) << inner.message();
        }
      });
      EXPECT_TRUE(status.ok()) << status.message();
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(total.load(), 4 * 16 * 100);
}

TEST(ThreadPoolTest, CancellationStopsRemainingBlocks) {
  ThreadPool pool(1);
  std::atomic<bool> cancelled{false};
  OpContext ctx;
  ctx.cancelled = &cancelled;
  int64_t blocks_run = 0;
  absl::Status status = pool.ParallelFor(100, 1, ctx, [&](int64_t, int64_t) {
    ++blocks_run;
    cancelled.store(true);
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status.message();
  EXPECT_EQ(blocks_run, 1);
}

}  // namespace
}  // namespace gpucompute
