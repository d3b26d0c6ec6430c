#include "client/client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace gpucompute::client {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const ChannelOptions& options) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  arguments.SetMaxSendMessageSize(options.max_send_message_bytes);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments);
}

absl::Status ToAbslStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // gRPC and Abseil share the canonical code numbering.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : options_(options),
      compute_(v1::Compute::NewStub(channel)),
      buffers_(v1::Buffers::NewStub(channel)),
      server_(v1::Server::NewStub(channel)),
      shared_memory_(v1::SharedMemory::NewStub(channel)),
      health_(grpc::health::v1::Health::NewStub(channel)) {}

void Client::SetDeadline(grpc::ClientContext& context) const {
  if (options_.timeout == absl::InfiniteDuration()) return;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoNanoseconds(options_.timeout));
}

template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> Client::Unary(
    Stub& stub, grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
    const Request& request) const {
  grpc::ClientContext context;
  SetDeadline(context);
  Response response;
  GC_RETURN_IF_ERROR(ToAbslStatus((stub.*rpc)(&context, request, &response)));
  return response;
}

template <typename Stub, typename Request>
absl::StatusOr<Result> Client::ResultStream(
    Stub& stub,
    std::unique_ptr<grpc::ClientReader<v1::ResultChunk>> (Stub::*rpc)(grpc::ClientContext*,
                                                                        const Request&),
    const Request& request, bool expect_data, const ProgressCallback& progress) const {
  grpc::ClientContext context;
  SetDeadline(context);
  std::unique_ptr<grpc::ClientReader<v1::ResultChunk>> reader = (stub.*rpc)(&context, request);
  return ReadResultStream(context, *reader, expect_data, progress);
}

absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Client::Health(
    const std::string& service) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  GC_ASSIGN_OR_RETURN(const grpc::health::v1::HealthCheckResponse response,
                      Unary(*health_, &grpc::health::v1::Health::Stub::Check, request));
  return response.status();
}

absl::StatusOr<v1::ServerInfo> Client::GetInfo() {
  return Unary(*server_, &v1::Server::Stub::GetInfo, v1::GetInfoRequest());
}

absl::StatusOr<v1::BufferInfo> Client::Upload(const std::string& name, v1::DType dtype,
                                              std::span<const int64_t> shape,
                                              absl::string_view data,
                                              const ProgressCallback& progress) {
  GC_ASSIGN_OR_RETURN(const uint64_t expected, ByteCount(dtype, shape));
  if (expected != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat(DTypeName(dtype), " ", ShapeToString(shape),
                                                   " needs ", expected, " bytes, got ",
                                                   data.size()));
  }
  const size_t chunk_bytes = std::max<uint32_t>(options_.upload_chunk_bytes, 1);

  grpc::ClientContext context;
  SetDeadline(context);
  v1::BufferInfo info;
  std::unique_ptr<grpc::ClientWriter<v1::UploadRequest>> writer = buffers_->Upload(&context, &info);

  v1::UploadRequest message;
  v1::UploadHeader& header = *message.mutable_header();
  header.set_name(name);
  header.set_dtype(dtype);
  header.mutable_shape()->Add(shape.begin(), shape.end());
  // A failed Write means the server already ended the call; Finish says why.
  bool open = writer->Write(message);
  if (progress) progress(0, data.size());
  for (size_t offset = 0; open && offset < data.size(); offset += chunk_bytes) {
    const size_t length = std::min(chunk_bytes, data.size() - offset);
    message.set_data(data.data() + offset, length);
    open = writer->Write(message);
    if (open && progress) progress(offset + length, data.size());
  }
  if (open) writer->WritesDone();
  GC_RETURN_IF_ERROR(ToAbslStatus(writer->Finish()));
  if (!open) {
    return absl::InternalError("upload stream closed early although the server reported success");
  }
  return info;
}

absl::StatusOr<v1::BufferInfo> Client::Upload(const std::string& name, const v1::Tensor& tensor,
                                              const ProgressCallback& progress) {
  return Upload(name, tensor.dtype(), std::span(tensor.shape().data(), tensor.shape().size()),
                tensor.data(), progress);
}

absl::StatusOr<Result> Client::Download(const std::string& buffer_id, uint32_t chunk_bytes,
                                        const ProgressCallback& progress) {
  v1::DownloadRequest request;
  request.set_buffer_id(buffer_id);
  request.set_chunk_bytes(chunk_bytes);
  return ResultStream(*buffers_, &v1::Buffers::Stub::Download, request, /*expect_data=*/true,
                      progress);
}

absl::StatusOr<uint64_t> Client::Delete(const std::string& buffer_id) {
  v1::DeleteRequest request;
  request.set_buffer_id(buffer_id);
  GC_ASSIGN_OR_RETURN(const v1::DeleteResponse response,
                      Unary(*buffers_, &v1::Buffers::Stub::Delete, request));
  return response.freed_bytes();
}

absl::StatusOr<v1::SharedMemoryRegionInfo> Client::RegisterSystemSharedMemory(
    const std::string& name, const std::string& key, uint64_t offset, uint64_t byte_size) {
  v1::RegisterSystemSharedMemoryRequest request;
  request.set_name(name);
  request.set_key(key);
  request.set_offset(offset);
  request.set_byte_size(byte_size);
  return Unary(*shared_memory_, &v1::SharedMemory::Stub::RegisterSystemSharedMemory, request);
}

absl::StatusOr<uint64_t> Client::UnregisterSharedMemory(const std::string& region_id) {
  v1::UnregisterSharedMemoryRequest request;
  request.set_region_id(region_id);
  GC_ASSIGN_OR_RETURN(
      const v1::UnregisterSharedMemoryResponse response,
      Unary(*shared_memory_, &v1::SharedMemory::Stub::UnregisterSharedMemory, request));
  return response.freed_bytes();
}

absl::StatusOr<v1::SharedMemoryStatusResponse> Client::SharedMemoryStatus() {
  return Unary(*shared_memory_, &v1::SharedMemory::Stub::SharedMemoryStatus,
               v1::SharedMemoryStatusRequest());
}

absl::StatusOr<v1::ListResponse> Client::List() {
  // Every page, in one reply with the totals of the last.
  v1::ListRequest request;
  v1::ListResponse all;
  do {
    GC_ASSIGN_OR_RETURN(v1::ListResponse page,
                        Unary(*buffers_, &v1::Buffers::Stub::List, request));
    for (v1::BufferInfo& buffer : *page.mutable_buffers()) *all.add_buffers() = std::move(buffer);
    all.set_used_bytes(page.used_bytes());
    all.set_metadata_bytes(page.metadata_bytes());
    all.set_quota_bytes(page.quota_bytes());
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  return all;
}

template <typename Request>
absl::StatusOr<Result> Client::Compute(
    std::unique_ptr<grpc::ClientReader<v1::ResultChunk>> (v1::Compute::Stub::*rpc)(
        grpc::ClientContext*, const Request&),
    const Request& request, const ProgressCallback& progress) {
  const bool streamed =
      !request.output().keep_on_device() && !request.output().has_shared_memory();
  return ResultStream(*compute_, rpc, request, streamed, progress);
}

absl::StatusOr<Result> Client::DiscountProduct(const v1::DiscountProductRequest& request,
                                               const ProgressCallback& progress) {
  return Compute(&v1::Compute::Stub::DiscountProduct, request, progress);
}

absl::StatusOr<Result> Client::HaversineGrid(const v1::HaversineGridRequest& request,
                                             const ProgressCallback& progress) {
  return Compute(&v1::Compute::Stub::HaversineGrid, request, progress);
}

absl::StatusOr<Result> Client::Normalize(const v1::NormalizeRequest& request,
                                         const ProgressCallback& progress) {
  return Compute(&v1::Compute::Stub::Normalize, request, progress);
}

absl::StatusOr<Result> Client::LombScargle(const v1::LombScargleRequest& request,
                                           const ProgressCallback& progress) {
  return Compute(&v1::Compute::Stub::LombScargle, request, progress);
}

absl::StatusOr<Result> Client::ReadResultStream(
    grpc::ClientContext& context, grpc::ClientReaderInterface<v1::ResultChunk>& reader,
    bool expect_data, const ProgressCallback& progress) const {
  ResultAssembler assembler({.expect_data = expect_data,
                             .max_result_bytes = options_.max_result_bytes,
                             .progress = progress});
  v1::ResultChunk chunk;
  absl::Status framing = absl::OkStatus();
  while (reader.Read(&chunk)) {
    framing = assembler.Add(chunk);
    if (!framing.ok()) {
      // Stop the server streaming the rest; Read returns false once cancelled.
      context.TryCancel();
      while (reader.Read(&chunk)) {
      }
      break;
    }
  }
  const grpc::Status status = reader.Finish();
  GC_RETURN_IF_ERROR(framing);
  GC_RETURN_IF_ERROR(ToAbslStatus(status));
  return std::move(assembler).Finish();
}

}  // namespace gpucompute::client
