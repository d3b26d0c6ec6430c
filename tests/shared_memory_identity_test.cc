// Shared memory bound to the caller's local user: the server (here root, which
// can open any object) registers only objects the connection's own user owns,
// and anonymous local users each have their own regions and limits. The other
// user, and a TCP relay run as that user, are this binary again, run as uid
// 65534 (nobody) through setpriv; the tests that need it skip when not run as root.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "common/error_reason.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/server_process.h"

namespace gpucompute {
namespace {

constexpr uid_t kNobody = 65534;
constexpr char kTargetVariable[] = "GPUCOMPUTE_IDENTITY_TARGET";
constexpr char kKeyVariable[] = "GPUCOMPUTE_IDENTITY_KEY";
constexpr char kRelayPortVariable[] = "GPUCOMPUTE_IDENTITY_RELAY_TO_PORT";
constexpr char kRelayListening[] = "relay listening on port ";

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

std::string SelfPath() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  return n > 0 ? std::string(self, n) : std::string();
}

// This binary as uid 65534 through setpriv, running the tests `filter` selects
// with `variables` ("NAME=VALUE") added to its environment; killed and reaped
// when it goes away, whatever the test's outcome.
std::unique_ptr<test::ServerProcess> StartAsNobody(const std::vector<std::string>& variables,
                                                   const std::string& filter) {
  std::vector<std::string> args = {absl::StrCat("--reuid=", kNobody),
                                   absl::StrCat("--regid=", kNobody), "--clear-groups", "env"};
  args.insert(args.end(), variables.begin(), variables.end());
  args.insert(args.end(), {SelfPath(), absl::StrCat("--gtest_filter=", filter)});
  return std::make_unique<test::ServerProcess>("/usr/bin/setpriv", args);
}

// Runs this binary's SharedMemoryIdentityOtherUser test as uid 65534 against
// the server at `target`; its exit status.
int RunAsNobody(const std::string& target, const std::string& key) {
  return StartAsNobody({absl::StrCat(kTargetVariable, "=", target),
                        absl::StrCat(kKeyVariable, "=", key)},
                       "SharedMemoryIdentityOtherUser.*")
      ->WaitForExit(absl::Seconds(60));
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
  EXPECT_THAT(std::string(roots.message()), ::testing::HasSubstr("belongs to another user"));
  EXPECT_EQ(ReasonOf(roots), reason::kSharedMemoryNotOwned);
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

sockaddr_in Ipv4(const char* host, uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  inet_pton(AF_INET, host, &address.sin_addr);
  return address;
}

// One relayed connection: both sockets close once both directions have ended.
struct RelayedConnection {
  RelayedConnection(int client, int server) : client(client), server(server) {}
  ~RelayedConnection() {
    close(client);
    close(server);
  }
  const int client;
  const int server;
};

// Copies `from` to `to` until `from` ends, then half-closes `to`.
void Pump(std::shared_ptr<RelayedConnection> connection, int from, int to) {
  char buffer[16384];
  for (ssize_t n; (n = read(from, buffer, sizeof(buffer))) > 0;) {
    for (ssize_t sent = 0, written; sent < n; sent += written) {
      written = send(to, buffer + sent, n - sent, MSG_NOSIGNAL);
      if (written <= 0) return;
    }
  }
  shutdown(to, SHUT_WR);
}

// The relay, run only by StartRelayAsNobody: a TCP forwarder on 127.0.0.7 that
// connects to the server from 127.0.0.7 as its own user, as a sidecar proxy or
// `ssh -L` would; it says its port and runs until killed.
TEST(SharedMemoryIdentityRelay, ForwardsUntilKilled) {
  const char* to = std::getenv(kRelayPortVariable);
  int server_port = 0;
  if (to == nullptr || !absl::SimpleAtoi(to, &server_port)) {
    GTEST_SKIP() << "run by SharedMemoryIdentityTest";
  }
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address = Ipv4("127.0.0.7", 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), length), 0)
      << std::strerror(errno);
  ASSERT_EQ(listen(listener, 16), 0) << std::strerror(errno);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  std::printf("%s%d\n", kRelayListening, ntohs(address.sin_port));
  std::fflush(stdout);
  const sockaddr_in server = Ipv4("127.0.0.1", static_cast<uint16_t>(server_port));
  while (true) {
    const int client = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0 && errno == EINTR) continue;
    ASSERT_GE(client, 0) << std::strerror(errno);
    const int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto connection = std::make_shared<RelayedConnection>(client, upstream);
    const sockaddr_in source = Ipv4("127.0.0.7", 0);
    if (bind(upstream, reinterpret_cast<const sockaddr*>(&source), sizeof(source)) != 0 ||
        connect(upstream, reinterpret_cast<const sockaddr*>(&server), sizeof(server)) != 0) {
      continue;  // the client sees its connection closed
    }
    std::thread(Pump, connection, client, upstream).detach();
    std::thread(Pump, connection, upstream, client).detach();
  }
}

// This binary's relay run as uid 65534, forwarding 127.0.0.7:<its port> to
// 127.0.0.1:`server_port`.
std::unique_ptr<test::ServerProcess> StartRelayAsNobody(int server_port) {
  return StartAsNobody({absl::StrCat(kRelayPortVariable, "=", server_port)},
                       "SharedMemoryIdentityRelay.*");
}

TEST(SharedMemoryIdentityTest, RelayActsAsItsOwnUserNotAsItsClients) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a relay as another user";
  ServerConfig config = test::LoopbackConfig();
  config.allow_shared_memory = true;
  auto server = test::TestServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const std::unique_ptr<test::ServerProcess> relay = StartRelayAsNobody((*server)->port());
  const std::optional<std::string> said = relay->WaitForLine(kRelayListening, absl::Seconds(10));
  ASSERT_TRUE(said.has_value()) << "the relay did not start: " << relay->output();
  int relay_port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      said->substr(said->find(kRelayListening) + std::strlen(kRelayListening)), &relay_port))
      << *said;
  const std::string key = absl::StrCat("/gpucompute-identity-relayed-", getpid());
  OwnObject roots(key, 42.0);

  // Root's client through the relay is the relay's user, whatever its address.
  client::Client relayed(client::MakeChannel(absl::StrCat("127.0.0.7:", relay_port)));
  const absl::Status refused = relayed.RegisterSystemSharedMemory("root's", key, 0, 4096).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_THAT(std::string(refused.message()),
              ::testing::HasSubstr(absl::StrCat("belongs to another user than the caller's (uid ",
                                                kNobody, ")")));
  EXPECT_EQ(ReasonOf(refused), reason::kSharedMemoryNotOwned);
  EXPECT_EQ(ReasonMetadata(refused, "field"), "key");

  // The same client directly is root.
  auto direct = (*server)->client().RegisterSystemSharedMemory("root's", key, 0, 4096);
  EXPECT_TRUE(direct.ok()) << direct.status();
  // Nor does root's region lend the relay anything: its key is root's principal's.
  const absl::Status held = relayed.RegisterSystemSharedMemory("root's", key, 0, 4096).status();
  EXPECT_EQ(held.code(), absl::StatusCode::kPermissionDenied) << held;
  EXPECT_EQ(ReasonOf(held), reason::kSharedMemoryNotOwned) << held;
}

// Why this host cannot serve IPv4 clients on [::] (a dual-stack socket), if it cannot.
std::optional<std::string> NoDualStack() {
  const int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::StrCat("no IPv6 sockets: ", std::strerror(errno));
  const int v6_only = 0;
  sockaddr_in6 any{};
  any.sin6_family = AF_INET6;
  std::optional<std::string> why;
  if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6_only, sizeof(v6_only)) != 0 ||
      bind(fd, reinterpret_cast<const sockaddr*>(&any), sizeof(any)) != 0) {
    why = absl::StrCat("cannot bind a dual-stack socket to [::]: ", std::strerror(errno));
  }
  close(fd);
  return why;
}

// gRPC names a v4-mapped peer on a dual-stack listener "ipv4:127.0.0.1:N", while
// the client's socket is an IPv6 one bound to ::ffff:127.0.0.1: the lookup must
// find it under the other family, and find its user.
TEST(SharedMemoryIdentityTest, V4MappedPeerIsTheUserOfItsSocket) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
  if (const std::optional<std::string> why = NoDualStack()) GTEST_SKIP() << *why;
  ServerConfig config = test::LoopbackConfig();
  config.address = "[::]:0";
  config.allow_shared_memory = true;
  auto server = test::TestServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const std::string mapped = absl::StrCat("ipv6:[::ffff:127.0.0.1]:", (*server)->port());
  const std::string key = absl::StrCat("/gpucompute-identity-mapped-", getpid());
  OwnObject secret(key, 42.0);
  const std::string own_key = absl::StrCat(key, "-own");
  OwnObject own(own_key, 1.0);
  client::Client client(client::MakeChannel(mapped));
  auto region = client.RegisterSystemSharedMemory("root's", own_key, 0, 4096);
  ASSERT_TRUE(region.ok()) << region.status();
  auto status = client.SharedMemoryStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->regions_size(), 1);
  // Another user through the same mapped address is refused root's other object
  // and registers its own (SharedMemoryIdentityOtherUser).
  EXPECT_EQ(RunAsNobody(mapped, key), 0);
}

}  // namespace
}  // namespace gpucompute
