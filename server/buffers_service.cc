#include "server/buffers_service.h"

#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/proto_convert.h"
#include "server/result_stream.h"
#include "server/security.h"
#include "server/status_convert.h"

namespace gpucompute {
namespace {

// Receives header then data chunks; allocation and copies run on the executor,
// and the next read starts only after the previous chunk is copied. The buffer
// becomes visible (Commit) only once every declared byte has arrived.
class UploadReactor final : public grpc::ServerReadReactor<v1::UploadRequest> {
 public:
  UploadReactor(ServiceContext& service, grpc::CallbackServerContext* context,
                v1::BufferInfo* response)
      : service_(service), context_(context), response_(response),
        rpc_(service.metrics, RpcMethod::kUpload) {
    service_.metrics.AddInFlight(Operation::kUpload, 1);
    absl::StatusOr<Admission::Ticket> ticket = service_.Admit(*context);
    if (!ticket.ok()) {
      Complete(ticket.status());
      return;
    }
    ticket_ = *std::move(ticket);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      EndOfStream();
      return;
    }
    switch (request_.kind_case()) {
      case v1::UploadRequest::kHeader:
        OnHeader();
        return;
      case v1::UploadRequest::kData:
        OnData();
        return;
      case v1::UploadRequest::KIND_NOT_SET:
        break;
    }
    Complete(absl::InvalidArgumentError(absl::StrCat(
        "upload message ", messages_, " has neither header nor data")));
  }

  void OnDone() override { delete this; }

 private:
  void OnHeader() {
    ++messages_;
    // Once the allocation is submitted, the executor may finish the call: only
    // the returned status is looked at afterwards.
    if (absl::Status accepted = AcceptHeader(); !accepted.ok()) Complete(accepted);
  }

  // Checks the header, reserves its bytes and allocates the buffer on the
  // executor, which then reads the first data message.
  absl::Status AcceptHeader() {
    if (array_ != nullptr || reservation_.has_value()) {
      return absl::InvalidArgumentError("upload sent a second header; send exactly one, first");
    }
    const v1::UploadHeader& header = request_.header();
    GC_ASSIGN_OR_RETURN(const DType dtype, DTypeFromProto(header.dtype(), "header.dtype"));
    Shape shape(header.shape().begin(), header.shape().end());
    GC_ASSIGN_OR_RETURN(const int64_t count,
                        CheckedElementCount(shape, service_.config.max_elements, "header"));
    if (count == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "header.shape ", ShapeToString(shape), " is empty; buffers need >= 1 element"));
    }
    GC_RETURN_IF_ERROR(CheckBufferName(header.name(), "header.name"));
    expected_bytes_ = static_cast<uint64_t>(count) * ElementSize(dtype);
    GC_ASSIGN_OR_RETURN(reservation_, service_.Reserve(expected_bytes_,
                                                       absl::StrCat("upload '", header.name(), "'"),
                                                       PrincipalOf(*context_)));
    name_ = header.name();
    return service_.SubmitRequest([this, dtype, shape = std::move(shape)]() mutable {
      absl::StatusOr<std::shared_ptr<Array>> array =
          service_.backend.Allocate(dtype, std::move(shape), service_.backend.PickDevice());
      if (!array.ok()) return Complete(array.status());
      array_ = *std::move(array);
      StartRead(&request_);
    });
  }

  void OnData() {
    ++messages_;
    if (array_ == nullptr) {
      return Complete(absl::InvalidArgumentError(
          "upload sent data before the header; the first message must be the header"));
    }
    const uint64_t n = request_.data().size();
    if (n > expected_bytes_ - received_bytes_) {
      return Complete(absl::InvalidArgumentError(absl::StrCat(
          "upload data exceeds the declared size: ", received_bytes_ + n, " bytes received, header declares ",
          expected_bytes_)));
    }
    service_.executor.SubmitContinuation([this, n] {
      const absl::Time start = absl::Now();
      absl::Status copied =
          service_.backend.CopyToArray(request_.data().data(), received_bytes_, n, *array_);
      if (!copied.ok()) return Complete(copied);
      const absl::Duration elapsed = absl::Now() - start;
      transfer_in_ += elapsed;
      service_.metrics.Transferred(Direction::kHostToDevice, n, elapsed);
      service_.metrics.NetworkReceived(n);
      received_bytes_ += n;
      StartRead(&request_);
    });
  }

  void EndOfStream() { Complete(Store()); }

  // Makes the complete buffer visible and describes it in the response.
  absl::Status Store() {
    if (context_->IsCancelled()) {
      return absl::CancelledError("upload cancelled by the client");
    }
    if (array_ == nullptr) {
      return absl::InvalidArgumentError("upload ended before a header was sent");
    }
    if (received_bytes_ != expected_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "upload ended after ", received_bytes_, " of ", expected_bytes_, " declared bytes"));
    }
    GC_ASSIGN_OR_RETURN(
        const StoredBuffer stored,
        service_.store.Commit(*std::exchange(reservation_, std::nullopt), name_, array_));
    ToBufferInfo(stored, response_);
    service_.metrics.ObserveStage(Operation::kUpload, Stage::kTransferIn, transfer_in_);
    return absl::OkStatus();
  }

  void Complete(const absl::Status& status) {
    // Nothing half-stored survives a failed upload, and the quota and memory are
    // back before the client hears the status.
    reservation_.reset();
    array_.reset();
    ticket_ = Admission::Ticket();
    const grpc::Status grpc_status = ToGrpcStatus(status);
    rpc_.Done(grpc_status.error_code());
    service_.metrics.RequestDone(Operation::kUpload, grpc_status.error_code(),
                                 absl::Now() - rpc_.start());
    service_.metrics.AddInFlight(Operation::kUpload, -1);
    Finish(grpc_status);
  }

  ServiceContext& service_;
  grpc::CallbackServerContext* const context_;
  v1::BufferInfo* const response_;
  RpcRecorder rpc_;
  Admission::Ticket ticket_;
  v1::UploadRequest request_;
  std::optional<BufferStore::Reservation> reservation_;
  std::shared_ptr<Array> array_;
  std::string name_;
  uint64_t expected_bytes_ = 0;
  uint64_t received_bytes_ = 0;
  uint64_t messages_ = 0;
  absl::Duration transfer_in_ = absl::ZeroDuration();
};

// A Download that passed admission: the stored array it streams.
struct AcceptedDownload {
  ResultStreamReactor::Output output;
  std::shared_ptr<Array> array;
};

absl::StatusOr<AcceptedDownload> AcceptDownload(ServiceContext& service,
                                                const grpc::CallbackServerContext& context,
                                                const v1::DownloadRequest& request) {
  AcceptedDownload accepted;
  GC_ASSIGN_OR_RETURN(accepted.output,
                      AdmitStream(service, context, request.chunk_bytes(), "chunk_bytes"));
  GC_ASSIGN_OR_RETURN(StoredBuffer buffer,
                      service.store.Get(request.buffer_id(), "buffer_id", PrincipalOf(context)));
  accepted.array = std::move(buffer.array);
  return accepted;
}

}  // namespace

grpc::ServerReadReactor<v1::UploadRequest>* BuffersService::Upload(
    grpc::CallbackServerContext* context, v1::BufferInfo* response) {
  return new UploadReactor(service_, context, response);
}

grpc::ServerWriteReactor<v1::ResultChunk>* BuffersService::Download(
    grpc::CallbackServerContext* context, const v1::DownloadRequest* request) {
  auto* reactor = new ResultStreamReactor(service_, context, Operation::kDownload);
  const absl::Time start = absl::Now();
  absl::StatusOr<AcceptedDownload> accepted = AcceptDownload(service_, *context, *request);
  if (!accepted.ok()) {
    reactor->Reject(accepted.status());
    return reactor;
  }
  reactor->Start(std::move(accepted->output), absl::Now() - start,
                 [array = std::move(accepted->array)](
                     OpContext&) -> absl::StatusOr<StreamSource> {
                   StreamSource source;
                   source.times.device = DeviceLabel(array->device());
                   source.array = array;
                   return source;
                 });
  return reactor;
}

grpc::ServerUnaryReactor* BuffersService::Delete(grpc::CallbackServerContext* context,
                                                 const v1::DeleteRequest* request,
                                                 v1::DeleteResponse* response) {
  RpcRecorder rpc(service_.metrics, RpcMethod::kDelete);
  absl::StatusOr<uint64_t> freed = service_.store.Delete(request->buffer_id(), PrincipalOf(*context));
  if (freed.ok()) response->set_freed_bytes(*freed);
  const grpc::Status status = ToGrpcStatus(freed.status());
  rpc.Done(status.error_code());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* BuffersService::List(grpc::CallbackServerContext* context,
                                               const v1::ListRequest*,
                                               v1::ListResponse* response) {
  RpcRecorder rpc(service_.metrics, RpcMethod::kList);
  const std::string principal = PrincipalOf(*context);
  for (const StoredBuffer& buffer : service_.store.List(principal)) {
    ToBufferInfo(buffer, response->add_buffers());
  }
  response->set_used_bytes(service_.store.used_bytes(principal));
  response->set_quota_bytes(service_.store.quota_bytes());
  rpc.Done(grpc::OK);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace gpucompute
