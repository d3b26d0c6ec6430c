// Client for one service run as several replicas behind one name.
//
// A buffer lives in the replica that stored it, and its id begins with that
// replica's instance id (ServerInfo.instance_id, new at every start). So this
// client resolves the name itself (a Kubernetes headless Service, a DNS name with
// several addresses, or a gRPC "ipv4:"/"ipv6:" address list), keeps one channel per
// address and asks each address for its instance id. Calls naming no buffer go
// round-robin, moving on to the next replica when one is UNAVAILABLE; calls naming
// buffers go to their owner. A request whose buffers sit on two replicas is
// FAILED_PRECONDITION (nothing is copied between replicas); a buffer whose owner no
// address answers for any more is DATA_LOSS. gRPC's round_robin policy cannot route
// by owner (it picks per call, blind to the request), hence a channel per address.
//
//   absl::StatusOr<std::unique_ptr<ReplicaClient>> replicas =
//       ReplicaClient::Connect("dns:///gpucompute.ml.svc.cluster.local:50051");
//   v1::BufferInfo a = *(*replicas)->Upload("a", tensor);   // on some replica
//   (*replicas)->Normalize(request_naming_a);                // on a's replica
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "google/protobuf/message.h"

namespace gpucompute::client {

// One gRPC target per address of `target`: "ipv4:"/"ipv6:" lists are split,
// "dns:///host:port" and "host:port" are looked up (every A and AAAA record).
absl::StatusOr<std::vector<std::string>> ResolveReplicaTargets(const std::string& target);

// Every buffer id set anywhere in `message` (operands at any depth).
std::vector<std::string> NamedBufferIds(const google::protobuf::Message& message);

struct ReplicaClientOptions {
  ChannelOptions channel;
  ClientOptions client;
  // A call made this long after the last refresh re-resolves the target first (a
  // call also refreshes at once on UNAVAILABLE or a buffer of an unknown instance).
  absl::Duration refresh_interval = absl::Seconds(30);
  // How long one address has to answer GetInfo during a refresh.
  absl::Duration probe_timeout = absl::Seconds(2);
};

class ReplicaClient {
 public:
  // Resolves `target` and asks every address for its instance id; UNAVAILABLE
  // when none answers.
  static absl::StatusOr<std::unique_ptr<ReplicaClient>> Connect(std::string target,
                                                                ReplicaClientOptions options = {});

  // Re-resolves and asks again; returns {instance id: address} of those answering.
  std::map<std::string, std::string> Refresh();
  // {instance id: address} as last seen.
  std::map<std::string, std::string> Replicas() const;

  absl::StatusOr<v1::ServerInfo> GetInfo();
  absl::StatusOr<v1::BufferInfo> Upload(const std::string& name, const v1::Tensor& tensor);
  absl::StatusOr<Result> Download(const std::string& buffer_id, uint32_t chunk_bytes = 0);
  absl::StatusOr<uint64_t> Delete(const std::string& buffer_id);
  // The caller's buffers on every live replica (used and quota bytes summed).
  absl::StatusOr<v1::ListResponse> List();

  absl::StatusOr<Result> DiscountProduct(const v1::DiscountProductRequest& request);
  absl::StatusOr<Result> HaversineGrid(const v1::HaversineGridRequest& request);
  absl::StatusOr<Result> Normalize(const v1::NormalizeRequest& request);
  absl::StatusOr<Result> LombScargle(const v1::LombScargleRequest& request);

 private:
  struct Replica {
    std::string instance;
    std::shared_ptr<Client> client;
  };
  struct Endpoint {
    std::shared_ptr<grpc::Channel> channel;
    std::shared_ptr<Client> client;
  };

  ReplicaClient(std::string target, ReplicaClientOptions options)
      : target_(std::move(target)), options_(std::move(options)) {}
  // The live replicas, refreshed first when the last refresh is too old.
  std::vector<Replica> Current();
  // `call` on the next replica in turn; on UNAVAILABLE on the next one that has
  // not failed it, until every replica has.
  template <typename T>
  absl::StatusOr<T> OnAnyReplica(const std::function<absl::StatusOr<T>(Client&)>& call);
  // `call` on the replica that stores every buffer in `buffer_ids`.
  template <typename T>
  absl::StatusOr<T> OnOwner(const std::vector<std::string>& buffer_ids,
                            const std::function<absl::StatusOr<T>(Client&)>& call);
  // OnOwner for the buffers `request` names, OnAnyReplica when it names none.
  template <typename T>
  absl::StatusOr<T> Route(const google::protobuf::Message& request,
                          const std::function<absl::StatusOr<T>(Client&)>& call);
  absl::Status Lost(absl::string_view instance, absl::string_view buffer_id) const;

  const std::string target_;
  const ReplicaClientOptions options_;
  std::atomic<uint64_t> turn_{0};
  mutable absl::Mutex mu_;
  std::map<std::string, Endpoint> endpoints_ ABSL_GUARDED_BY(mu_);  // by address
  std::map<std::string, std::string> live_ ABSL_GUARDED_BY(mu_);  // instance -> address
  absl::Time refreshed_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace gpucompute::client
