// The Prometheus text of a server's metrics endpoint, for tests that check counters.
#pragma once

#include <string>

namespace gpucompute::test {

// The body of GET /metrics on 127.0.0.1:port (headers included); empty when
// nothing listens there.
std::string ScrapeMetrics(int port);

}  // namespace gpucompute::test
