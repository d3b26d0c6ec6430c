#include "client/client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/error_details.h"
#include "client/raw_call.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "gpucompute/v1/bulk_wire.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace gpucompute::client {
namespace {

grpc::ChannelArguments ChannelArgumentsOf(const ChannelOptions& options) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  arguments.SetMaxSendMessageSize(options.max_send_message_bytes);
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kMaxHttp2FrameBytes);
  for (const auto& [name, value] : options.int_arguments) arguments.SetInt(name, value);
  return arguments;
}

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const ChannelOptions& options) {
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   ChannelArgumentsOf(options));
}

std::vector<std::shared_ptr<grpc::Channel>> MakeStripeChannels(const std::string& target,
                                                               int count,
                                                               const ChannelOptions& options) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < count; ++i) {
    grpc::ChannelArguments arguments = ChannelArgumentsOf(options);
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels.push_back(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments));
  }
  return channels;
}

absl::Status ToAbslStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // gRPC and Abseil share the canonical code numbering.
  return WithErrorDetails(
      absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message()),
      status.error_details());
}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : options_(options),
      channel_(channel),
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

ResultAssembler::Options Client::AssemblerOptions(bool expect_data,
                                                  const ProgressCallback& progress) const {
  return {.expect_data = expect_data,
          .max_result_bytes = options_.max_result_bytes,
          .progress = progress};
}

absl::StatusOr<Result> Client::ResultStream(const std::string& method,
                                            const google::protobuf::MessageLite& request,
                                            ResultAssembler::Options options,
                                            grpc::Channel* channel) const {
  grpc::ClientContext context;
  SetDeadline(context);
  // The metadata, the request and the half-close go out in one batch.
  RawCall call(channel != nullptr ? *channel : *channel_, context, method,
               RawCall::Start::kWithFirstMessage);
  ResultAssembler assembler(std::move(options));
  absl::Status framing = absl::OkStatus();
  // A failed write means the call ended: the status says why.
  if (call.WriteLast(v1::wire::SerializedMessage(request))) {
    framing = ReadResultStream(call, context, assembler);
  }
  const grpc::Status status = call.Finish();
  GC_RETURN_IF_ERROR(framing);
  GC_RETURN_IF_ERROR(ToAbslStatus(status));
  return std::move(assembler).Finish();
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
  v1::UploadHeader header;
  header.set_name(name);
  header.set_dtype(dtype);
  header.mutable_shape()->Add(shape.begin(), shape.end());
  if (options_.stripes > 1 && data.size() > options_.stripe_bytes) {
    return StripedUpload(std::move(header), data, progress);
  }
  return UploadStream(*channel_, header, data, progress);
}

absl::StatusOr<v1::BufferInfo> Client::UploadStream(grpc::Channel& channel,
                                                    const v1::UploadHeader& header,
                                                    absl::string_view data,
                                                    const ProgressCallback& progress) const {
  const size_t chunk_bytes = std::max<uint32_t>(options_.upload_chunk_bytes, 1);
  grpc::ClientContext context;
  SetDeadline(context);
  RawCall writer(channel, context, upload_method_, RawCall::Start::kWithFirstMessage);
  v1::UploadRequest message;
  *message.mutable_header() = header;
  // A failed Write means the server already ended the call; Finish says why.
  bool open = writer.Write(v1::wire::SerializedMessage(message));
  if (progress) progress(0, data.size());
  for (size_t offset = 0; open && offset < data.size(); offset += chunk_bytes) {
    const size_t length = std::min(chunk_bytes, data.size() - offset);
    // gRPC sends from `data` itself, which outlives the call.
    open = writer.Write(v1::wire::UploadDataMessage(
        grpc::Slice(data.data() + offset, length, grpc::Slice::STATIC_SLICE)));
    if (open && progress) progress(offset + length, data.size());
  }
  grpc::ByteBuffer reply;
  bool answered = false;
  if (open) {
    writer.WritesDone();
    answered = writer.Read(&reply);
  }
  GC_RETURN_IF_ERROR(ToAbslStatus(writer.Finish()));
  if (!open) {
    return absl::InternalError("upload stream closed early although the server reported success");
  }
  v1::BufferInfo info;
  if (!answered || !v1::wire::ParseMessageBytes(reply, info)) {
    return absl::InternalError("the server reported success but sent no valid BufferInfo");
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
  return DownloadTo(buffer_id, {}, chunk_bytes, progress);
}

absl::StatusOr<Result> Client::DownloadTo(const std::string& buffer_id,
                                          const ResultDestination& destination,
                                          uint32_t chunk_bytes, const ProgressCallback& progress) {
  if (options_.stripes > 1) return StripedDownload(buffer_id, destination, chunk_bytes, progress);
  v1::DownloadRequest request;
  request.set_buffer_id(buffer_id);
  request.set_chunk_bytes(chunk_bytes);
  ResultAssembler::Options options = AssemblerOptions(/*expect_data=*/true, progress);
  options.destination = destination;
  return ResultStream(download_method_, request, std::move(options));
}

absl::StatusOr<v1::UploadStatusResponse> Client::UploadStatus(
    const std::string& session_token) const {
  v1::UploadStatusRequest request;
  request.set_session_token(session_token);
  return Unary(*buffers_, &v1::Buffers::Stub::UploadStatus, request);
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

std::optional<absl::StatusOr<Result>> Client::SingleMessage(
    const std::string& method, const google::protobuf::MessageLite& request,
    ResultAssembler::Options options) const {
  if (single_message_results_.load() < 0) {
    grpc::ClientContext ask;
    SetDeadline(ask);
    v1::ServerInfo info;
    // Not known after a failed GetInfo: the next request asks again.
    if (server_->GetInfo(&ask, v1::GetInfoRequest(), &info).ok()) {
      single_message_results_.store(info.limits().single_message_results() ? 1 : 0);
    }
  }
  if (single_message_results_.load() != 1) return std::nullopt;
  grpc::ClientContext context;
  SetDeadline(context);
  grpc::ByteBuffer reply;
  // The server-streaming method read as unary: one batch of operations, one wait.
  const grpc::Status status =
      RawUnaryCall(*channel_, context, method, v1::wire::SerializedMessage(request), &reply);
  if (!status.ok()) {
    absl::Status refused = ToAbslStatus(status);
    if (ReasonOf(refused) == reason::kResultTooLargeForOneMessage) return std::nullopt;
    return refused;
  }
  ResultAssembler assembler(std::move(options));
  if (absl::Status framing = assembler.AddBytes(reply); !framing.ok()) return framing;
  return std::move(assembler).Finish();
}

template <typename Request>
void Client::StartSingleMessage(const Request& request, ResultCallback done) const {
  // What the call needs until it completes; freed by its completion.
  struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer request, reply;
    ResultAssembler::Options options;
    ResultCallback done;
  };
  auto* call = new Call{
      {}, v1::wire::SerializedMessage(request), {},
      AssemblerOptions(ResultDataComesBack(request.output()), {}), std::move(done)};
  SetDeadline(call->context);
  grpc::GenericStub(channel_).UnaryCall(
      &call->context, MethodOf(request), grpc::StubOptions(), &call->request, &call->reply,
      [call](grpc::Status status) {
        std::unique_ptr<Call> owned(call);
        absl::StatusOr<Result> outcome = [&]() -> absl::StatusOr<Result> {
          if (!status.ok()) return ToAbslStatus(status);
          ResultAssembler assembler(std::move(owned->options));
          GC_RETURN_IF_ERROR(assembler.AddBytes(owned->reply));
          return std::move(assembler).Finish();
        }();
        ResultCallback done = std::move(owned->done);
        // Freed before `done` runs: the context holds a reference to the channel, and a
        // caller told of the end may drop its own. Were the context's the last, the
        // channel would close on this gRPC thread, and gRPC 1.51 then deletes the
        // callback queue this thread is polling (a segfault in a nexting_thread).
        owned.reset();
        std::move(done)(std::move(outcome));
      });
}

template void Client::StartSingleMessage(const v1::DiscountProductRequest&, ResultCallback) const;
template void Client::StartSingleMessage(const v1::HaversineGridRequest&, ResultCallback) const;
template void Client::StartSingleMessage(const v1::NormalizeRequest&, ResultCallback) const;
template void Client::StartSingleMessage(const v1::LombScargleRequest&, ResultCallback) const;

template <typename Request>
absl::StatusOr<Result> Client::Compute(const std::string& method, const Request& request,
                                       const ProgressCallback& progress) const {
  const bool streamed = ResultDataComesBack(request.output());
  if (request.output().single_message()) {
    std::optional<absl::StatusOr<Result>> one =
        SingleMessage(method, request, AssemblerOptions(streamed, progress));
    if (one.has_value()) return *std::move(one);
    Request as_stream = request;
    as_stream.mutable_output()->set_single_message(false);
    return ResultStream(method, as_stream, AssemblerOptions(streamed, progress));
  }
  return ResultStream(method, request, AssemblerOptions(streamed, progress));
}

absl::StatusOr<Result> Client::DiscountProduct(const v1::DiscountProductRequest& request,
                                               const ProgressCallback& progress) {
  return Compute(discount_product_method_, request, progress);
}

absl::StatusOr<Result> Client::HaversineGrid(const v1::HaversineGridRequest& request,
                                             const ProgressCallback& progress) {
  return Compute(haversine_grid_method_, request, progress);
}

absl::StatusOr<Result> Client::Normalize(const v1::NormalizeRequest& request,
                                         const ProgressCallback& progress) {
  return Compute(normalize_method_, request, progress);
}

absl::StatusOr<Result> Client::LombScargle(const v1::LombScargleRequest& request,
                                           const ProgressCallback& progress) {
  return Compute(lomb_scargle_method_, request, progress);
}

}  // namespace gpucompute::client
