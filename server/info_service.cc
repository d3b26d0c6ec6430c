#include "server/info_service.h"

#include "common/status_macros.h"
#include "server/shared_memory_service.h"
#include "server/status_convert.h"

namespace gpucompute {

InfoService::InfoService(ServiceContext& service, std::string backend_note)
    : service_(service), backend_note_(std::move(backend_note)) {}

grpc::ServerUnaryReactor* InfoService::GetInfo(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* response) {
  v1::ServerInfo info;
  return service_.FinishUnary(context, RpcMethod::kGetInfo, info, response, [&] {
    GC_RETURN_IF_ERROR(ParseRequest<v1::GetInfoRequest>(*request).status());
    Describe(&info);
    return absl::OkStatus();
  });
}

void InfoService::Describe(v1::ServerInfo* response) const {
  response->set_version(kVersion);
  response->set_backend(std::string(service_.backend.name()));
  response->set_backend_note(backend_note_);
  response->set_instance_id(service_.store.instance_id());
  for (const DeviceDescription& device : service_.backend.Devices()) {
    v1::DeviceInfo* info = response->add_devices();
    info->set_name(device.name);
    info->set_description(device.description);
    info->set_memory_bytes(device.memory_bytes);
    info->set_healthy(device.healthy);
  }
  for (const char* name :
       {"DiscountProduct", "HaversineGrid", "Normalize", "LombScargle", "StreamingCompute"}) {
    v1::OperationInfo* op = response->add_operations();
    op->set_name(name);
    op->add_dtypes(v1::FLOAT32);
    op->add_dtypes(v1::FLOAT64);
  }
  const ServerConfig& config = service_.config;
  v1::Limits* limits = response->mutable_limits();
  limits->set_max_receive_message_bytes(config.max_receive_message_bytes);
  limits->set_buffer_quota_bytes(config.buffer_quota_bytes);
  limits->set_min_chunk_bytes(config.min_chunk_bytes);
  limits->set_max_chunk_bytes(config.max_chunk_bytes);
  limits->set_default_chunk_bytes(config.default_chunk_bytes);
  limits->set_max_rank(kMaxRank);
  limits->set_max_elements(config.max_elements);
  limits->set_executor_threads(service_.executor.threads());
  limits->set_max_queue_depth(config.max_queue_depth);
  limits->set_max_device_queue_depth(config.max_device_queue_depth);
  limits->set_small_request_threads(service_.executor.small_lane_threads());
  limits->set_small_request_work(static_cast<uint64_t>(config.small_request_work));
  limits->set_max_small_queue_depth(config.max_small_queue_depth);
  limits->set_max_work_per_request(static_cast<uint64_t>(config.max_work_per_request));
  limits->set_max_metadata_bytes(config.max_metadata_bytes);
  limits->set_stream_idle_timeout_ms(absl::ToInt64Milliseconds(config.stream_idle_timeout));
  limits->set_upload_session_ttl_ms(absl::ToInt64Milliseconds(config.upload_session_ttl));
  limits->set_streaming_chunks_in_flight(static_cast<uint32_t>(config.streaming_chunks_in_flight));
  limits->set_max_buffers_per_owner(static_cast<uint32_t>(config.max_buffers_per_owner));
  limits->set_principal_quota_bytes(config.principal_quota_bytes);
  limits->set_max_in_flight(config.max_in_flight);
  limits->set_max_in_flight_per_connection(config.max_in_flight_per_connection);
  limits->set_max_concurrent_streams(config.max_concurrent_streams);
  limits->set_max_open_streams(static_cast<uint32_t>(config.max_open_streams));
  limits->set_max_open_streams_per_connection(
      static_cast<uint32_t>(config.max_open_streams_per_connection));
  limits->set_session_answer_bytes(config.session_answer_bytes);
  limits->set_resource_quota_bytes(config.resource_quota_bytes);
  limits->set_tls(!config.security.tls_cert_file.empty());
  limits->set_mutual_tls(!config.security.tls_client_ca_file.empty());
  limits->set_max_batch_size(config.batching ? static_cast<uint32_t>(config.max_batch_size) : 0);
  limits->set_batch_window_us(static_cast<uint64_t>(absl::ToInt64Microseconds(config.batch_window)));
  limits->set_single_message_results(true);
  limits->set_sessions(true);
  limits->set_token_auth(!config.security.auth_tokens_file.empty());
  for (const MemoryBudgetStats& budget : service_.backend.Stats().memory_budgets) {
    if (budget.memory == "host") limits->set_host_memory_budget_bytes(budget.capacity_bytes);
    for (v1::DeviceInfo& device : *response->mutable_devices()) {
      if (device.name() == budget.memory || (service_.backend.arrays_on_host() && budget.memory == "host")) {
        device.set_memory_budget_bytes(budget.capacity_bytes);
      }
    }
  }
  limits->set_shared_memory(config.allow_shared_memory);
  limits->set_shared_memory_quota_bytes(config.shared_memory_quota_bytes);
  limits->set_shared_memory_principal_quota_bytes(config.shared_memory_principal_quota_bytes);
  limits->set_max_shared_memory_regions_per_owner(
      static_cast<uint32_t>(config.max_shared_memory_regions_per_owner));
  response->set_host_boot_id(HostBootId());
  limits->set_memory_budget_wait_ms(absl::ToInt64Milliseconds(config.backend.memory_budget_wait));
}

}  // namespace gpucompute
