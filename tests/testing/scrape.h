// The Prometheus text of a server's metrics endpoint, for tests that check
// counters, and the loopback TCP pieces that tests of the endpoint itself use.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gpucompute::test {

// A TCP connection to 127.0.0.1:port; -1 when refused.
int ConnectLoopback(int port);

// Reads `fd` into `received` until the peer closes it or `deadline` passes;
// true when it closed.
bool ReadUntilClosed(int fd, absl::Time deadline, std::string* received);

// The whole response to GET /metrics on 127.0.0.1:port (status line, headers,
// body), the request carrying `extra_headers` (each line ending in "\r\n");
// empty when nothing listens there or the response has not ended by `deadline`.
std::string ScrapeMetrics(int port, const std::string& extra_headers = "",
                          absl::Time deadline = absl::InfiniteFuture());

// The body of that response alone (the Prometheus text); empty when there is none.
std::string ScrapeMetricsBody(int port);

// Whether the metrics on 127.0.0.1:port show the series `series` (name{labels}, as
// the text writes it) at `value`: for tests that wait on a gauge.
bool MetricsShow(int port, absl::string_view series, int64_t value);

}  // namespace gpucompute::test
