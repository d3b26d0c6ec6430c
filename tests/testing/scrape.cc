#include "tests/testing/scrape.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace gpucompute::test {

int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool ReadUntilClosed(int fd, absl::Time deadline, std::string* received) {
  char buffer[65536];
  while (true) {
    // poll() waits forever on -1: an infinite deadline reads until the peer closes.
    const int wait_ms = deadline == absl::InfiniteFuture()
                            ? -1
                            : static_cast<int>(std::max<int64_t>(
                                  0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    pollfd ready = {fd, POLLIN, 0};
    if (poll(&ready, 1, wait_ms) <= 0) return false;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return true;
    received->append(buffer, n);
  }
}

std::string ScrapeMetrics(int port, const std::string& extra_headers, absl::Time deadline) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                              extra_headers + "\r\n";
  send(fd, request.data(), request.size(), 0);
  std::string response;
  const bool complete = ReadUntilClosed(fd, deadline, &response);
  close(fd);
  return complete ? response : "";
}

std::string ScrapeMetricsBody(int port) {
  const std::string response = ScrapeMetrics(port);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

bool MetricsShow(int port, absl::string_view series, int64_t value) {
  return absl::StrContains(ScrapeMetricsBody(port), absl::StrCat(series, " ", value, "\n"));
}

}  // namespace gpucompute::test
