// MemoryBudget and the budgeted backend: charges held until the array is gone,
// bounded waits, and the share of the budget kept for small allocations.
#include "kernels/memory/memory_budget.h"

#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kForever = absl::Hours(1);

TEST(MemoryBudgetTest, ChargeIsHeldUntilDestroyed) {
  auto budget = MemoryBudget::Create("host", "host_memory_budget_bytes", 1600, kForever);
  {
    absl::StatusOr<MemoryBudget::Charge> charge = budget->Reserve(100);
    ASSERT_TRUE(charge.ok()) << charge.status();
    EXPECT_EQ(budget->used_bytes(), 100u);
    MemoryBudget::Charge moved = *std::move(charge);
    EXPECT_EQ(budget->used_bytes(), 100u);
  }
  EXPECT_EQ(budget->used_bytes(), 0u);
}

TEST(MemoryBudgetTest, FixedChargesAreNeverRefused) {
  auto budget = MemoryBudget::Create("host", "host_memory_budget_bytes", 100, absl::ZeroDuration());
  MemoryBudget::Charge pinned = budget->ChargeFixed(150);
  EXPECT_EQ(budget->used_bytes(), 150u);
  EXPECT_FALSE(budget->Reserve(1).ok());
}

TEST(MemoryBudgetTest, RefusalAfterTheWaitNamesFlagAskedAndLeft) {
  const absl::Duration wait = absl::Milliseconds(50);
  auto budget = MemoryBudget::Create("host", "host_memory_budget_bytes", 1600, wait);
  absl::StatusOr<MemoryBudget::Charge> held = budget->Reserve(1000);
  ASSERT_TRUE(held.ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<MemoryBudget::Charge> refused = budget->Reserve(700);
  EXPECT_GE(absl::Now() - start, wait);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(IsMemoryBudgetRefusal(refused.status()));
  const std::string message(refused.status().message());
  EXPECT_THAT(message, HasSubstr("--host_memory_budget_bytes=1600"));
  EXPECT_THAT(message, HasSubstr("700 bytes asked, 200 bytes left"));
  EXPECT_THAT(message, HasSubstr("--memory_budget_wait"));
  EXPECT_EQ(budget->used_bytes(), 1000u);
}

TEST(MemoryBudgetTest, WaiterGetsTheMemoryOnceReleased) {
  auto budget = MemoryBudget::Create("host", "host_memory_budget_bytes", 1600, kForever);
  std::optional<MemoryBudget::Charge> held;
  held.emplace(*budget->Reserve(1000));
  absl::StatusOr<MemoryBudget::Charge> waited;
  std::thread waiter([&] { waited = budget->Reserve(1000); });
  held.reset();
  waiter.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(budget->used_bytes(), 1000u);
}

TEST(MemoryBudgetTest, LargeAllocationsLeaveAQuarterForSmallOnes) {
  // 1600 bytes: allocations over 100 are large and may fill up to 1200.
  auto budget = MemoryBudget::Create("cuda:0", "device_memory_budget_bytes", 1600,
                                     absl::ZeroDuration());
  EXPECT_EQ(budget->CeilingFor(100), 1600u);
  EXPECT_EQ(budget->CeilingFor(101), 1200u);
  absl::StatusOr<MemoryBudget::Charge> big = budget->Reserve(1100);
  ASSERT_TRUE(big.ok());
  absl::StatusOr<MemoryBudget::Charge> second_big = budget->Reserve(200);
  EXPECT_EQ(second_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(second_big.status().message()),
              HasSubstr("200 bytes asked, 100 bytes left"));
  std::vector<MemoryBudget::Charge> small;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<MemoryBudget::Charge> charge = budget->Reserve(100);
    ASSERT_TRUE(charge.ok()) << i << ": " << charge.status();
    small.push_back(*std::move(charge));
  }
  EXPECT_EQ(budget->used_bytes(), 1600u);
}

TEST(MemoryBudgetTest, AllocationThatCanNeverFitIsRefusedWithoutWaiting) {
  auto budget = MemoryBudget::Create("host", "host_memory_budget_bytes", 1600, kForever);
  absl::StatusOr<MemoryBudget::Charge> refused = budget->Reserve(1201);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("1201 bytes asked"));
}

class BudgetedBackendTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kBudget = 1 << 20;

  BudgetedBackendTest() {
    BackendOptions options;
    options.host_memory_budget_bytes = kBudget;
    options.memory_budget_wait = absl::ZeroDuration();
    backend_ = WithMemoryBudgets(CreateCpuBackend(1), options);
  }

  uint64_t Used() const { return backend_->Stats().memory_budgets.at(0).used_bytes; }

  std::unique_ptr<Backend> backend_;
};

TEST_F(BudgetedBackendTest, ForwardsWhereItsArraysLive) { EXPECT_TRUE(backend_->arrays_on_host()); }

TEST_F(BudgetedBackendTest, ArraysAreChargedUntilTheirLastOwnerLetsGo) {
  const MemoryBudgetStats stats = backend_->Stats().memory_budgets.at(0);
  EXPECT_EQ(stats.memory, "host");
  EXPECT_EQ(stats.capacity_bytes, kBudget);
  absl::StatusOr<std::shared_ptr<Array>> array =
      backend_->Allocate(DType::kFloat64, {4, 1000}, kHostDevice);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(Used(), 32000u);
  const double value = 2.5;
  ASSERT_TRUE(backend_->CopyToArray(&value, 8, sizeof(value), **array).ok());
  std::shared_ptr<Array> reader = *array;  // a stream still reading a deleted buffer
  array->reset();
  EXPECT_EQ(Used(), 32000u);
  EXPECT_EQ(reader->data_as<double>()[1], 2.5);
  reader.reset();
  EXPECT_EQ(Used(), 0u);
}

TEST_F(BudgetedBackendTest, OverBudgetIsRefusedAndTheBackendStillChecksItsOwnLimits) {
  absl::StatusOr<std::shared_ptr<Array>> over =
      backend_->Allocate(DType::kFloat64, {kBudget}, kHostDevice);
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(IsMemoryBudgetRefusal(over.status()));
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("host_memory_budget_bytes"));
  // Beyond the machine's memory the backend's own refusal stands.
  absl::StatusOr<std::shared_ptr<Array>> absurd =
      backend_->Allocate(DType::kFloat64, {int64_t{1} << 40, 1 << 20}, kHostDevice);
  ASSERT_EQ(absurd.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(IsMemoryBudgetRefusal(absurd.status()));
  EXPECT_EQ(backend_->Allocate(DType::kFloat32, {2}, 7).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Used(), 0u);
}

}  // namespace
}  // namespace gpucompute
