#include "server/buffers_service.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "gpucompute/v1/bulk_wire.h"
#include "server/echo.h"
#include "server/proto_convert.h"
#include "server/result_stream.h"
#include "server/security.h"
#include "server/status_convert.h"

namespace gpucompute {
namespace {

// Receives header then data chunks; allocation and copies run on the executor.
// Chunk k is copied while chunk k + 1 arrives: one copy and one received chunk
// at most are held, so the next read starts once chunk k + 1 can take the copy
// slot. Finish waits for the copy in flight (it uses this reactor). The buffer
// becomes visible (Commit) only once every declared byte has arrived. The call is
// admitted (counted in flight) only once its header arrives, and each read waits
// at most stream_idle_timeout: a silent client holds no place and no quota.
// With header.session_token the stream writes into a resumable upload's buffer
// (resumable_uploads.h) from header.offset on, and stores it if it ends complete.
class UploadReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
  // A received data message: its slices and where its payload goes.
  struct Chunk {
    v1::wire::MessageBytes message;
    v1::wire::DataPayload data;
    uint64_t at = 0;  // byte offset in the array
  };

 public:
  UploadReactor(ServiceContext& service, Timer& idle_timer, ResumableUploads& uploads,
                grpc::CallbackServerContext* context, grpc::ByteBuffer* response)
      : service_(service), idle_timer_(idle_timer), uploads_(uploads), context_(context),
        response_(response),
        rpc_(service.metrics, RpcMethod::kUpload, *context) {
    service_.metrics.AddInFlight(Operation::kUpload, 1);
    Read();
  }

  void OnReadDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      if (!Disarm()) return;  // the idle timeout, or a finishing copy, took the read
      reading_ = false;
      if (final_status_.has_value()) return;  // finishing once the copy is done
      if (!ok && copying_) {
        ended_ = true;  // stored once the copy in flight is done
        return;
      }
    }
    if (!ok) {
      EndOfStream();
      return;
    }
    ++messages_;
    // Data messages are located within the received slices and copied from there
    // once, into the array; anything else goes through the generated parser.
    v1::wire::MessageBytes message(bytes_);
    if (std::optional<v1::wire::DataPayload> data = v1::wire::FindUploadData(message)) {
      OnData(std::move(message), *data);
      return;
    }
    absl::StatusOr<v1::UploadRequest> request =
        ParseRequest<v1::UploadRequest>(bytes_, absl::StrCat("upload message ", messages_));
    if (!request.ok()) return Complete(request.status());
    request_ = *std::move(request);
    switch (request_.kind_case()) {
      case v1::UploadRequest::kHeader:
        OnHeader();
        return;
      case v1::UploadRequest::kData: {
        // A valid data message in another layout (e.g. with unknown fields): the
        // parsed copy is the payload.
        grpc::Slice slice(request_.data());
        grpc::ByteBuffer payload(&slice, 1);
        OnData(v1::wire::MessageBytes(payload), {.start = 0, .size = request_.data().size()});
        return;
      }
      case v1::UploadRequest::KIND_NOT_SET:
        break;
    }
    Complete(absl::InvalidArgumentError(absl::StrCat(
        "upload message ", messages_, " has neither header nor data")));
  }

  void OnDone() override { delete this; }

 private:
  // Starts the next read and the idle timeout that races it. The timeout may
  // fire after this reactor is gone: it holds the pending-read marker, not the
  // reactor, and touches the reactor only when it takes the marker, which can
  // happen only while the read is pending, hence before Finish.
  void Read() {
    {
      // Under mu_: a finishing copy sees the read and its marker together.
      absl::MutexLock lock(&mu_);
      reading_ = true;
      uint64_t generation = ++reads_;
      pending_read_->store(generation);
      idle_alarm_ = idle_timer_.Schedule(
          absl::Now() + service_.config.stream_idle_timeout,
          [this, pending = pending_read_, generation]() mutable {
            if (pending->compare_exchange_strong(generation, 0)) OnIdle();
          });
    }
    StartRead(&bytes_);
  }

  // False when the idle timeout took the pending read (and finishes the call),
  // or a finishing copy did.
  bool Disarm() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (pending_read_->exchange(0) == 0) return false;
    idle_timer_.Cancel(idle_alarm_);
    return true;
  }

  void OnIdle() {
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
    }
    service_.metrics.Rejected(Rejection::kStreamIdle);
    Complete(absl::DeadlineExceededError(absl::StrCat(
        "upload received no message for ", absl::FormatDuration(service_.config.stream_idle_timeout),
        " (stream_idle_timeout); the stream is closed and its reservation freed")));
  }

  void OnHeader() {
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
    GC_ASSIGN_OR_RETURN(ticket_, service_.AdmitClientStream(*context_));
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
    if (!header.session_token().empty()) {
      return AcceptSessionHeader(header, dtype, std::move(shape), expected_bytes_);
    }
    GC_ASSIGN_OR_RETURN(reservation_, service_.Reserve(expected_bytes_,
                                                       absl::StrCat("upload ", QuoteClientString(header.name())),
                                                       PrincipalOf(*context_), header.name()));
    name_ = header.name();
    // Allocate may wait up to --memory_budget_wait for the budget (and a device
    // allocation may synchronize), so it cannot run inline on a gRPC thread; it
    // queues in the general lane, whose bound is apart from the small lane's, so
    // that uploads retrying on RESOURCE_EXHAUSTED cannot refuse small requests.
    return service_.SubmitRequest([this, dtype, shape = std::move(shape)](absl::Status admitted) mutable {
      if (!admitted.ok()) return Complete(admitted);
      absl::StatusOr<std::shared_ptr<Array>> array =
          service_.backend.Allocate(dtype, std::move(shape), service_.backend.PickDevice());
      if (!array.ok()) return Complete(array.status());
      array_ = *std::move(array);
      Read();
    }, *context_, Executor::Lane::kGeneral);
  }

  // This stream writes [offset, end) of the upload's buffer; the upload is
  // created (reserved, allocated on the executor) by the first stream naming it.
  absl::Status AcceptSessionHeader(const v1::UploadHeader& header, DType dtype, Shape shape,
                                   uint64_t bytes) {
    const std::string& token = header.session_token();
    if (token.size() < kMinUploadTokenBytes || token.size() > kMaxUploadTokenBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "header.session_token has ", token.size(), " bytes; it must have ",
          kMinUploadTokenBytes, " to ", kMaxUploadTokenBytes));
    }
    if (header.offset() > bytes) {
      return absl::OutOfRangeError(absl::StrCat("header.offset ", header.offset(),
                                                " lies past the declared ", bytes, " bytes"));
    }
    base_offset_ = header.offset();
    expected_bytes_ = bytes - header.offset();
    std::string principal = PrincipalOf(*context_);
    upload_ = uploads_.Attach(principal, token);
    if (upload_ != nullptr) {
      const Array& array = *upload_->array();
      if (array.dtype() != dtype || array.shape() != shape || upload_->name() != header.name()) {
        return absl::InvalidArgumentError(
            "header differs from the upload session's first header (name, dtype or shape)");
      }
      array_ = upload_->array();
      Read();
      return absl::OkStatus();
    }
    GC_ASSIGN_OR_RETURN(
        BufferStore::Reservation reservation,
        service_.Reserve(bytes, absl::StrCat("upload ", QuoteClientString(header.name())),
                         principal, header.name()));
    return service_.SubmitRequest(
        [this, dtype, shape = std::move(shape), reservation = std::move(reservation),
         principal = std::move(principal), token,
         name = header.name()](absl::Status admitted) mutable {
          if (!admitted.ok()) return Complete(admitted);
          absl::StatusOr<std::shared_ptr<Array>> array =
              service_.backend.Allocate(dtype, std::move(shape), service_.backend.PickDevice());
          if (!array.ok()) return Complete(array.status());
          auto upload = std::make_shared<ResumableUpload>(
              std::move(principal), std::move(token), std::move(name), std::move(reservation),
              *std::move(array));
          if (absl::Status added = uploads_.Add(upload); !added.ok()) return Complete(added);
          upload_ = std::move(upload);
          array_ = upload_->array();
          Read();
        },
        *context_, Executor::Lane::kGeneral);
  }

  void OnData(v1::wire::MessageBytes message, v1::wire::DataPayload data) {
    if (array_ == nullptr) {
      return Complete(absl::InvalidArgumentError(
          "upload sent data before the header; the first message must be the header"));
    }
    const uint64_t n = data.size;
    if (n > expected_bytes_ - accepted_bytes_) {
      return Complete(absl::InvalidArgumentError(absl::StrCat(
          "upload data exceeds the declared size: ", accepted_bytes_ + n, " bytes received, header declares ",
          expected_bytes_)));
    }
    Chunk chunk{std::move(message), data, base_offset_ + accepted_bytes_};
    accepted_bytes_ += n;
    {
      absl::MutexLock lock(&mu_);
      if (copying_) {
        waiting_ = std::move(chunk);  // the copy in flight takes it, then reads on
        return;
      }
      copying_ = true;
    }
    // The next chunk arrives while this one is copied.
    Read();
    service_.executor.SubmitContinuation(
        [this, chunk = std::move(chunk)]() mutable { CopyChunks(std::move(chunk)); });
  }

  // On the executor: copies `chunk`, then any chunk that arrived meanwhile; then
  // stores the buffer if the stream ended, or finishes a call that failed.
  void CopyChunks(Chunk chunk) {
    while (true) {
      const absl::Time start = absl::Now();
      std::vector<HostPiece> pieces;
      chunk.message.ForEachPiece(chunk.data.start, chunk.data.size,
                                 [&pieces](const char* piece, uint64_t length) {
                                   pieces.push_back({piece, length});
                                 });
      const uint64_t n = chunk.data.size;
      absl::Status copied = upload_ != nullptr ? upload_->BeginWrite() : absl::OkStatus();
      if (copied.ok()) {
        copied = service_.backend.CopyPiecesToArray(pieces, chunk.at, *array_);
        if (upload_ != nullptr) upload_->EndWrite(chunk.at, chunk.at + n, copied.ok());
      }
      if (copied.ok()) {
        const absl::Duration elapsed = absl::Now() - start;
        transfer_in_ += elapsed;
        service_.metrics.Transferred(Direction::kHostToDevice, n, elapsed);
        service_.metrics.NetworkReceived(n);
        received_bytes_ += n;
      }
      absl::ReleasableMutexLock lock(&mu_);
      if (!copied.ok() && !final_status_.has_value()) final_status_ = copied;
      if (!final_status_.has_value() && waiting_.has_value()) {
        chunk = *std::exchange(waiting_, std::nullopt);
        lock.Release();
        Read();  // none was started while the chunk waited
        continue;
      }
      copying_ = false;
      waiting_.reset();
      if (final_status_.has_value()) {
        // A pending read is taken from its idle alarm first; if the alarm took
        // it, OnIdle's Complete finishes the call.
        if (reading_ && !Disarm()) return;
        const absl::Status status = *final_status_;
        lock.Release();
        return Finalize(status);
      }
      const bool ended = ended_;
      lock.Release();
      if (ended) EndOfStream();
      return;
    }
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
    if (upload_ != nullptr) return StoreResumable();
    if (received_bytes_ != expected_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "upload ended after ", received_bytes_, " of ", expected_bytes_, " declared bytes"));
    }
    GC_ASSIGN_OR_RETURN(
        const StoredBuffer stored,
        service_.store.Commit(*std::exchange(reservation_, std::nullopt), name_, array_));
    ToBufferInfo(stored, &info_);
    service_.metrics.ObserveStage(Operation::kUpload, Stage::kTransferIn, transfer_in_);
    return absl::OkStatus();
  }

  // A resumable upload's stream may end before the whole buffer is there: only the stream
  // that ends with every byte received stores it.
  absl::Status StoreResumable() {
    GC_ASSIGN_OR_RETURN(std::optional<BufferStore::Reservation> reservation,
                        upload_->TakeIfComplete());
    if (!reservation.has_value()) {
      info_.set_name(upload_->name());  // no id: not stored yet
      return absl::OkStatus();
    }
    GC_ASSIGN_OR_RETURN(const StoredBuffer stored,
                        service_.store.Commit(*std::move(reservation), upload_->name(), array_));
    uploads_.Remove(*upload_);
    ToBufferInfo(stored, &info_);
    service_.metrics.ObserveStage(Operation::kUpload, Stage::kTransferIn, transfer_in_);
    return absl::OkStatus();
  }

  // Finishes the call with `status`, once no copy is in flight (the copy then
  // finishes it).
  void Complete(const absl::Status& status) {
    absl::Status first;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      if (!final_status_.has_value()) final_status_ = status;
      if (copying_) return;
      first = *final_status_;
    }
    Finalize(first);
  }

  void Finalize(const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (std::exchange(finished_, true)) return;
    }
    // Nothing half-stored survives a failed upload, and the quota and memory are
    // back before the client hears the status; a resumable upload keeps what arrived
    // until it is resumed or expires.
    if (upload_ != nullptr) uploads_.Detach(std::exchange(upload_, nullptr));
    reservation_.reset();
    array_.reset();
    ticket_ = Admission::Ticket();
    const grpc::Status grpc_status = ToGrpcStatus(status);
    service_.metrics.RequestDone(Operation::kUpload, rpc_.Done(grpc_status.error_code()),
                                 absl::Now() - rpc_.start());
    service_.metrics.AddInFlight(Operation::kUpload, -1);
    Finish(AnswerWith(grpc_status, info_, response_));
  }

  ServiceContext& service_;
  Timer& idle_timer_;
  ResumableUploads& uploads_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_;
  v1::BufferInfo info_;  // the response, serialized into response_ as the call finishes
  RpcRecorder rpc_;
  Admission::Ticket ticket_;
  grpc::ByteBuffer bytes_;
  v1::UploadRequest request_;
  std::optional<BufferStore::Reservation> reservation_;
  std::shared_ptr<Array> array_;
  std::shared_ptr<ResumableUpload> upload_;  // set for a resumable upload
  uint64_t base_offset_ = 0;                // where this stream's data starts
  std::string name_;
  uint64_t expected_bytes_ = 0;
  uint64_t accepted_bytes_ = 0;  // handed to copies
  uint64_t received_bytes_ = 0;  // copied into the array
  uint64_t messages_ = 0;  // received so far, the one being handled included
  absl::Duration transfer_in_ = absl::ZeroDuration();
  // The number of the read in flight, 0 while none is: whoever swaps it to 0,
  // the read's completion or its idle timeout, carries the call on.
  std::shared_ptr<std::atomic<uint64_t>> pending_read_ =
      std::make_shared<std::atomic<uint64_t>>(0);
  uint64_t reads_ = 0;
  Timer::Id idle_alarm_ = 0;

  // The copy pipeline and how the call ends (see CopyChunks and Complete).
  absl::Mutex mu_;
  bool copying_ ABSL_GUARDED_BY(mu_) = false;          // a CopyChunks is running
  std::optional<Chunk> waiting_ ABSL_GUARDED_BY(mu_);  // received, not yet copied
  bool reading_ ABSL_GUARDED_BY(mu_) = false;          // a read is pending
  bool ended_ ABSL_GUARDED_BY(mu_) = false;            // the client sent everything
  std::optional<absl::Status> final_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// A page token names the last buffer of its page by its List order key.
std::string PageToken(const StoredBuffer& last) {
  return absl::StrCat(absl::ToUnixNanos(last.created), "-", last.id);
}

absl::StatusOr<BufferStore::ListCursor> ParsePageToken(absl::string_view token) {
  const std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(token, '-');
  int64_t created_nanos = 0;
  if (!absl::SimpleAtoi(parts.first, &created_nanos) || parts.second.size() != 32) {
    return absl::InvalidArgumentError(
        "page_token is not one this server issued; pass a previous reply's next_page_token");
  }
  return BufferStore::ListCursor{absl::FromUnixNanos(created_nanos), std::string(parts.second)};
}

// A Download that passed admission: the stored array it streams, and the range.
struct AcceptedDownload {
  ResultOutput output;
  std::shared_ptr<Array> array;
  uint64_t begin = 0;
  uint64_t end = 0;
};

absl::StatusOr<AcceptedDownload> AcceptDownload(ServiceContext& service,
                                                const grpc::CallbackServerContext& context,
                                                const grpc::ByteBuffer& bytes) {
  GC_ASSIGN_OR_RETURN(const v1::DownloadRequest request, ParseRequest<v1::DownloadRequest>(bytes));
  AcceptedDownload accepted;
  GC_ASSIGN_OR_RETURN(accepted.output,
                      AdmitStream(service, context, request.chunk_bytes(), "chunk_bytes"));
  GC_ASSIGN_OR_RETURN(StoredBuffer buffer,
                      service.store.Get(request.buffer_id(), "buffer_id", PrincipalOf(context)));
  accepted.array = std::move(buffer.array);
  const uint64_t size = accepted.array->bytes();
  if (request.offset() > size) {
    return absl::OutOfRangeError(
        absl::StrCat("offset ", request.offset(), " lies past the buffer's ", size, " bytes"));
  }
  accepted.begin = request.offset();
  const uint64_t left = size - request.offset();
  accepted.end = accepted.begin + (request.length() == 0 ? left : std::min(request.length(), left));
  return accepted;
}

}  // namespace

BuffersService::BuffersService(ServiceContext& service)
    : service_(service), uploads_(service.config.upload_session_ttl) {}

grpc::ServerReadReactor<grpc::ByteBuffer>* BuffersService::Upload(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  return new UploadReactor(service_, idle_timer_, uploads_, context, response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* BuffersService::Download(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  auto* reactor = new ResultStreamReactor(service_, idle_timer_, context, Operation::kDownload,
                                          RpcMethod::kDownload);
  const absl::Time start = absl::Now();
  absl::StatusOr<AcceptedDownload> accepted = AcceptDownload(service_, *context, *request);
  if (!accepted.ok()) {
    reactor->Reject(accepted.status());
    return reactor;
  }
  reactor->Start(std::move(accepted->output), absl::Now() - start,
                 [array = std::move(accepted->array), begin = accepted->begin,
                  end = accepted->end](OpContext&) mutable -> absl::StatusOr<StreamSource> {
                   StreamSource source;
                   source.begin = begin;
                   source.end = end;
                   source.times.device = DeviceLabel(array->device());
                   // Moved, not copied: the stream alone holds the data and
                   // the quota it counts for.
                   source.array = std::move(array);
                   return source;
                 });
  return reactor;
}

grpc::ServerUnaryReactor* BuffersService::Delete(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  v1::DeleteResponse answer;
  return service_.FinishUnary(context, RpcMethod::kDelete, answer, response, [&] {
    return DeleteBuffer(*request, PrincipalOf(*context), &answer);
  });
}

grpc::ServerUnaryReactor* BuffersService::List(grpc::CallbackServerContext* context,
                                               const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* response) {
  v1::ListResponse answer;
  return service_.FinishUnary(context, RpcMethod::kList, answer, response, [&] {
    return ListPage(*request, PrincipalOf(*context), &answer);
  });
}

grpc::ServerUnaryReactor* BuffersService::UploadStatus(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  v1::UploadStatusResponse answer;
  return service_.FinishUnary(context, RpcMethod::kUploadStatus, answer, response, [&] {
    return ResumableUploadStatus(*request, PrincipalOf(*context), &answer);
  });
}

absl::Status BuffersService::DeleteBuffer(const grpc::ByteBuffer& bytes,
                                          const std::string& principal,
                                          v1::DeleteResponse* response) const {
  GC_ASSIGN_OR_RETURN(const v1::DeleteRequest request, ParseRequest<v1::DeleteRequest>(bytes));
  GC_ASSIGN_OR_RETURN(const uint64_t freed, service_.store.Delete(request.buffer_id(), principal));
  response->set_freed_bytes(freed);
  return absl::OkStatus();
}

absl::Status BuffersService::ResumableUploadStatus(const grpc::ByteBuffer& bytes,
                                                   const std::string& principal,
                                                   v1::UploadStatusResponse* response) const {
  GC_ASSIGN_OR_RETURN(const v1::UploadStatusRequest request,
                      ParseRequest<v1::UploadStatusRequest>(bytes));
  const std::shared_ptr<ResumableUpload> upload = uploads_.Find(principal, request.session_token());
  if (upload == nullptr) {
    return WithReason(absl::NotFoundError("session_token names no upload session of the caller "
                                          "(never started, stored, or expired)"),
                      reason::kUploadSessionNotFound, {{"field", "session_token"}});
  }
  response->set_total_bytes(upload->array()->bytes());
  for (const auto& [offset, length] : upload->ReceivedRanges()) {
    v1::UploadedRange* range = response->add_received();
    range->set_offset(offset);
    range->set_length(length);
  }
  return absl::OkStatus();
}

absl::Status BuffersService::ListPage(const grpc::ByteBuffer& bytes, const std::string& principal,
                                      v1::ListResponse* response) const {
  GC_ASSIGN_OR_RETURN(const v1::ListRequest request, ParseRequest<v1::ListRequest>(bytes));
  std::optional<BufferStore::ListCursor> after;
  if (!request.page_token().empty()) {
    GC_ASSIGN_OR_RETURN(after, ParsePageToken(request.page_token()));
  }
  const size_t page_size =
      request.page_size() == 0 ? kMaxListPageSize : std::min(request.page_size(), kMaxListPageSize);
  // One more than the page: whether another page follows.
  std::vector<StoredBuffer> buffers =
      service_.store.List(principal, after.has_value() ? &*after : nullptr, page_size + 1);
  if (buffers.size() > page_size) {
    buffers.resize(page_size);
    response->set_next_page_token(PageToken(buffers.back()));
  }
  for (const StoredBuffer& buffer : buffers) ToBufferInfo(buffer, response->add_buffers());
  response->set_used_bytes(service_.store.used_bytes(principal));
  response->set_metadata_bytes(service_.store.metadata_bytes(principal));
  response->set_quota_bytes(service_.store.quota_bytes());
  return absl::OkStatus();
}

}  // namespace gpucompute
