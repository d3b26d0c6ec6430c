// The path of one compute request, shared by the four compute RPCs and the
// requests of a Compute.Session (server/session.h): the parsed request is
// admitted and checked on the gRPC thread (admission, the operation's checks,
// the output options), then runs on the executor, through the dynamic batcher
// where it may batch, and its ResultStream answers it.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/dynamic_batcher.h"
#include "server/rpc_labels.h"
#include "server/prepared_operation.h"
#include "server/result_stream.h"
#include "server/service_context.h"

namespace gpucompute {

// Each compute request message's RPC, operation and checks.
template <typename Request>
struct ComputeOp;
template <>
struct ComputeOp<v1::DiscountProductRequest> {
  static constexpr absl::string_view kMethod = "DiscountProduct";
  static constexpr Operation kOperation = Operation::kDiscountProduct;
  static constexpr auto kPrepare = &PrepareDiscountProduct;
};
template <>
struct ComputeOp<v1::HaversineGridRequest> {
  static constexpr absl::string_view kMethod = "HaversineGrid";
  static constexpr Operation kOperation = Operation::kHaversineGrid;
  static constexpr auto kPrepare = &PrepareHaversineGrid;
};
template <>
struct ComputeOp<v1::NormalizeRequest> {
  static constexpr absl::string_view kMethod = "Normalize";
  static constexpr Operation kOperation = Operation::kNormalize;
  static constexpr auto kPrepare = &PrepareNormalize;
};
template <>
struct ComputeOp<v1::LombScargleRequest> {
  static constexpr absl::string_view kMethod = "LombScargle";
  static constexpr Operation kOperation = Operation::kLombScargle;
  static constexpr auto kPrepare = &PrepareLombScargle;
};

// How many messages a request's result may take.
enum class ResultFraming {
  kAsAsked,     // its own call: as its OutputOptions say
  kOneMessage,  // a session's request: one message (as output.single_message), always
};

// A compute request that was admitted and passed every check, ready to run.
// Its inline operands point into the request, which the work keeps.
struct AcceptedCompute {
  ResultOutput output;
  std::shared_ptr<const void> request;
  PreparedOperation prepared;
};

// Admits and checks `request` (on the gRPC thread of `context`'s call).
template <typename Request>
absl::StatusOr<AcceptedCompute> AcceptCompute(ServiceContext& service,
                                              const grpc::CallbackServerContext& context,
                                              std::shared_ptr<const Request> request,
                                              ResultFraming framing);

// Starts the accepted request of `op` on `stream` (checked since `start`), or
// has `stream` answer why it was refused. `stream` may be gone when this returns.
template <typename Call>
void StartCompute(ServiceContext& service, DynamicBatcher& batcher, Operation op, absl::Time start,
                  absl::StatusOr<AcceptedCompute> accepted, ResultStream<Call>& stream);

}  // namespace gpucompute
