// What only the CPU backend has: one host device described by its thread count,
// 64-byte aligned allocations counted exactly, and host-side allocation limits.
// Its operations run in tests/backend_conformance_test.cc, the thread pool in
// tests/thread_pool_test.cc.
#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

class CpuBackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend_ = CreateCpuBackend(2);
};

// ---------------------------------------------------------------------------
// Device and memory

TEST_F(CpuBackendTest, DescribesOneHostDevice) {
  EXPECT_EQ(backend_->name(), "cpu");
  EXPECT_TRUE(backend_->Healthy());
  EXPECT_EQ(backend_->PickDevice(), kHostDevice);
  EXPECT_TRUE(backend_->arrays_on_host());
  const std::vector<DeviceDescription> devices = backend_->Devices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].name, "cpu");
  EXPECT_EQ(devices[0].description, "2 threads");
  EXPECT_GT(devices[0].memory_bytes, 0u);
}

TEST_F(CpuBackendTest, ZeroThreadsMeansHardwareConcurrency) {
  std::unique_ptr<Backend> backend = CreateCpuBackend(0);
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(backend->Devices()[0].description, absl::StrCat(hardware, " threads"));
}

TEST_F(CpuBackendTest, AllocationIsAlignedAndCountedUntilReleased) {
  const uint64_t before = backend_->Stats().devices.at(0).pool_used_bytes;
  absl::StatusOr<std::shared_ptr<Array>> array =
      backend_->Allocate(DType::kFloat64, {3, 5}, kHostDevice);
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_EQ((*array)->size(), 15);
  EXPECT_EQ((*array)->bytes(), 120u);
  EXPECT_EQ((*array)->device(), kHostDevice);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*array)->data()) % 64, 0u);
  BackendStats stats = backend_->Stats();
  ASSERT_EQ(stats.devices.size(), 1u);
  EXPECT_EQ(stats.devices[0].device, "cpu");
  EXPECT_EQ(stats.devices[0].pool_used_bytes, before + 120);
  EXPECT_EQ(stats.devices[0].pool_reserved_bytes, before + 120);
  EXPECT_EQ(stats.devices[0].queued_ops, 0u);
  array->reset();
  EXPECT_EQ(backend_->Stats().devices[0].pool_used_bytes, before);
}

TEST_F(CpuBackendTest, AFreedLargeArrayStaysReservedForTheNext) {
  const BackendStats before = backend_->Stats();
  absl::StatusOr<std::shared_ptr<Array>> array =
      backend_->Allocate(DType::kFloat32, {1000, 1000}, kHostDevice);
  ASSERT_TRUE(array.ok()) << array.status().message();
  void* const data = (*array)->data();
  array->reset();
  const DeviceMemoryStats& freed = backend_->Stats().devices.at(0);
  EXPECT_EQ(freed.pool_used_bytes, before.devices.at(0).pool_used_bytes);
  EXPECT_EQ(freed.pool_reserved_bytes, before.devices.at(0).pool_reserved_bytes + 4000000)
      << "the freed array's memory is held for reuse";
  absl::StatusOr<std::shared_ptr<Array>> again =
      backend_->Allocate(DType::kFloat32, {1000, 1000}, kHostDevice);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ((*again)->data(), data) << "the next array of its size took new memory";
}

TEST_F(CpuBackendTest, EmptyAndScalarArraysAllocate) {
  absl::StatusOr<std::shared_ptr<Array>> empty =
      backend_->Allocate(DType::kFloat32, {4, 0}, kHostDevice);
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_EQ((*empty)->size(), 0);
  absl::StatusOr<std::shared_ptr<Array>> scalar =
      backend_->Allocate(DType::kFloat32, {}, kHostDevice);
  ASSERT_TRUE(scalar.ok()) << scalar.status().message();
  EXPECT_EQ((*scalar)->size(), 1);
}

TEST_F(CpuBackendTest, AbsurdAllocationIsResourceExhausted) {
  for (const Shape& shape : {Shape{int64_t{1} << 40, int64_t{1} << 40}, Shape{int64_t{1} << 50},
                             Shape{int64_t{1} << 62, 2}}) {
    absl::StatusOr<std::shared_ptr<Array>> array =
        backend_->Allocate(DType::kFloat64, shape, kHostDevice);
    ASSERT_FALSE(array.ok());
    EXPECT_EQ(array.status().code(), absl::StatusCode::kResourceExhausted)
        << array.status().message();
    EXPECT_THAT(std::string(array.status().message()), HasSubstr("bytes"));
  }
}

TEST_F(CpuBackendTest, MalformedAllocationIsInvalidArgument) {
  absl::StatusOr<std::shared_ptr<Array>> negative =
      backend_->Allocate(DType::kFloat32, {3, -1}, kHostDevice);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("shape[1] is -1"));
  absl::StatusOr<std::shared_ptr<Array>> rank9 =
      backend_->Allocate(DType::kFloat32, Shape(9, 1), kHostDevice);
  EXPECT_EQ(rank9.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::shared_ptr<Array>> device = backend_->Allocate(DType::kFloat32, {3}, 5);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpucompute
