// Backend::RunFromHost, small work from host bytes, against the step-by-step
// default of the base class on the same backend (on CUDA one stream and one wait,
// the result back in host memory, against an allocation, a copy and a wait each;
// work too large for that comes back on the device): the same bytes,
// the same errors, inputs in pieces, results rewritten after the launch (float64
// L2 rows whose squares overflow), work too large for one submission or filling
// it, calls from several threads at once, and a stream that serves the next call
// after a failure. Both run the same kernels, so
// results must match bit for bit. Memory budgets: the result is charged while it
// lives, the inputs only during the call.
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/memory/memory_budget.h"
#include "tests/testing/arrays.h"
#include "tests/testing/conformance.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using test::BackendConformance;
using test::Subjects;
using test::SubjectNames;

template <typename P>
class RunFromHostTest : public BackendConformance<P> {
 protected:
  using T = typename P::Element;
  static constexpr size_t kSmallBytes = 256 << 10;  // fits one submission, in and out

  // Normalize (L2) of `values`, (rows, cols), given as `pieces` pieces: by
  // RunFromHost, or by the base class's step-by-step default.
  absl::StatusOr<std::vector<T>> Normalize(const std::vector<T>& values, int64_t rows, int64_t cols,
                                           bool step_by_step, int pieces = 1) {
    Backend& b = *this->backend_;
    std::vector<HostPiece> parts;
    const size_t bytes = values.size() * sizeof(T);
    const size_t part = (bytes / pieces + sizeof(T) - 1) / sizeof(T) * sizeof(T);
    for (size_t at = 0; at < bytes; at += part) {
      parts.push_back({reinterpret_cast<const char*>(values.data()) + at, std::min(part, bytes - at)});
    }
    const HostInput input{this->kDType, {rows, cols}, parts};
    const auto run = [&b](std::span<const std::shared_ptr<Array>> in, Array& out, OpContext& ctx) {
      return b.Normalize(*in[0], NormKind::kL2, out, ctx);
    };
    OpContext ctx;
    const int device = test::HomeDevice(b);
    absl::StatusOr<std::shared_ptr<Array>> out =
        step_by_step ? b.Backend::RunFromHost({&input, 1}, this->kDType, {rows, cols}, device, ctx, run)
                     : b.RunFromHost({&input, 1}, this->kDType, {rows, cols}, device, ctx, run);
    if (!out.ok()) return out.status();
    // Small work comes back in host memory (on CUDA: the one-submission path ran).
    if (!step_by_step && bytes <= kSmallBytes) EXPECT_EQ((*out)->device(), kHostDevice);
    std::vector<T> result(values.size());
    if ((*out)->device() == kHostDevice) {
      std::memcpy(result.data(), (*out)->data(), bytes);
    } else {
      const absl::Status read = b.CopyFromArray(**out, 0, bytes, result.data());
      if (!read.ok()) return read;
    }
    return result;
  }

  std::vector<T> Values(int64_t n, double lo, double hi) {
    const std::vector<double> v = this->Uniform(n, lo, hi);
    return std::vector<T>(v.begin(), v.end());
  }

  void ExpectSame(const std::vector<T>& values, int64_t rows, int64_t cols, int pieces = 1) {
    absl::StatusOr<std::vector<T>> one = Normalize(values, rows, cols, false, pieces);
    absl::StatusOr<std::vector<T>> steps = Normalize(values, rows, cols, true);
    ASSERT_TRUE(one.ok()) << one.status().message();
    ASSERT_TRUE(steps.ok()) << steps.status().message();
    EXPECT_EQ(*one, *steps);
  }
};

TYPED_TEST_SUITE(RunFromHostTest, Subjects, SubjectNames);

TYPED_TEST(RunFromHostTest, MatchesStepByStepForWholeAndPiecedInputs) {
  this->ExpectSame(this->Values(4 * 256, 0.5, 1.5), 4, 256);
  this->ExpectSame(this->Values(64 * 256, -2, 2), 64, 256, /*pieces=*/7);
}

TYPED_TEST(RunFromHostTest, ResultRewrittenAfterTheLaunchComesBackRewritten) {
  if (sizeof(typename TestFixture::T) == 4) GTEST_SKIP() << "the rescue is float64's";
  // Squares overflow float64: the GPU rescues such rows after its first pass.
  std::vector<typename TestFixture::T> values = this->Values(2 * 64, 0.5, 1.5);
  for (int i = 0; i < 64; ++i) values[i] *= 1e200;
  this->ExpectSame(values, 2, 64);
  absl::StatusOr<std::vector<typename TestFixture::T>> got = this->Normalize(values, 2, 64, false);
  ASSERT_TRUE(got.ok()) << got.status().message();
  double norm = 0;
  for (int i = 0; i < 64; ++i) norm += static_cast<double>((*got)[i]) * (*got)[i];
  EXPECT_NEAR(norm, 1.0, 1e-12);
}

TYPED_TEST(RunFromHostTest, BadRowFailsAsStepByStepThenTheNextCallRuns) {
  std::vector<typename TestFixture::T> values = this->Values(3 * 32, 0.5, 1.5);
  for (int i = 32; i < 64; ++i) values[i] = 0;  // row 1's norm is 0
  const absl::Status one = this->Normalize(values, 3, 32, false).status();
  const absl::Status steps = this->Normalize(values, 3, 32, true).status();
  EXPECT_EQ(one.code(), absl::StatusCode::kInvalidArgument) << one.message();
  EXPECT_EQ(one, steps);
  EXPECT_THAT(std::string(one.message()), HasSubstr("row 1"));
  this->ExpectSame(this->Values(3 * 32, 0.5, 1.5), 3, 32);
}

TYPED_TEST(RunFromHostTest, WorkFillingAStreamsBytesTakesItsScratchElsewhere) {
  // Input and result 512 KiB each: a CUDA stream's 1 MiB of io bytes hold them with
  // no byte left for the operation's scratch, which comes from the pool instead.
  using T = typename TestFixture::T;
  constexpr int64_t kCols = 32;
  constexpr int64_t kRows = (512 << 10) / (kCols * static_cast<int64_t>(sizeof(T)));
  this->ExpectSame(this->Values(kRows * kCols, 0.5, 1.5), kRows, kCols);
}

TYPED_TEST(RunFromHostTest, ConcurrentCallsEachGetTheirOwnResult) {
  // Streams, their bytes and their scratch are lent to one call at a time: calls
  // from several threads, each with inputs of its own, must not see each other's.
  using T = typename TestFixture::T;
  constexpr int kThreads = 8;
  constexpr int kCallsEach = 25;
  std::vector<std::vector<T>> inputs, expected;
  for (int t = 0; t < kThreads; ++t) {
    inputs.push_back(this->Values((t + 1) * 4 * 256, -2, 2));
    absl::StatusOr<std::vector<T>> steps = this->Normalize(inputs[t], (t + 1) * 4, 256, true);
    ASSERT_TRUE(steps.ok()) << steps.status().message();
    expected.push_back(*std::move(steps));
  }
  std::vector<int> mismatches(kThreads, 0);
  std::vector<absl::Status> failures(kThreads);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kCallsEach; ++i) {
          absl::StatusOr<std::vector<T>> one = this->Normalize(inputs[t], (t + 1) * 4, 256, false);
          if (!one.ok()) {
            failures[t] = one.status();
            return;
          }
          if (*one != expected[t]) ++mismatches[t];
        }
      });
    }
  }
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(failures[t].ok()) << "thread " << t << ": " << failures[t].message();
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  }
}

TYPED_TEST(RunFromHostTest, WorkLargerThanOneSubmissionRunsStepByStep) {
  // 2 x 4 MiB in float64 (2 x 2 MiB in float32): more than a stream's pinned io bytes.
  this->ExpectSame(this->Values(512 * 1024, 0.5, 1.5), 512, 1024, /*pieces=*/3);
}

TYPED_TEST(RunFromHostTest, FailureOfTheRunComesBackAndTheNextCallRuns) {
  Backend& b = *this->backend_;
  const std::vector<typename TestFixture::T> values = this->Values(8, 0.5, 1.5);
  const HostPiece piece{values.data(), values.size() * sizeof(values[0])};
  const HostInput input{this->kDType, {2, 4}, {&piece, 1}};
  OpContext ctx;
  const absl::StatusOr<std::shared_ptr<Array>> out = b.RunFromHost(
      {&input, 1}, this->kDType, {2, 4}, test::HomeDevice(b), ctx,
      [](std::span<const std::shared_ptr<Array>>, Array&, OpContext&) {
        return absl::CancelledError("stopped before it ran");
      });
  EXPECT_EQ(out.status(), absl::CancelledError("stopped before it ran"));
  this->ExpectSame(values, 2, 4);
}

TYPED_TEST(RunFromHostTest, TheNextResultTakesAFreedResultsHostMemory) {
  // One submission's result comes back in a host block the backend keeps once the result
  // goes: fresh memory past the server's mmap threshold faults as it is first written
  // (bench/gpu_small_op_bench, the 256 KiB row).
  if (this->backend_->name() != "cuda") GTEST_SKIP() << "the CUDA backend's result blocks";
  using T = typename TestFixture::T;
  Backend& b = *this->backend_;
  // Results of sizes whose range of kept blocks (a quarter spare) no other test's
  // results reach (320 KiB in float32, 192 KiB in float64): the first result's block
  // is the only one the second may take (of blocks the same size kept before, it may
  // take any).
  constexpr int64_t kCols = 64;
  constexpr int64_t kRows = sizeof(T) == 4 ? 1280 : 384;
  const std::vector<T> values = this->Values(kRows * kCols, 0.5, 1.5);
  const HostPiece piece{values.data(), values.size() * sizeof(T)};
  const HostInput input{this->kDType, {kRows, kCols}, {&piece, 1}};
  const auto run_once = [&]() {
    OpContext ctx;
    return b.RunFromHost({&input, 1}, this->kDType, {kRows, kCols}, test::HomeDevice(b), ctx,
                         [&b](std::span<const std::shared_ptr<Array>> in, Array& out, OpContext& run_ctx) {
                           return b.Normalize(*in[0], NormKind::kL2, out, run_ctx);
                         });
  };
  absl::StatusOr<std::shared_ptr<Array>> first = run_once();
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_EQ((*first)->device(), kHostDevice);
  const void* const memory = (*first)->data();
  first->reset();
  const absl::StatusOr<std::shared_ptr<Array>> second = run_once();
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ((*second)->data(), memory);
}

TYPED_TEST(RunFromHostTest, BudgetsChargeTheHostResultWhileItLives) {
  if (this->backend_->name() != "cpu") GTEST_SKIP() << "one budgeted backend is enough";
  BackendOptions options;
  options.host_memory_budget_bytes = 64 << 20;
  std::unique_ptr<Backend> budgeted = WithMemoryBudgets(CreateCpuBackend(1), options);
  const std::shared_ptr<MemoryBudget> host = HostMemoryBudget(*budgeted);
  const uint64_t before = host->used_bytes();
  const std::vector<typename TestFixture::T> values = this->Values(16, 0.5, 1.5);
  const HostPiece piece{values.data(), values.size() * sizeof(values[0])};
  const HostInput input{this->kDType, {2, 8}, {&piece, 1}};
  OpContext ctx;
  absl::StatusOr<std::shared_ptr<Array>> out = budgeted->RunFromHost(
      {&input, 1}, this->kDType, {2, 8}, kHostDevice, ctx,
      [&](std::span<const std::shared_ptr<Array>> in, Array& result, OpContext& run_ctx) {
        return budgeted->Normalize(*in[0], NormKind::kL2, result, run_ctx);
      });
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(host->used_bytes() - before, piece.bytes);
  out->reset();
  EXPECT_EQ(host->used_bytes(), before);
}

}  // namespace
}  // namespace gpucompute
