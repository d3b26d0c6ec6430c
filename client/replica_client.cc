#include "client/replica_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <functional>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/buffer_id.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"

namespace gpucompute::client {

absl::StatusOr<std::vector<std::string>> ResolveReplicaTargets(const std::string& target) {
  std::vector<std::string> found;
  for (absl::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (!absl::StartsWith(target, scheme)) continue;
    for (absl::string_view address :
         absl::StrSplit(absl::string_view(target).substr(scheme.size()), ',', absl::SkipEmpty())) {
      found.push_back(absl::StrCat(scheme, address));
    }
    return found;
  }
  absl::string_view name = target;
  absl::ConsumePrefix(&name, "dns:");
  if (absl::ConsumePrefix(&name, "//")) {  // dns://[authority]/host:port
    const size_t slash = name.find('/');
    name = slash == absl::string_view::npos ? "" : name.substr(slash + 1);
  }
  const size_t colon = name.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(name.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("target '", target, "' has no port; use host:port"));
  }
  absl::string_view host = name.substr(0, colon);
  absl::ConsumePrefix(&host, "[");
  absl::ConsumeSuffix(&host, "]");
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* results = nullptr;
  const std::string host_string(host);
  if (const int error = getaddrinfo(host_string.c_str(), nullptr, &hints, &results); error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host_string, "': ", gai_strerror(error)));
  }
  for (const addrinfo* at = results; at != nullptr; at = at->ai_next) {
    char ip[INET6_ADDRSTRLEN] = {};
    std::string address;
    if (at->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(at->ai_addr)->sin_addr, ip,
                sizeof(ip));
      address = absl::StrCat("ipv4:", ip, ":", port);
    } else if (at->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(at->ai_addr)->sin6_addr, ip,
                sizeof(ip));
      address = absl::StrCat("ipv6:[", ip, "]:", port);
    } else {
      continue;
    }
    if (std::find(found.begin(), found.end(), address) == found.end()) found.push_back(address);
  }
  freeaddrinfo(results);
  return found;
}

std::vector<std::string> NamedBufferIds(const google::protobuf::Message& message) {
  std::vector<std::string> ids;
  const google::protobuf::Reflection& reflection = *message.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection.ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->name() == "buffer_id" &&
        field->type() == google::protobuf::FieldDescriptor::TYPE_STRING && !field->is_repeated()) {
      ids.push_back(reflection.GetString(message, field));
    } else if (field->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE) {
      const int count = field->is_repeated() ? reflection.FieldSize(message, field) : 1;
      for (int i = 0; i < count; ++i) {
        const google::protobuf::Message& inner =
            field->is_repeated() ? reflection.GetRepeatedMessage(message, field, i)
                                 : reflection.GetMessage(message, field);
        for (std::string& id : NamedBufferIds(inner)) ids.push_back(std::move(id));
      }
    }
  }
  return ids;
}

absl::StatusOr<std::unique_ptr<ReplicaClient>> ReplicaClient::Connect(
    std::string target, ReplicaClientOptions options) {
  std::unique_ptr<ReplicaClient> client(new ReplicaClient(std::move(target), std::move(options)));
  GC_RETURN_IF_ERROR(ResolveReplicaTargets(client->target_).status());
  if (client->Refresh().empty()) {
    return absl::UnavailableError(
        absl::StrCat("no address of '", client->target_, "' answered GetInfo"));
  }
  return client;
}

std::map<std::string, std::string> ReplicaClient::Refresh() {
  // A failed look-up keeps the addresses known so far: the replicas may still be up.
  absl::StatusOr<std::vector<std::string>> addresses = ResolveReplicaTargets(target_);
  std::map<std::string, Endpoint> endpoints;
  {
    absl::MutexLock lock(&mu_);
    if (addresses.ok()) {
      std::map<std::string, Endpoint> kept;
      for (const std::string& address : *addresses) {
        Endpoint& endpoint = kept[address];
        endpoint = endpoints_[address];
        if (endpoint.client == nullptr) {
          endpoint.channel = MakeChannel(address, options_.channel);
          endpoint.client = std::make_shared<Client>(endpoint.channel, options_.client);
        }
      }
      endpoints_ = std::move(kept);
    }
    endpoints = endpoints_;
  }
  std::map<std::string, std::string> live;
  for (const auto& [address, endpoint] : endpoints) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.probe_timeout));
    v1::ServerInfo info;
    if (v1::Server::NewStub(endpoint.channel)->GetInfo(&context, {}, &info).ok()) {
      live[info.instance_id()] = address;
    }
  }
  absl::MutexLock lock(&mu_);
  live_ = live;
  refreshed_ = absl::Now();
  return live;
}

std::map<std::string, std::string> ReplicaClient::Replicas() const {
  absl::MutexLock lock(&mu_);
  return live_;
}

std::vector<ReplicaClient::Replica> ReplicaClient::Current() {
  bool stale;
  {
    absl::MutexLock lock(&mu_);
    stale = live_.empty() || absl::Now() - refreshed_ >= options_.refresh_interval;
  }
  if (stale) Refresh();
  std::vector<Replica> replicas;
  absl::MutexLock lock(&mu_);
  for (const auto& [instance, address] : live_) {
    auto endpoint = endpoints_.find(address);
    if (endpoint != endpoints_.end()) replicas.push_back({instance, endpoint->second.client});
  }
  return replicas;
}

template <typename T>
absl::StatusOr<T> ReplicaClient::OnAnyReplica(
    const std::function<absl::StatusOr<T>(Client&)>& call) {
  std::set<std::string> failed;
  while (true) {
    std::vector<Replica> choices;
    for (Replica& replica : Current()) {
      if (!failed.contains(replica.instance)) choices.push_back(std::move(replica));
    }
    if (choices.empty()) {
      return absl::UnavailableError(absl::StrCat("no replica of '", target_, "' answered (",
                                                 failed.size(), " failed this call)"));
    }
    Replica& replica = choices[turn_.fetch_add(1) % choices.size()];
    absl::StatusOr<T> result = call(*replica.client);
    if (!absl::IsUnavailable(result.status())) return result;
    failed.insert(replica.instance);
    Refresh();
  }
}

template <typename T>
absl::StatusOr<T> ReplicaClient::OnOwner(const std::vector<std::string>& buffer_ids,
                                         const std::function<absl::StatusOr<T>(Client&)>& call) {
  std::map<std::string, std::string> owners;  // instance -> a buffer id of it
  for (const std::string& id : buffer_ids) owners.emplace(IssuingInstance(id), id);
  if (owners.size() > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the request's buffers are stored on ", owners.size(), " replicas (",
        absl::StrJoin(owners, ", ",
                      [](std::string* out, const auto& owner) {
                        absl::StrAppend(out, owner.second, " on instance ",
                                        owner.first.empty() ? "(none: not a buffer id)"
                                                            : owner.first);
                      }),
        "); stored operands of one request must share a replica, and nothing is copied "
        "between replicas: download and upload them to one"));
  }
  const auto& [owner, buffer_id] = *owners.begin();
  if (owner.empty()) return OnAnyReplica(call);  // not a buffer id: any replica says NOT_FOUND
  auto find = [&, owner = owner]() -> std::shared_ptr<Client> {
    for (Replica& replica : Current()) {
      if (replica.instance == owner) return replica.client;
    }
    return nullptr;
  };
  std::shared_ptr<Client> client = find();
  if (client == nullptr) {  // a replica started since the last refresh, or a lost buffer
    Refresh();
    client = find();
  }
  if (client == nullptr) return Lost(owner, buffer_id);
  absl::StatusOr<T> result = call(*client);
  // A dead replica, or another one now at its address (a restart): is it gone?
  if ((absl::IsUnavailable(result.status()) ||
       ReasonOf(result.status()) == reason::kBufferOnOtherReplica) &&
      !Refresh().contains(owner)) {
    return Lost(owner, buffer_id);
  }
  return result;
}

template <typename T>
absl::StatusOr<T> ReplicaClient::Route(const google::protobuf::Message& request,
                                       const std::function<absl::StatusOr<T>(Client&)>& call) {
  const std::vector<std::string> ids = NamedBufferIds(request);
  return ids.empty() ? OnAnyReplica(call) : OnOwner(ids, call);
}

absl::Status ReplicaClient::Lost(absl::string_view instance, absl::string_view buffer_id) const {
  return absl::DataLossError(absl::StrCat(
      "buffer ", buffer_id, " was stored by replica instance ", instance, ", which none of the ",
      Replicas().size(), " replicas of '", target_,
      "' is any more: it stopped or restarted and its buffers are lost; upload the data again"));
}

absl::StatusOr<v1::ServerInfo> ReplicaClient::GetInfo() {
  return OnAnyReplica<v1::ServerInfo>([](Client& client) { return client.GetInfo(); });
}

absl::StatusOr<v1::BufferInfo> ReplicaClient::Upload(const std::string& name,
                                                     const v1::Tensor& tensor) {
  return OnAnyReplica<v1::BufferInfo>(
      [&](Client& client) { return client.Upload(name, tensor); });
}

absl::StatusOr<Result> ReplicaClient::Download(const std::string& buffer_id,
                                               uint32_t chunk_bytes) {
  return OnOwner<Result>({buffer_id},
                         [&](Client& client) { return client.Download(buffer_id, chunk_bytes); });
}

absl::StatusOr<uint64_t> ReplicaClient::Delete(const std::string& buffer_id) {
  return OnOwner<uint64_t>({buffer_id}, [&](Client& client) { return client.Delete(buffer_id); });
}

absl::StatusOr<v1::ListResponse> ReplicaClient::List() {
  v1::ListResponse all;
  for (Replica& replica : Current()) {
    GC_ASSIGN_OR_RETURN(v1::ListResponse part, replica.client->List());
    for (v1::BufferInfo& buffer : *part.mutable_buffers()) *all.add_buffers() = std::move(buffer);
    all.set_used_bytes(all.used_bytes() + part.used_bytes());
    all.set_metadata_bytes(all.metadata_bytes() + part.metadata_bytes());
    all.set_quota_bytes(all.quota_bytes() + part.quota_bytes());
  }
  return all;
}

absl::StatusOr<Result> ReplicaClient::DiscountProduct(const v1::DiscountProductRequest& request) {
  return Route<Result>(request, [&](Client& client) { return client.DiscountProduct(request); });
}

absl::StatusOr<Result> ReplicaClient::HaversineGrid(const v1::HaversineGridRequest& request) {
  return Route<Result>(request, [&](Client& client) { return client.HaversineGrid(request); });
}

absl::StatusOr<Result> ReplicaClient::Normalize(const v1::NormalizeRequest& request) {
  return Route<Result>(request, [&](Client& client) { return client.Normalize(request); });
}

absl::StatusOr<Result> ReplicaClient::LombScargle(const v1::LombScargleRequest& request) {
  return Route<Result>(request, [&](Client& client) { return client.LombScargle(request); });
}

}  // namespace gpucompute::client
