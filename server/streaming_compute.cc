#include "server/streaming_compute.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "gpucompute/v1/bulk_wire.h"
#include "kernels/memory/memory_budget.h"
#include "server/chunk_memory.h"
#include "server/proto_convert.h"
#include "server/request_parse.h"
#include "server/security.h"
#include "server/shared_memory_service.h"
#include "server/status_convert.h"
#include "server/streaming_plan.h"

namespace gpucompute {
namespace {

uint64_t Micros(absl::Duration d) { return static_cast<uint64_t>(absl::ToInt64Microseconds(d)); }

grpc::ByteBuffer ChunkMessage(const v1::ResultChunk& message) {
  return v1::wire::SerializedMessage(message);
}

class StreamingComputeReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamingComputeReactor(ServiceContext& service, Timer& idle_timer,
                          grpc::CallbackServerContext* context)
      : service_(service), idle_timer_(idle_timer), context_(context),
        rpc_(service.metrics, RpcMethod::kStreamingCompute, *context),
        host_budget_(HostMemoryBudget(service.backend)),
        max_chunks_in_flight_(service.config.streaming_chunks_in_flight) {
    service_.metrics.AddInFlight(Operation::kStreamingCompute, 1);
    {
      absl::MutexLock lock(&guard_->mu);
      guard_->reactor = this;
    }
    mu_.Lock();
    reading_ = true;
    ArmIdleAlarm(absl::Now() + service_.config.stream_idle_timeout);
    mu_.Unlock();
    StartRead(&read_bytes_);
  }

  void OnReadDone(bool ok) override {
    {
      mu_.Lock();
      reading_ = false;
      last_progress_ = absl::Now();
      if (finished_) return mu_.Unlock();
      if (!ok || Stopping()) {
        if (!ok) read_ended_ = true;
        if (!ok && header_ == nullptr) {
          Fail(absl::InvalidArgumentError("stream ended before a header; send the header first"));
        }
        return PumpAndUnlock();
      }
      handling_read_ = true;  // no other read, and no Finish, until this message is handled
      mu_.Unlock();
    }
    ++messages_;
    const absl::Status handled = header_ == nullptr ? OnHeader() : OnData();
    mu_.Lock();
    handling_read_ = false;
    if (!handled.ok()) Fail(handled);
    PumpAndUnlock();
  }

  void OnWriteDone(bool ok) override {
    mu_.Lock();
    writing_ = false;
    last_progress_ = absl::Now();
    if (in_flight_data_bytes_ > 0) service_.metrics.NetworkSent(in_flight_data_bytes_);
    if (in_flight_ends_chunk_) --chunks_in_flight_;
    in_flight_.Clear();
    if (!ok) cancelled_.store(true);  // the stream is broken
    PumpAndUnlock();
  }

  void OnCancel() override {
    cancelled_.store(true);
    mu_.Lock();
    PumpAndUnlock();
  }

  void OnDone() override {
    {
      // An idle alarm firing from now on finds no reactor.
      absl::MutexLock lock(&guard_->mu);
      guard_->reactor = nullptr;
    }
    Timer::Id alarm;
    {
      absl::MutexLock lock(&mu_);
      alarm = idle_alarm_;
    }
    idle_timer_.Cancel(alarm);
    delete this;
  }

 private:
  // The idle alarm reaches the reactor only through this, which OnDone closes; it
  // holds the call open (HoldForIdleCheck) before it lets go of the guard.
  struct Guard {
    absl::Mutex mu;
    StreamingComputeReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  void ArmIdleAlarm(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    idle_alarm_ = idle_timer_.Schedule(deadline, [guard = guard_] {
      StreamingComputeReactor* reactor;
      {
        absl::MutexLock lock(&guard->mu);
        reactor = guard->reactor;
        if (reactor == nullptr || !reactor->HoldForIdleCheck()) return;
      }
      reactor->CheckIdle();
    });
  }

  // Counts the idle check as a task, so that the call cannot finish (and OnDone
  // delete this) under it; false once the call has finished.
  bool HoldForIdleCheck() {
    absl::MutexLock lock(&mu_);
    if (finished_) return false;
    ++tasks_;
    return true;
  }

  // The client has had stream_idle_timeout to send or take a message while the
  // server waited on it (no chunk on the executor): the call ends.
  void CheckIdle() {
    const absl::Duration timeout = service_.config.stream_idle_timeout;
    mu_.Lock();
    --tasks_;  // the check's own hold; it ends with the PumpAndUnlock below
    const absl::Time now = absl::Now();
    if (Stopping() || tasks_ > 0 || now - last_progress_ < timeout) {
      // Busy on the executor: a full period from now; else from the last progress.
      if (!Stopping()) ArmIdleAlarm(tasks_ > 0 ? now + timeout : last_progress_ + timeout);
      return PumpAndUnlock();
    }
    service_.metrics.Rejected(Rejection::kStreamIdle);
    Fail(absl::DeadlineExceededError(absl::StrCat(
        "StreamingCompute: the client sent and took no message for ",
        absl::FormatDuration(timeout),
        " (stream_idle_timeout); the stream is closed and its chunks freed")));
    // A pending read does not hold the call: it finishes now. A write the client
    // does not take does: cancelling ends it (ok = false), and the call with it.
    if (writing_) {
      ++tasks_;  // TryCancel may run OnCancel right here, which must not finish yet
      mu_.Unlock();
      context_->TryCancel();
      mu_.Lock();
      --tasks_;
    }
    PumpAndUnlock();
  }

  // A received data message: the slices gRPC holds, referenced until copied in.
  struct Chunk {
    uint64_t sequence = 0;
    int64_t first_row = 0;
    int64_t rows = 0;
    v1::wire::MessageBytes message;
    v1::wire::DataPayload payload;
    MemoryBudget::Charge charge;  // the received bytes, while held
  };
  struct Outgoing {
    grpc::ByteBuffer message;
    uint64_t data_bytes = 0;
    bool ends_chunk = false;  // the last message of a chunk's result
  };

  // On the gRPC thread: checks the header, admits the call and hands the fixed
  // operand's placement to the executor.
  absl::Status OnHeader() {
    auto request = std::make_shared<v1::StreamingComputeRequest>();
    GC_RETURN_IF_ERROR(ParseMessage(read_bytes_, "message 1", *request));
    if (request->kind_case() != v1::StreamingComputeRequest::kHeader) {
      return absl::InvalidArgumentError(
          "message 1 is not a header; the first message must be the header");
    }
    header_ = std::move(request);
    GC_ASSIGN_OR_RETURN(ticket_, service_.AdmitClientStream(*context_));
    const RequestScope scope{service_.store, PrincipalOf(*context_), service_.config.max_elements,
                             SharedMemoryFor(service_, *context_)};
    GC_ASSIGN_OR_RETURN(plan_, CheckStreamingHeader(header_->header(), scope));
    GC_ASSIGN_OR_RETURN(plan_.result_chunk_bytes,
                        service_.ResolveChunkBytes(header_->header().chunk_bytes(),
                                                   "header.chunk_bytes"));
    {
      absl::MutexLock lock(&mu_);
      ++tasks_;
    }
    const absl::Status submitted = service_.SubmitRequest(
        [this](absl::Status admitted) { Setup(std::move(admitted)); }, *context_,
        Executor::Lane::kGeneral);
    if (!submitted.ok()) {
      absl::MutexLock lock(&mu_);
      --tasks_;
    }
    return submitted;
  }

  // On the executor: picks the device and places the discount factors there.
  void Setup(absl::Status admitted) {
    const absl::Time started = absl::Now();
    absl::Status status = std::move(admitted);
    const OperandSpec* factors = plan_.factors.has_value() ? &*plan_.factors : nullptr;
    if (status.ok()) {
      device_ = factors != nullptr && factors->stored != nullptr ? factors->stored->device()
                                                                  : service_.backend.PickDevice();
      // Per chunk in flight its inputs and its result, and one chunk's more: a
      // result's arrays come back once gRPC has sent its last slice.
      arrays_ = std::make_unique<ChunkArrays>(
          service_.backend, device_, (plan_.streamed_operands + 1) * (max_chunks_in_flight_ + 1));
      if (factors != nullptr) {
        OpContext ctx;
        ctx.cancelled = &cancelled_;
        absl::StatusOr<std::shared_ptr<Array>> placed =
            PrepareFactors(plan_, device_, service_.backend, ctx);
        if (placed.ok()) {
          factors_ = *std::move(placed);
        } else {
          status = placed.status();
        }
      }
    }
    mu_.Lock();
    --tasks_;
    last_progress_ = absl::Now();
    queue_time_ = started - rpc_.start();
    if (!status.ok()) {
      Fail(status);
    } else {
      setup_done_ = true;
      v1::ResultChunk message;
      v1::ResultHeader* header = message.mutable_header();
      header->set_dtype(DTypeToProto(plan_.dtype));
      uint64_t bytes = plan_.element_bytes();
      for (int64_t extent : plan_.out_shape) {
        header->add_shape(extent);
        bytes *= static_cast<uint64_t>(extent);
      }
      header->set_total_bytes(bytes);
      ready_.push_back({ChunkMessage(message)});
    }
    PumpAndUnlock();
  }

  // On the gRPC thread: a data message checked and handed to the executor.
  absl::Status OnData() {
    v1::wire::MessageBytes message(read_bytes_);
    std::optional<v1::wire::DataPayload> payload = v1::wire::FindUploadData(message);
    if (!payload.has_value()) {
      // A valid data message in another layout: the parsed copy is the payload.
      v1::StreamingComputeRequest request;
      GC_RETURN_IF_ERROR(ParseMessage(read_bytes_, absl::StrCat("message ", messages_), request));
      if (request.kind_case() != v1::StreamingComputeRequest::kData) {
        return absl::InvalidArgumentError(absl::StrCat(
            "message ", messages_, " is not a data chunk; send exactly one header, first"));
      }
      grpc::Slice slice(request.data());
      message = v1::wire::MessageBytes(grpc::ByteBuffer(&slice, 1));
      payload = v1::wire::DataPayload{.start = 0, .size = request.data().size()};
    }
    GC_ASSIGN_OR_RETURN(const int64_t rows,
                        ChunkRows(plan_, payload->size, received_rows_, messages_ - 1));
    Chunk chunk{.first_row = received_rows_, .rows = rows, .message = std::move(message),
                .payload = *payload};
    if (host_budget_ != nullptr) chunk.charge = host_budget_->ChargeFixed(chunk.message.size());
    received_rows_ += rows;
    service_.metrics.NetworkReceived(payload->size);
    {
      absl::MutexLock lock(&mu_);
      chunk.sequence = chunks_++;
      ++chunks_in_flight_;
      ++tasks_;
    }
    service_.executor.SubmitContinuation(
        [this, chunk = std::move(chunk)]() mutable { RunChunk(std::move(chunk)); });
    return absl::OkStatus();
  }

  // On the executor: the chunk through the device, its result as messages.
  void RunChunk(Chunk chunk) {
    std::vector<Outgoing> messages;
    ExecutionTimes times;
    absl::Duration copy_out = absl::ZeroDuration();
    absl::Status status = ChunkMessages(chunk, times, copy_out, messages);
    if (!status.ok() && !cancelled_.load()) {
      status = WithContext(status, absl::StrCat("chunk ", chunk.sequence, " (rows ",
                                                chunk.first_row, " to ",
                                                chunk.first_row + chunk.rows - 1, ")"));
    }
    mu_.Lock();
    --tasks_;
    last_progress_ = absl::Now();
    transfer_in_ += times.transfer_in;
    compute_ += times.compute;
    transfer_out_ += copy_out;
    if (!status.ok()) {
      Fail(status);
    } else {
      done_.emplace(chunk.sequence, std::move(messages));
      // Results go out in chunk order.
      for (auto next = done_.find(next_sequence_); next != done_.end();
           next = done_.find(next_sequence_)) {
        for (Outgoing& outgoing : next->second) ready_.push_back(std::move(outgoing));
        done_.erase(next);
        ++next_sequence_;
      }
    }
    PumpAndUnlock();
  }

  absl::Status ChunkMessages(Chunk& chunk, ExecutionTimes& times, absl::Duration& copy_out,
                             std::vector<Outgoing>& messages) {
    if (cancelled_.load()) return absl::CancelledError("cancelled by the client");
    std::vector<HostPiece> pieces;
    chunk.message.ForEachPiece(chunk.payload.start, chunk.payload.size,
                               [&pieces](const char* piece, uint64_t length) {
                                 pieces.push_back({piece, length});
                               });
    std::shared_ptr<Array> result;
    {
      GC_ASSIGN_OR_RETURN(DeviceQueues::Slot slot,
                          service_.device_queues.Enter(device_, DeviceLabel(device_)));
      OpContext ctx;
      ctx.cancelled = &cancelled_;
      GC_ASSIGN_OR_RETURN(result,
                          RunStreamingChunk(plan_, factors_, *arrays_, service_.backend, pieces,
                                            chunk.first_row, chunk.rows, ctx, times));
    }
    service_.metrics.Transferred(Direction::kHostToDevice, chunk.payload.size, times.transfer_in);
    chunk.message = v1::wire::MessageBytes(grpc::ByteBuffer());  // the input is on the device
    chunk.charge = MemoryBudget::Charge();
    const uint64_t limit = plan_.result_chunk_bytes;
    uint64_t out_bytes = 0;
    for (const ResultRun& run : ChunkResultRuns(plan_, chunk.first_row, chunk.rows)) {
      for (uint64_t at = 0; at < run.bytes; at += limit) {
        const uint64_t n = std::min(limit, run.bytes - at);
        GC_ASSIGN_OR_RETURN(grpc::Slice slice,
                            ArrayPayloadSlice(service_.backend, host_budget_, result,
                                              run.source + at, n, copy_out));
        messages.push_back({v1::wire::ResultDataMessage(run.offset + at, std::move(slice)), n});
        out_bytes += n;
      }
    }
    messages.back().ends_chunk = true;
    service_.metrics.Transferred(Direction::kDeviceToHost, out_bytes, copy_out);
    return absl::OkStatus();
  }

  bool Stopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cancelled_.load() || error_.has_value();
  }

  void Fail(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (IsMemoryBudgetRefusal(status)) service_.metrics.Rejected(Rejection::kMemoryBudget);
    if (!error_.has_value()) error_ = status;  // the first error stands
  }

  void QueueTrailer() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::ResultChunk message;
    v1::ResultTrailer* trailer = message.mutable_trailer();
    v1::Timing* timing = trailer->mutable_timing();
    timing->set_queue_us(Micros(queue_time_));
    timing->set_transfer_in_us(Micros(transfer_in_));
    timing->set_compute_us(Micros(compute_));
    timing->set_transfer_out_us(Micros(transfer_out_));
    timing->set_total_us(Micros(absl::Now() - rpc_.start()));
    trailer->set_backend(std::string(service_.backend.name()));
    trailer->set_device(DeviceLabel(device_));
    trailer->set_streamed_chunks(chunks_);
    ready_.push_back({ChunkMessage(message)});
  }

  // Decides the next write, read and Finish under mu_, then acts outside it. The
  // state change that led here and this decision are one critical section: once
  // mu_ is released another thread may finish the call and OnDone delete this.
  void PumpAndUnlock() ABSL_UNLOCK_FUNCTION(mu_) {
    while (true) {
      if (finished_) return mu_.Unlock();
      if (!Stopping() && read_ended_ && setup_done_ && !trailer_queued_ && tasks_ == 0 &&
          done_.empty()) {
        if (received_rows_ != plan_.rows) {
          Fail(absl::InvalidArgumentError(absl::StrCat(
              "stream ended after ", received_rows_, " of the ", plan_.rows,
              " rows header.shape ", ShapeToString(plan_.shape), " declares")));
        } else {
          QueueTrailer();
          trailer_queued_ = true;
        }
      }
      const bool stop = Stopping();
      if (stop) {
        ready_.clear();
        done_.clear();
      }
      const bool write = !stop && !writing_ && !ready_.empty();
      if (write) {
        in_flight_ = std::move(ready_.front().message);
        in_flight_data_bytes_ = ready_.front().data_bytes;
        in_flight_ends_chunk_ = ready_.front().ends_chunk;
        ready_.pop_front();
        writing_ = true;
      }
      const bool read = !stop && setup_done_ && !reading_ && !starting_read_ &&
                        !handling_read_ && !read_ended_ &&
                        chunks_in_flight_ < max_chunks_in_flight_;
      if (read) reading_ = starting_read_ = true;
      std::optional<grpc::Status> finish;
      if (!writing_ && !starting_read_ && !handling_read_ && tasks_ == 0 &&
          (stop || (trailer_queued_ && ready_.empty()))) {
        finished_ = true;
        finish = ToGrpcStatus(error_.has_value() ? *error_
                              : cancelled_.load() ? absl::CancelledError("cancelled by the client")
                                                  : absl::OkStatus());
        // Memory and the admission ticket go back before the client hears the status.
        factors_.reset();
        plan_.factors.reset();
        if (arrays_ != nullptr) arrays_->Clear();
        ticket_ = Admission::Ticket();
      }
      mu_.Unlock();
      if (write) StartWrite(&in_flight_);
      if (finish.has_value()) {
        RecordFinish(*finish);
        Finish(*finish);
        return;
      }
      if (!read) return;
      StartRead(&read_bytes_);
      // A Finish may have waited for this read to start: decide again.
      mu_.Lock();
      starting_read_ = false;
    }
  }

  void RecordFinish(const grpc::Status& status) {
    Metrics& metrics = service_.metrics;
    const Operation op = Operation::kStreamingCompute;
    metrics.RequestDone(op, rpc_.Done(status.error_code()), absl::Now() - rpc_.start());
    metrics.AddInFlight(op, -1);
    if (!status.ok()) return;
    absl::MutexLock lock(&mu_);
    metrics.ObserveStage(op, Stage::kQueue, queue_time_);
    metrics.ObserveStage(op, Stage::kTransferIn, transfer_in_);
    metrics.ObserveStage(op, Stage::kCompute, compute_);
    metrics.ObserveStage(op, Stage::kTransferOut, transfer_out_);
  }

  ServiceContext& service_;
  Timer& idle_timer_;
  grpc::CallbackServerContext* const context_;
  RpcRecorder rpc_;
  const std::shared_ptr<Guard> guard_ = std::make_shared<Guard>();
  // Null when the backend has no budgets.
  const std::shared_ptr<MemoryBudget> host_budget_;
  const int max_chunks_in_flight_;
  std::atomic<bool> cancelled_{false};

  // Reaction-thread state: the read buffer and what the header set up (read-only
  // for the executor tasks once setup_done_).
  grpc::ByteBuffer read_bytes_;
  uint64_t messages_ = 0;
  int64_t received_rows_ = 0;
  std::shared_ptr<const v1::StreamingComputeRequest> header_;
  StreamingPlan plan_;
  Admission::Ticket ticket_;
  int device_ = kHostDevice;
  std::shared_ptr<Array> factors_;
  std::unique_ptr<ChunkArrays> arrays_;  // set up with the device

  absl::Mutex mu_;
  Timer::Id idle_alarm_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_) = absl::Now();  // a message, or a chunk done
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  // StartRead is being called, or a received message handled (outside mu_): no
  // other read starts and the call does not finish meanwhile. Two flags: the
  // read may complete, and its message be handled, before StartRead returns.
  bool starting_read_ ABSL_GUARDED_BY(mu_) = false;
  bool handling_read_ ABSL_GUARDED_BY(mu_) = false;
  bool read_ended_ ABSL_GUARDED_BY(mu_) = false;     // the client sent everything
  bool setup_done_ ABSL_GUARDED_BY(mu_) = false;
  int tasks_ ABSL_GUARDED_BY(mu_) = 0;  // executor tasks (and an idle check) pending
  uint64_t chunks_ ABSL_GUARDED_BY(mu_) = 0;         // chunks received
  int chunks_in_flight_ ABSL_GUARDED_BY(mu_) = 0;    // received, result not all written
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;  // the next chunk whose result goes out
  std::map<uint64_t, std::vector<Outgoing>> done_ ABSL_GUARDED_BY(mu_);  // run, out of order
  std::deque<Outgoing> ready_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ByteBuffer in_flight_;  // owned by the write in flight
  uint64_t in_flight_data_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool in_flight_ends_chunk_ ABSL_GUARDED_BY(mu_) = false;
  bool trailer_queued_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> error_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration queue_time_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Duration transfer_in_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Duration compute_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Duration transfer_out_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartStreamingCompute(
    ServiceContext& service, Timer& idle_timer, grpc::CallbackServerContext* context) {
  return new StreamingComputeReactor(service, idle_timer, context);
}

}  // namespace gpucompute
