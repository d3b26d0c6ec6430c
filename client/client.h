// C++ client for the gpucompute server (API v1).
//
//   auto channel = gpucompute::client::MakeChannel("localhost:50051");
//   gpucompute::client::Client client(channel);
//   v1::NormalizeRequest request;
//   *request.mutable_input() = TensorOperand(*MakeTensor(values, shape));
//   absl::StatusOr<Result> result = client.Normalize(request);
//
// Every method blocks until the call completes and returns absl::Status(Or).
// Server errors keep their gRPC code and message. Result streams are checked and
// reassembled by ResultAssembler (client/result.h): a broken stream is DATA_LOSS.
// A Client is safe to use from several threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/channel_args.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/result.h"
#include "client/tensor.h"
#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/status.h"

namespace gpucompute::client {

// Upload messages and StreamingCompute input chunks: 1 MiB, which moved more than
// 4 MiB messages on GPU hosts, through this client as through gRPC alone, and stays
// below every server's message limit (gRPC's default 4 MiB).
inline constexpr uint32_t kDefaultUploadChunkBytes = 1 << 20;

struct ChannelOptions {
  // gRPC's default of 4 MiB would refuse result chunks larger than that.
  int max_receive_message_bytes = 256 << 20;
  // Bounds what a single request may carry inline; -1 is unlimited.
  int max_send_message_bytes = -1;
  // Further integer channel arguments, set last (transport tuning).
  IntChannelArgs int_arguments;
};

// An insecure channel to `target` ("host:port", "unix:/path", ...).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const ChannelOptions& options = {});
// `count` channels to `target`, each with its own connection (gRPC shares one
// between channels of equal arguments): for ClientOptions::stripe_channels.
std::vector<std::shared_ptr<grpc::Channel>> MakeStripeChannels(const std::string& target,
                                                               int count,
                                                               const ChannelOptions& options = {});

// The same code and message.
absl::Status ToAbslStatus(const grpc::Status& status);

struct ClientOptions {
  // Deadline of each call (the whole stream for streaming calls).
  absl::Duration timeout = absl::InfiniteDuration();
  // Size of the data messages Upload sends.
  uint32_t upload_chunk_bytes = kDefaultUploadChunkBytes;
  // Results declaring more bytes than this fail with RESOURCE_EXHAUSTED.
  uint64_t max_result_bytes = uint64_t{16} << 30;
  // Striping: a Download larger than stripe_bytes runs as ranged Downloads of
  // stripe_bytes each, `stripes` at a time, reassembled by offset in place. A
  // range that fails with UNAVAILABLE (a broken connection) is fetched again, at
  // most stripe_retries times; any other failure cancels the rest. An Upload
  // larger than stripe_bytes goes the same way into a resumable upload
  // (UploadHeader.session_token, a random token): a range whose stream breaks is
  // resumed by sending only the bytes UploadStatus does not list.
  int stripes = 1;
  uint64_t stripe_bytes = uint64_t{64} << 20;
  int stripe_retries = 2;
  // Channels the stripes spread over, round robin (with the client's own first);
  // empty: all on the client's channel (one connection).
  std::vector<std::shared_ptr<grpc::Channel>> stripe_channels;
};

class Client {
 public:
  explicit Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options = {});

  // grpc.health.v1.Health/Check; "" asks about the server as a whole.
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Health(
      const std::string& service = "");
  absl::StatusOr<v1::ServerInfo> GetInfo();
  // The channel the client's calls go on (a Session may share it).
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // Stores `data` (dtype, shape; little-endian, C order) as a buffer on the
  // server, streamed in ClientOptions::upload_chunk_bytes messages.
  absl::StatusOr<v1::BufferInfo> Upload(const std::string& name, v1::DType dtype,
                                        std::span<const int64_t> shape, absl::string_view data,
                                        const ProgressCallback& progress = {});
  absl::StatusOr<v1::BufferInfo> Upload(const std::string& name, const v1::Tensor& tensor,
                                        const ProgressCallback& progress = {});
  // chunk_bytes 0 lets the server pick its default.
  absl::StatusOr<Result> Download(const std::string& buffer_id, uint32_t chunk_bytes = 0,
                                  const ProgressCallback& progress = {});
  // The same, the bytes written where `destination` says (Result::data stays empty).
  absl::StatusOr<Result> DownloadTo(const std::string& buffer_id,
                                    const ResultDestination& destination,
                                    uint32_t chunk_bytes = 0,
                                    const ProgressCallback& progress = {});
  // The byte ranges a resumable upload (UploadHeader.session_token) has received.
  absl::StatusOr<v1::UploadStatusResponse> UploadStatus(const std::string& session_token) const;
  // Returns the bytes freed.
  absl::StatusOr<uint64_t> Delete(const std::string& buffer_id);
  // Every buffer of the caller, following List's pages.
  absl::StatusOr<v1::ListResponse> List();

  // Same host (client/shared_memory.h): registers `byte_size` bytes from byte
  // `offset` of the POSIX shared-memory object `key`; unregistering answers once no
  // request uses the region.
  absl::StatusOr<v1::SharedMemoryRegionInfo> RegisterSystemSharedMemory(const std::string& name,
                                                                        const std::string& key,
                                                                        uint64_t offset,
                                                                        uint64_t byte_size);
  absl::StatusOr<uint64_t> UnregisterSharedMemory(const std::string& region_id);
  absl::StatusOr<v1::SharedMemoryStatusResponse> SharedMemoryStatus();

  // The compute operations. With request.output().keep_on_device() the Result
  // has no data and trailer.stored_buffer() describes the stored result; with
  // request.output().shared_memory() it has no data either: the result is there.
  absl::StatusOr<Result> DiscountProduct(const v1::DiscountProductRequest& request,
                                         const ProgressCallback& progress = {});
  absl::StatusOr<Result> HaversineGrid(const v1::HaversineGridRequest& request,
                                       const ProgressCallback& progress = {});
  absl::StatusOr<Result> Normalize(const v1::NormalizeRequest& request,
                                   const ProgressCallback& progress = {});
  absl::StatusOr<Result> LombScargle(const v1::LombScargleRequest& request,
                                     const ProgressCallback& progress = {});

  // The callback form of a compute call whose request sets output.single_message,
  // for load generators (many calls in flight, no thread each): starts the call on
  // gRPC's callback API and returns; `done` runs once, on a gRPC thread, with the
  // result or the status. A refused promise (a result larger than one chunk) is
  // FAILED_PRECONDITION: nothing is streamed instead. Request: one of the four
  // compute requests.
  using ResultCallback = absl::AnyInvocable<void(absl::StatusOr<Result>) &&>;
  template <typename Request>
  void StartSingleMessage(const Request& request, ResultCallback done) const;

  // Compute.StreamingCompute: an element-wise operation over an input of any
  // size in one call. `header` names the operation, dtype and whole shape (and
  // the factors, references or norm); `operands` are the streamed bytes (C order,
  // header.shape): the values or the input, or lat then lon for haversine points.
  // They go out in chunks (whole rows where the operation needs them) of about
  // ClientOptions::upload_chunk_bytes
  // (gRPC sends from `operands` themselves) while the result chunks come back and
  // are written where `destination` says (unset: Result::data). The server
  // holds a bounded number of chunks; the call's memory here is the result's.
  // With ClientOptions::stripes, an input over stripe_bytes runs as up to
  // `stripes` calls at once over ranges of its leading axis where that gives the
  // same result (normalize of rank >= 2; a discount product whose factors repeat
  // along that axis), each on the next stripe channel; the trailer sums their work.
  absl::StatusOr<Result> StreamingCompute(const v1::StreamingComputeHeader& header,
                                          std::span<const absl::string_view> operands,
                                          const ResultDestination& destination = {},
                                          const ProgressCallback& progress = {});

 private:
  void SetDeadline(grpc::ClientContext& context) const;
  // One unary RPC of `stub` under the call deadline.
  template <typename Stub, typename Request, typename Response>
  absl::StatusOr<Response> Unary(
      Stub& stub,
      grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
      const Request& request) const;
  // One RPC that streams a result back, read as raw messages and reassembled
  // (data copied once, from the received slices to its place).
  absl::StatusOr<Result> ResultStream(const std::string& method,
                                      const google::protobuf::MessageLite& request,
                                      ResultAssembler::Options options,
                                      grpc::Channel* channel = nullptr) const;
  // A Compute RPC whose request sets output.single_message, read as a unary call
  // (one message, or the status); nullopt when the server refused the promise
  // (the result is larger than one chunk) or does not make it (an older server,
  // which would stream a large result into a unary read): the caller streams it.
  std::optional<absl::StatusOr<Result>> SingleMessage(const std::string& method,
                                                      const google::protobuf::MessageLite& request,
                                                      ResultAssembler::Options options) const;
  // One Compute RPC: data is expected unless the request keeps its result on the
  // device; read as a unary call when the request sets output.single_message.
  template <typename Request>
  absl::StatusOr<Result> Compute(const std::string& method, const Request& request,
                                 const ProgressCallback& progress) const;
  ResultAssembler::Options AssemblerOptions(bool expect_data,
                                            const ProgressCallback& progress) const;
  const std::string& MethodOf(const v1::DiscountProductRequest&) const {
    return discount_product_method_;
  }
  const std::string& MethodOf(const v1::HaversineGridRequest&) const {
    return haversine_grid_method_;
  }
  const std::string& MethodOf(const v1::NormalizeRequest&) const {
    return normalize_method_;
  }
  const std::string& MethodOf(const v1::LombScargleRequest&) const {
    return lomb_scargle_method_;
  }
  // Whether StreamingCompute calls over ranges of the header's leading axis give
  // the whole's result (normalize by rows; a discount product whose factors do not
  // span that axis: a stored buffer's shape is looked up with List).
  absl::StatusOr<bool> SplitsOnLeadingAxis(const v1::StreamingComputeHeader& header);
  // One StreamingCompute call on `channel` (the operands' bytes each; the result
  // placed as `options` say).
  absl::StatusOr<Result> StreamingCall(grpc::Channel& channel, grpc::ClientContext& context,
                                       const v1::StreamingComputeHeader& header,
                                       std::span<const absl::string_view> operands,
                                       uint64_t operand_bytes,
                                       ResultAssembler::Options options) const;
  // `calls` StreamingCompute calls at once over equal ranges of the leading axis,
  // on the stripe channels round robin; a call failing with UNAVAILABLE runs again
  // (at most stripe_retries times), any other failure cancels the others.
  absl::StatusOr<Result> StripedStreamingCompute(const v1::StreamingComputeHeader& header,
                                                 std::span<const absl::string_view> operands,
                                                 uint64_t calls,
                                                 const ResultDestination& destination,
                                                 const ProgressCallback& progress);
  // One Upload stream on `channel` carrying `header` and then `data`.
  absl::StatusOr<v1::BufferInfo> UploadStream(grpc::Channel& channel,
                                              const v1::UploadHeader& header,
                                              absl::string_view data,
                                              const ProgressCallback& progress) const;
  // Upload by ranges on several streams into one resumable upload.
  absl::StatusOr<v1::BufferInfo> StripedUpload(v1::UploadHeader header, absl::string_view data,
                                               const ProgressCallback& progress);
  // One range of a resumable upload, sent again where a broken stream left gaps.
  absl::StatusOr<v1::BufferInfo> UploadRange(grpc::Channel& channel, v1::UploadHeader header,
                                             absl::string_view data, uint64_t begin,
                                             uint64_t end) const;
  // The upload's received ranges within [begin, end): what still has to be sent.
  absl::StatusOr<std::vector<std::pair<uint64_t, uint64_t>>> MissingRanges(
      const std::string& token, uint64_t begin, uint64_t end) const;
  // Download by ranges on several streams (ClientOptions::stripes).
  absl::StatusOr<Result> StripedDownload(const std::string& buffer_id,
                                         const ResultDestination& destination,
                                         uint32_t chunk_bytes, const ProgressCallback& progress);
  // One ranged Download into `destination` (the whole result's memory), on
  // `channel`, retried on UNAVAILABLE.
  absl::Status DownloadRange(grpc::Channel& channel, const v1::DownloadRequest& request,
                             uint64_t total_bytes, char* destination) const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  // The bulk methods, called with raw bytes (client/raw_call.h).
  const std::string upload_method_ = "/gpucompute.v1.Buffers/Upload";
  const std::string download_method_ = "/gpucompute.v1.Buffers/Download";
  const std::string discount_product_method_ = "/gpucompute.v1.Compute/DiscountProduct";
  const std::string haversine_grid_method_ = "/gpucompute.v1.Compute/HaversineGrid";
  const std::string normalize_method_ = "/gpucompute.v1.Compute/Normalize";
  const std::string lomb_scargle_method_ = "/gpucompute.v1.Compute/LombScargle";
  const std::string streaming_compute_method_ = "/gpucompute.v1.Compute/StreamingCompute";
  std::unique_ptr<v1::Buffers::Stub> buffers_;
  std::unique_ptr<v1::Server::Stub> server_;
  std::unique_ptr<v1::SharedMemory::Stub> shared_memory_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  // Whether the server honours OutputOptions.single_message (ServerInfo.limits),
  // asked at the first request that sets it: -1 not known yet, else 0 or 1.
  mutable std::atomic<int> single_message_results_{-1};
};

}  // namespace gpucompute::client
