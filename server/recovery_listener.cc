#include "server/recovery_listener.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/server_posix.h"

namespace gpucompute {
namespace {

// How long accept waits after failing for want of descriptors.
constexpr int kRetryMillis = 100;

// The port a socket's local end has; 0 for a socket of no inet family.
int LocalPort(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  }
  return 0;
}

// This process's listening TCP sockets on `port`: their local addresses.
std::vector<std::pair<int, sockaddr_storage>> ListenersOn(int port) {
  std::vector<std::pair<int, sockaddr_storage>> found;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return found;
  while (dirent* entry = readdir(dir)) {
    int fd = -1;
    if (!absl::SimpleAtoi(entry->d_name, &fd) || fd == dirfd(dir)) continue;
    int listening = 0;
    socklen_t size = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || !listening) continue;
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) continue;
    if (LocalPort(address) == port) found.emplace_back(fd, address);
  }
  closedir(dir);
  return found;
}

absl::StatusOr<int> Listen(const sockaddr_storage& address) {
  const int fd = socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (address.ss_family == AF_INET6) {
    // As gRPC's: a [::] listener takes IPv4 connections too.
    const int zero = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  const socklen_t length =
      address.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("bind/listen: ", std::strerror(error)));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RecoveryListener>> RecoveryListener::TakeOver(grpc::Server* server,
                                                                             int port) {
  const std::vector<std::pair<int, sockaddr_storage>> failed = ListenersOn(port);
  if (failed.empty()) {
    return absl::NotFoundError(absl::StrCat("no listening socket on port ", port));
  }
  std::vector<int> listeners;
  for (const auto& [fd, address] : failed) {
    // Bound beside the failed one (SO_REUSEPORT), which then stops listening,
    // so that the port never refuses; where gRPC's socket does not share its
    // port, it stops first (SO_REUSEADDR then lets this one bind).
    absl::StatusOr<int> mine = Listen(address);
    shutdown(fd, SHUT_RDWR);
    if (!mine.ok()) mine = Listen(address);
    if (!mine.ok()) {
      for (int opened : listeners) close(opened);
      return mine.status();
    }
    listeners.push_back(*mine);
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    for (int opened : listeners) close(opened);
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::unique_ptr<RecoveryListener> listener(
      new RecoveryListener(server, std::move(listeners), wake[0], wake[1]));
  listener->thread_ = std::thread([raw = listener.get()] { raw->Run(); });
  return listener;
}

RecoveryListener::RecoveryListener(grpc::Server* server, std::vector<int> listeners,
                                   int wake_read, int wake_write)
    : server_(server), listeners_(std::move(listeners)), wake_read_(wake_read),
      wake_write_(wake_write) {}

RecoveryListener::~RecoveryListener() {
  const char stop = 0;
  (void)!write(wake_write_, &stop, 1);
  if (thread_.joinable()) thread_.join();
  for (int fd : listeners_) close(fd);
  close(wake_read_);
  close(wake_write_);
}

void RecoveryListener::Run() {
  std::vector<pollfd> polled;
  for (int fd : listeners_) polled.push_back({fd, POLLIN, 0});
  polled.push_back({wake_read_, POLLIN, 0});
  while (true) {
    // While out of descriptors, the pending connections wait in the backlog.
    const int timeout = accepting_.load() ? -1 : kRetryMillis;
    if (poll(polled.data(), polled.size(), timeout) < 0 && errno != EINTR) return;
    if (polled.back().revents != 0) return;
    for (int fd : listeners_) {
      while (true) {
        // Non-blocking, as gRPC's endpoints expect.
        const int connection = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (connection < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            accepting_.store(false);
          }
          break;  // EAGAIN: none left; ECONNABORTED and the like: the next poll
        }
        accepting_.store(true);
        const int one = 1;
        setsockopt(connection, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        grpc::AddInsecureChannelFromFd(server_, connection);
      }
    }
  }
}

}  // namespace gpucompute
