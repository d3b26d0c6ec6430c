// The host budget follows the container: under a fake cgroup tree (v2 and v1) the
// default budget is half of the cgroup's limit, and the server logs where its
// figure came from.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/memory/memory_budget.h"
#include "tests/testing/server_process.h"

namespace gpucompute::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr uint64_t kTwoGiB = uint64_t{2} << 30;

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

class CgroupMemoryLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            absl::StrCat("cgroup-", ::testing::UnitTest::GetInstance()->random_seed(), "-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(CgroupMemoryLimitTest, V2LimitOfTheProcessCgroupOrAnAncestor) {
  Write(root_ / "self", "0::/kubepods/pod1/ctr");
  Write(root_ / "fs/kubepods/memory.max", "max");
  Write(root_ / "fs/kubepods/pod1/memory.max", std::to_string(kTwoGiB));
  Write(root_ / "fs/kubepods/pod1/ctr/memory.max", "max");
  const MemoryLimit limit = ProcessMemoryLimit((root_ / "fs").string(), (root_ / "self").string());
  EXPECT_EQ(limit.bytes, std::min(kTwoGiB, PhysicalMemoryBytes()));
  if (kTwoGiB < PhysicalMemoryBytes()) {
    EXPECT_EQ(limit.source,
              absl::StrCat("cgroup v2 memory.max at ", (root_ / "fs/kubepods/pod1/memory.max").string()));
  }
}

TEST_F(CgroupMemoryLimitTest, V1MemoryControllerLimit) {
  Write(root_ / "self", "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc");
  Write(root_ / "fs/memory/docker/abc/memory.limit_in_bytes", std::to_string(kTwoGiB));
  const MemoryLimit limit = ProcessMemoryLimit((root_ / "fs").string(), (root_ / "self").string());
  EXPECT_EQ(limit.bytes, std::min(kTwoGiB, PhysicalMemoryBytes()));
}

TEST_F(CgroupMemoryLimitTest, NoLimitIsPhysicalMemory) {
  Write(root_ / "self", "0::/");
  Write(root_ / "fs/memory.max", "max");
  Write(root_ / "fs/memory/memory.limit_in_bytes", "9223372036854771712");  // v1 unlimited
  const MemoryLimit limit = ProcessMemoryLimit((root_ / "fs").string(), (root_ / "self").string());
  EXPECT_EQ(limit.bytes, PhysicalMemoryBytes());
  EXPECT_EQ(limit.source, "physical memory");
}

TEST_F(CgroupMemoryLimitTest, ServerUnderATwoGiBLimitHasAHostBudgetWithinItAndSaysWhy) {
  // A container sees its own cgroup as the root: the limit is the root's memory.max.
  Write(root_ / "memory.max", std::to_string(kTwoGiB));
  ServerProcess server(GPUCOMPUTE_SERVER_PATH,
                       LoopbackCpuFlags({absl::StrCat("--cgroup_root=", root_.string())}));
  const std::optional<std::string> line =
      server.WaitForLine("host memory budget", absl::Seconds(60));
  ASSERT_TRUE(line.has_value()) << server.output();
  const uint64_t expected = std::min(kTwoGiB, PhysicalMemoryBytes()) / 2;
  EXPECT_THAT(*line, HasSubstr(absl::StrCat("host memory budget ", expected, " bytes: half of ")));
  if (kTwoGiB < PhysicalMemoryBytes()) {
    EXPECT_THAT(*line, HasSubstr(absl::StrCat("cgroup v2 memory.max at ", root_.string())));
  }
}

}  // namespace
}  // namespace gpucompute::test
