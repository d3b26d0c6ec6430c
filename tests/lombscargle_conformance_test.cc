// The Lomb-Scargle part of the backend conformance suite (backend_conformance_test.cc
// says how the suite runs): every option combination, sizes, long baselines and
// argument checks against the float64 reference, CPU always, CUDA where it starts.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/preconditions.h"
#include "tests/testing/arrays.h"
#include "tests/testing/conformance.h"
#include "tests/testing/tensors.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using test::Batching;
using test::Freqs;
using test::kAllFreqs;
using test::LombScargleCase;
using test::LombScargleConformance;
using test::Weights;
using test::Subjects;
using test::SubjectNames;

TYPED_TEST_SUITE(LombScargleConformance, Subjects, SubjectNames);

TYPED_TEST(LombScargleConformance, EveryOptionCombination) {
  this->ForEachSeed([&] {
    for (Batching batching : {Batching::kNone, Batching::kSharedX, Batching::kBatchedX}) {
      for (Weights weights : {Weights::kNone, Weights::kShared, Weights::kPerRow}) {
        if (weights == Weights::kPerRow && batching == Batching::kNone) continue;
        for (Freqs freqs : kAllFreqs) {
          for (LombScargleMethod method : {LombScargleMethod::kDirect, LombScargleMethod::kNufft}) {
            if (method == LombScargleMethod::kNufft && freqs == Freqs::kRandomArray) continue;
            // Output power, normalize or amplitude (options / 4), each with and
            // without precenter and floating_mean.
            for (int options = 0; options < 12; ++options) {
              const LombScargleOptions o = {.precenter = (options & 1) != 0,
                                            .normalize = options / 4 == 1,
                                            .floating_mean = (options & 2) != 0,
                                            .method = method,
                                            .amplitude = options / 4 == 2};
              this->Check({61, 150, batching, weights, freqs, o});
            }
          }
        }
      }
    }
  });
}

TYPED_TEST(LombScargleConformance, Sizes) {
  this->ForEachSeed([&] {
    for (int64_t n : {3, 7, 1000}) {
      for (int64_t m : {1, 7, 1000}) {
        for (Freqs freqs : kAllFreqs) this->Check({n, m, Batching::kNone, Weights::kNone, freqs, {}});
      }
    }
    // Many blocks, each restarting the recurrence from exact sin and cos.
    this->Check({1000, 20000, Batching::kNone, Weights::kNone, Freqs::kGrid, {.normalize = true}});
    this->Check(
        {1000, 20000, Batching::kNone, Weights::kNone, Freqs::kLinspaceArray, {.normalize = true}});
  });
}

// A noisy sine over a long baseline, at the GPU kernel's block and tile edges.
TYPED_TEST(LombScargleConformance, SinusoidsOverALongBaseline) {
  const LombScargleOptions plain{}, fm{false, false, true}, norm_fm{false, true, true},
      pre_norm{true, true, false}, pre{true, false, false};
  const auto none = Batching::kNone, shared = Batching::kSharedX, batched = Batching::kBatchedX;
  const auto grid = Freqs::kGrid, array = Freqs::kRandomArray;
  const std::vector<LombScargleCase> cases = {
      {3, 1, none, Weights::kNone, array, plain},
      {5, 7, none, Weights::kNone, grid, fm},
      {1000, 4097, none, Weights::kNone, grid, fm},
      {1023, 4097, none, Weights::kShared, array, norm_fm},
      {257, 1000, shared, Weights::kShared, grid, pre_norm, 3},
      {257, 1000, batched, Weights::kPerRow, array, fm, 3},
      {100, 513, batched, Weights::kPerRow, grid, plain, 2},
      {64, 100000, shared, Weights::kNone, grid, norm_fm, 4},
      {700, 3001, none, Weights::kShared, grid, pre},
      {5, 1, none, Weights::kNone, grid, fm},
      {5, 1000, none, Weights::kNone, grid, fm},  // ill-conditioned in float32
      {33, 2, batched, Weights::kNone, grid, norm_fm, 2},
  };
  this->ForEachSeed([&] {
    for (LombScargleCase c : cases) {
      c.sinusoid = true;
      this->Check(c);
    }
  });
}

// float64 phases f x past the CUDA kernel's sin/cos table bound (1e12) take libdevice's
// exact reduction, thread by thread: with f up to 10 and x up to 2e11 both kinds of
// thread share warps. Explicit frequencies only: at such phases a 1-ulp difference in
// how a grid point is computed moves the phase by 1e-4 rad. (float32 x cannot carry
// such times.)
TYPED_TEST(LombScargleConformance, PhasesPastTheTableBound) {
  if constexpr (sizeof(typename TypeParam::Element) == 8) {
    const LombScargleOptions direct{.method = LombScargleMethod::kDirect};
    const LombScargleOptions normalized_fm{
        .normalize = true, .floating_mean = true, .method = LombScargleMethod::kDirect};
    const auto freqs = Freqs::kRandomArray;
    this->ForEachSeed([&] {
      this->Check({300, 3000, Batching::kNone, Weights::kNone, freqs, direct, 3, false, 2e11});
      this->Check({300, 3000, Batching::kSharedX, Weights::kShared, freqs, normalized_fm, 3, false,
                   2e11});
      // Phases to 2e15: past 2^51 table steps, where the table's own reduction would fail.
      this->Check({300, 3000, Batching::kNone, Weights::kNone, freqs, direct, 3, false, 2e14});
    });
  }
}

TYPED_TEST(LombScargleConformance, SingleSampleRuns) {
  std::vector<double> one = {1.0}, two = {2.0};
  auto x = this->Upload({1}, one);
  auto y = this->Upload({1}, two);
  auto out = this->Poisoned({5});
  absl::Status status =
      this->backend_->LombScargle(*x, *y, nullptr, nullptr, {1, 2, 5}, {}, *out, this->ctx_);
  EXPECT_TRUE(status.ok()) << status.message();
}

TYPED_TEST(LombScargleConformance, RejectsBadWeights) {
  std::vector<double> x = {0, 1, 2, 3, 0, 1, 2, 3};
  std::vector<double> y = x;
  std::vector<double> negative = {1, 1, 1, 1, 1, -0.5, 1, 1};
  std::vector<double> zero = {1, 1, 1, 1, 0, 0, 0, 0};
  auto x_array = this->Upload({2, 4}, x);
  auto y_array = this->Upload({2, 4}, y);
  auto out = this->Poisoned({2, 3});
  const Linspace grid = {1, 2, 3};
  auto run = [&](std::vector<double>& w) {
    return this->backend_->LombScargle(*x_array, *y_array, this->Upload({2, 4}, w).get(), nullptr,
                                       grid, {}, *out, this->ctx_);
  };
  absl::Status status = run(negative);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("weights row 1 has weight -0.5 at index 1"));
  status = run(zero);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("weights row 1 sums to 0"));

  // Shared x, batched y and weights: the message is the CPU's, word for word.
  for (int variant = 0; variant < 2; ++variant) {
    std::vector<double> w = this->Uniform(2 * 50, 0.1, 1.0);
    if (variant == 0) {
      w[50 + 17] = -0.25;  // row 1 has a negative weight
    } else {
      std::fill(w.begin() + 50, w.end(), 0.0);  // row 1 sums to 0
    }
    std::vector<double> xs = this->Uniform(50, 0, 10), ys = this->Uniform(100, -1, 1);
    auto on = [&](Backend& b) {
      using T = typename TypeParam::Element;
      OpContext ctx;
      auto as_t = [](const std::vector<double>& v) { return std::vector<T>(v.begin(), v.end()); };
      return b.LombScargle(*test::Put(b, {50}, as_t(xs)), *test::Put(b, {2, 50}, as_t(ys)),
                           test::Put(b, {2, 50}, as_t(w)).get(), nullptr, {0.1, 1.0, 5}, {},
                           *test::Poisoned(b, this->kDType, {2, 5}), ctx);
    };
    const absl::Status here = on(*this->backend_);
    EXPECT_EQ(here.code(), absl::StatusCode::kInvalidArgument) << here;
    EXPECT_EQ(here.message(), on(this->Cpu()).message());
  }
}

TYPED_TEST(LombScargleConformance, RejectsBadShapes) {
  std::vector<double> four = {0, 1, 2, 3}, five = {0, 1, 2, 3, 4};
  auto x = this->Upload({4}, four);
  auto y = this->Upload({5}, five);
  auto out = this->Poisoned({3});
  Backend& b = *this->backend_;
  absl::Status status = b.LombScargle(*x, *y, nullptr, nullptr, {1, 2, 3}, {}, *out, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("x.shape (4,) and y.shape (5,)"));

  auto freqs = this->Upload({2, 2}, four);
  status = b.LombScargle(*x, *x, nullptr, freqs.get(), {}, {}, *out, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("freqs.shape"));

  status = b.LombScargle(*x, *x, nullptr, nullptr, {1, 2, 4}, {}, *out, this->ctx_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.message();
  EXPECT_THAT(std::string(status.message()), HasSubstr("out.shape"));
}

}  // namespace
}  // namespace gpucompute
