// Closed-loop load test: `concurrency` requests in flight, each followed by the
// next when it completes, drawn from a weighted mix of the compute operations,
// until a duration or a request count is reached. Each request in flight is a
// thread calling the blocking API, or (callbacks) a slot on gRPC's callback API
// with no thread of its own, which costs the client less CPU per request; the
// slots' requests go as calls of their own or on one session per connection.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cli_parse.h"
#include "client/client.h"

namespace gpucompute::client {

struct BenchConfig {
  int concurrency = 8;
  // Stops at whichever comes first; count 0 means no count limit.
  absl::Duration duration = absl::Seconds(10);
  uint64_t count = 0;
  std::vector<MixEntry> mix;
  // Elements in each result; the inputs are sized to produce it.
  uint64_t size = 1 << 16;
  v1::DType dtype = v1::FLOAT32;
  uint32_t chunk_bytes = 0;
  // Ask for OutputOptions.accept_complete_result.
  bool complete_results = true;
  // With complete_results: ask for OutputOptions.single_message and read each
  // call as a unary call (a server with Limits.single_message_results).
  bool unary_results = true;
  // Requests in flight as callback slots rather than threads (needs unary results,
  // compute operations only).
  bool callbacks = false;
  // With callbacks: the slots' requests on `sessions_per_connection`
  // Compute.Session calls per connection (client/session.h) rather than a call each.
  // A session's server reads its requests one at a time, so one session carries a
  // fraction of what several do under load.
  bool session = false;
  int sessions_per_connection = 8;
  uint64_t seed = 1;
};

struct LatencySummary {
  uint64_t count = 0;
  absl::Duration p50, p90, p99, max;
};

struct BenchReport {
  absl::Duration elapsed;
  uint64_t requests = 0;
  uint64_t succeeded = 0;
  uint64_t result_bytes = 0;
  LatencySummary latency;  // successful requests
  std::map<BenchOp, LatencySummary> latency_by_op;
  // By gRPC code name, with one message per code for diagnosis.
  std::map<std::string, uint64_t> errors_by_code;
  std::map<std::string, std::string> example_error_by_code;
};

// Nearest-rank percentiles of `latencies` (sorted in place).
LatencySummary Summarize(std::vector<absl::Duration>& latencies);

// The requests in flight go round robin to `client` and `more_clients` (clients on
// channels of their own connections, MakeStripeChannels, to spread the load over
// several HTTP/2 connections as several callers would).
absl::StatusOr<BenchReport> RunBench(Client& client, const BenchConfig& config,
                                     std::span<Client* const> more_clients = {});

std::string FormatBenchReport(const BenchReport& report);

}  // namespace gpucompute::client
