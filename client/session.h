// Compute.Session from C++: many small compute requests on one open
// call, each answered by its id as it completes. A unary call pays gRPC's call
// set-up and teardown on both sides, more than the work of a small request; a
// session pays them once.
//
//   Session session(channel);
//   session.StartSingleMessage(request, [](absl::StatusOr<Result> result) { ... });
//
// Each request's result must come as one message (the server refuses a larger one
// with FAILED_PRECONDITION before it runs: send those with Client). Several
// threads may start requests on one Session at once; `done` runs on a gRPC thread.
#pragma once

#include <cstdint>
#include <memory>

#include "client/client.h"
#include "grpcpp/channel.h"

namespace gpucompute::client {

class Session {
 public:
  // Opens the call on `channel`. The call has no deadline and ClientOptions::timeout
  // is not applied to its requests (the Python client's session times each request
  // out alone); results over options.max_result_bytes fail with RESOURCE_EXHAUSTED.
  explicit Session(std::shared_ptr<grpc::Channel> channel, ClientOptions options = {});
  // Half-closes the call and waits until every request in flight is answered and
  // the call has ended.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Sends `request` (one of the four compute requests) and returns; `done` runs once
  // with its result or its own status, or with the call's status if the call ends
  // before answering it (UNAVAILABLE where the connection broke).
  template <typename Request>
  void StartSingleMessage(const Request& request, Client::ResultCallback done);

 private:
  class Call;
  std::unique_ptr<Call> call_;
};

}  // namespace gpucompute::client
