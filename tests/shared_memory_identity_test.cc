// Shared memory bound to the caller's local user: the server (here root, which
// can open any object) registers only objects the connection's own user owns,
// and anonymous local users each have their own regions and limits. The other
// user is this binary again, run as uid 65534 (nobody) through setpriv; the
// tests that need it skip when not run as root.
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_fixture.h"

extern char** environ;

namespace gpucompute {
namespace {

constexpr uid_t kNobody = 65534;
constexpr char kTargetVariable[] = "GPUCOMPUTE_IDENTITY_TARGET";
constexpr char kKeyVariable[] = "GPUCOMPUTE_IDENTITY_KEY";

// A POSIX shared-memory object of 4096 bytes created 0600 by this process's
// user, holding `value` in its first double; unlinked at the end.
class OwnObject {
 public:
  OwnObject(const std::string& key, double value) : key_(key) {
    const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << key << ": " << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd, 4096), 0);
    EXPECT_EQ(pwrite(fd, &value, sizeof(value), 0), static_cast<ssize_t>(sizeof(value)));
    close(fd);
  }
  ~OwnObject() { shm_unlink(key_.c_str()); }

 private:
  std::string key_;
};

// Runs this binary's SharedMemoryIdentityOtherUser test as uid 65534 against
// the server at `target`; its exit status.
int RunAsNobody(const std::string& target, const std::string& key) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return -1;
  self[n] = '\0';
  std::vector<std::string> args = {"setpriv", absl::StrCat("--reuid=", kNobody),
                                   absl::StrCat("--regid=", kNobody), "--clear-groups",
                                   self, "--gtest_filter=SharedMemoryIdentityOtherUser.*"};
  std::vector<std::string> env = {absl::StrCat(kTargetVariable, "=", target),
                                  absl::StrCat(kKeyVariable, "=", key)};
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  for (std::string& e : env) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, "setpriv", nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The other user's side, run only by RunAsNobody: root's object is refused,
// the user's own object registers even though root's anonymous callers hold
// every region their limit allows.
TEST(SharedMemoryIdentityOtherUser, RegistersOnlyItsOwnObjects) {
  const char* target = std::getenv(kTargetVariable);
  const char* key = std::getenv(kKeyVariable);
  if (target == nullptr || key == nullptr) GTEST_SKIP() << "run by SharedMemoryIdentityTest";
  client::Client client(client::MakeChannel(target));
  const absl::Status roots = client.RegisterSystemSharedMemory("root's", key, 0, 4096).status();
  EXPECT_EQ(roots.code(), absl::StatusCode::kPermissionDenied) << roots.message();
  EXPECT_THAT(roots.message(), ::testing::HasSubstr("belongs to another user"));
  const std::string own_key = absl::StrCat("/gpucompute-identity-nobody-", getpid());
  OwnObject own(own_key, 7.0);
  auto mine = client.RegisterSystemSharedMemory("nobody's", own_key, 0, 4096);
  ASSERT_TRUE(mine.ok()) << mine.status().message();
  auto status = client.SharedMemoryStatus();
  ASSERT_TRUE(status.ok()) << status.status().message();
  EXPECT_EQ(status->regions_size(), 1);  // root's regions are not this user's
  EXPECT_TRUE(client.UnregisterSharedMemory(mine->id()).ok());
}

TEST(SharedMemoryIdentityTest, AnotherUsersObjectIsRefusedAndUsersDoNotShareRegions) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
  ServerConfig config = test::LoopbackConfig();
  config.allow_shared_memory = true;
  config.max_shared_memory_regions_per_owner = 2;
  auto server = test::TestServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const std::string key = absl::StrCat("/gpucompute-identity-root-", getpid());
  OwnObject secret(key, 42.0);
  // Root's anonymous caller holds its whole allowance of regions (of another object).
  const std::string held_key = absl::StrCat(key, "-held");
  OwnObject held(held_key, 1.0);
  for (int i = 0; i < 2; ++i) {
    auto region = (*server)->client().RegisterSystemSharedMemory("root's", held_key, 0, 4096);
    ASSERT_TRUE(region.ok()) << region.status().message();
  }
  EXPECT_EQ(RunAsNobody((*server)->target(), key), 0);
}

}  // namespace
}  // namespace gpucompute
