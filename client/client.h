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

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/result.h"
#include "client/tensor.h"
#include "gpucompute/v1/gpucompute.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"

namespace gpucompute::client {

inline constexpr uint32_t kDefaultUploadChunkBytes = 1 << 20;

struct ChannelOptions {
  // gRPC's default of 4 MiB would refuse result chunks larger than that.
  int max_receive_message_bytes = 256 << 20;
  // Bounds what a single request may carry inline; -1 is unlimited.
  int max_send_message_bytes = -1;
};

// An insecure channel to `target` ("host:port", "unix:/path", ...).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
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
};

class Client {
 public:
  explicit Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options = {});

  // grpc.health.v1.Health/Check; "" asks about the server as a whole.
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Health(
      const std::string& service = "");
  absl::StatusOr<v1::ServerInfo> GetInfo();

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

 private:
  void SetDeadline(grpc::ClientContext& context) const;
  // One unary RPC of `stub` under the call deadline.
  template <typename Stub, typename Request, typename Response>
  absl::StatusOr<Response> Unary(
      Stub& stub,
      grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
      const Request& request) const;
  // One RPC of `stub` that streams a result back, reassembled.
  template <typename Stub, typename Request>
  absl::StatusOr<Result> ResultStream(
      Stub& stub,
      std::unique_ptr<grpc::ClientReader<v1::ResultChunk>> (Stub::*rpc)(grpc::ClientContext*,
                                                                          const Request&),
      const Request& request, bool expect_data, const ProgressCallback& progress) const;
  absl::StatusOr<Result> ReadResultStream(grpc::ClientContext& context,
                                          grpc::ClientReaderInterface<v1::ResultChunk>& reader,
                                          bool expect_data, const ProgressCallback& progress) const;
  // One Compute RPC: data is expected unless the request keeps its result on the device.
  template <typename Request>
  absl::StatusOr<Result> Compute(
      std::unique_ptr<grpc::ClientReader<v1::ResultChunk>> (v1::Compute::Stub::*rpc)(
          grpc::ClientContext*, const Request&),
      const Request& request, const ProgressCallback& progress);

  ClientOptions options_;
  std::unique_ptr<v1::Compute::Stub> compute_;
  std::unique_ptr<v1::Buffers::Stub> buffers_;
  std::unique_ptr<v1::Server::Stub> server_;
  std::unique_ptr<v1::SharedMemory::Stub> shared_memory_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace gpucompute::client
