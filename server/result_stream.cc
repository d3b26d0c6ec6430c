#include "server/result_stream.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gpucompute/v1/bulk_wire.h"
#include "kernels/memory/memory_budget.h"
#include "server/chunk_memory.h"
#include "server/proto_convert.h"
#include "server/status_convert.h"

namespace gpucompute {
namespace {

uint64_t Micros(absl::Duration d) { return static_cast<uint64_t>(absl::ToInt64Microseconds(d)); }

grpc::ByteBuffer HeaderMessage(const v1::ResultHeader& header) {
  v1::ResultChunk message;
  *message.mutable_header() = header;
  return v1::wire::SerializedMessage(message);
}

}  // namespace

absl::StatusOr<ResultOutput> AdmitStream(const ServiceContext& service,
                                                        const grpc::CallbackServerContext& context,
                                                        uint32_t chunk_bytes,
                                                        absl::string_view chunk_field) {
  ResultOutput output;
  GC_ASSIGN_OR_RETURN(output.ticket, service.Admit(context));
  GC_ASSIGN_OR_RETURN(output.chunk_bytes, service.ResolveChunkBytes(chunk_bytes, chunk_field));
  return output;
}

template <typename Call>
ResultStream<Call>::ResultStream(ServiceContext& service, Timer& stall_timer,
                                 grpc::CallbackServerContext* context, Operation op,
                                 RpcMethod method)
    : service_(service), stall_timer_(stall_timer), context_(context), op_(op),
      rpc_(service.metrics, method, *context), accepted_(rpc_.start()),
      host_budget_(HostMemoryBudget(service.backend)) {
  service_.metrics.AddInFlight(op_, 1);
}

template <typename Call>
void ResultStream<Call>::Reject(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    Fail(status);
  }
  Pump();
}

template <typename Call>
void ResultStream<Call>::Start(Output output, absl::Duration prepare_time, ProduceFn produce) {
  const Executor::Lane lane = output.lane;
  // The connection, as admission found it (asking the context again costs gRPC a lock
  // and two copies of the string).
  const std::string client = output.ticket.key();
  {
    absl::MutexLock lock(&mu_);
    output_ = std::move(output);
    prepare_time_ = prepare_time;
    state_ = State::kOnExecutor;
  }
  absl::Status admitted = service_.SubmitRequest(
      [this, produce = std::move(produce)](absl::Status admitted) mutable {
        RunProduce(std::move(produce), std::move(admitted));
      },
      client, lane);
  if (!admitted.ok()) {
    absl::MutexLock lock(&mu_);
    Fail(admitted);
  }
  Pump();
}

template <typename Call>
void ResultStream<Call>::StartInBatch(Output output, absl::Duration prepare_time,
                                       DynamicBatcher& batcher, BatchMember member) {
  member.client = output.ticket.key();  // the connection, as admission found it
  {
    absl::MutexLock lock(&mu_);
    output_ = std::move(output);
    prepare_time_ = prepare_time;
    state_ = State::kOnExecutor;
  }
  member.cancelled = &cancelled_;
  member.deadline = absl::FromChrono(context_->deadline());
  member.deliver = [this](absl::StatusOr<StreamSource> source, absl::Time started) {
    Deliver(std::move(source), started);
  };
  absl::Status admitted = batcher.Submit(std::move(member));
  if (!admitted.ok()) {
    absl::MutexLock lock(&mu_);
    Fail(admitted);
  }
  Pump();
}

template <typename Call>
void ResultStream<Call>::RunProduce(ProduceFn produce, absl::Status admitted) {
  const absl::Time started = absl::Now();
  absl::StatusOr<StreamSource> source;
  if (!admitted.ok()) {
    source = std::move(admitted);
  } else if (cancelled_.load()) {
    source = absl::CancelledError("cancelled while queued");
  } else if (absl::FromChrono(context_->deadline()) < started) {
    service_.metrics.Rejected(Rejection::kDeadlineExceeded);
    source = absl::DeadlineExceededError("deadline passed while the request was queued");
  } else {
    OpContext ctx;
    ctx.cancelled = &cancelled_;
    source = produce(ctx);
  }
  Deliver(std::move(source), started);
}

template <typename Call>
void ResultStream<Call>::Deliver(absl::StatusOr<StreamSource> source, absl::Time started) {
  uint32_t chunk_bytes;
  bool keep;
  bool in_region;
  {
    absl::MutexLock lock(&mu_);
    chunk_bytes = output_.chunk_bytes;
    keep = output_.keep.has_value();
    in_region = !output_.shared_memory_region_id.empty();
  }
  // A result of one chunk is copied out now, outside the lock (the copy may wait
  // for the memory budget), instead of in a continuation task.
  uint64_t begin = 0;
  uint64_t one_chunk = 0;  // the bytes of that chunk
  if (source.ok()) {
    begin = source->begin;
    const uint64_t end = source->end != 0 ? source->end : source->array->bytes();
    if (!keep && !in_region && end > begin && end - begin <= chunk_bytes) one_chunk = end - begin;
  }
  absl::Duration copy_time = absl::ZeroDuration();
  absl::StatusOr<grpc::Slice> payload = grpc::Slice();
  if (one_chunk > 0) payload = CopyOut(*source, begin, one_chunk, copy_time);
  {
    // State change and the next decision in one critical section: once the
    // state leaves kOnExecutor another thread may finish the call and delete this.
    absl::ReleasableMutexLock lock(&mu_);
    state_ = State::kChunksLeft;  // unless Fail or the trailer below
    queue_time_ = started - accepted_;
    if (!source.ok()) {
      Fail(source.status());
    } else if (!payload.ok()) {
      Fail(payload.status());
    } else {
      times_ = source->times;
      result_ = std::move(source->array);
      next_offset_ = source->begin;
      end_offset_ = source->end != 0 ? source->end : result_->bytes();
      v1::ResultHeader header;
      header.set_dtype(DTypeToProto(result_->dtype()));
      for (int64_t extent : result_->shape()) header.add_shape(extent);
      header.set_total_bytes(result_->bytes());
      // Whether header, at most one data chunk and trailer are all there is.
      bool whole = true;
      std::optional<v1::BufferInfo> stored;
      if (output_.keep.has_value()) {
        absl::StatusOr<StoredBuffer> committed = service_.store.Commit(
            *std::exchange(output_.keep, std::nullopt), output_.buffer_name, result_);
        if (!committed.ok()) {
          Fail(committed.status());
        } else {
          ToBufferInfo(*committed, &stored.emplace());
          result_.reset();
        }
      } else if (in_region) {
        result_.reset();  // already in the client's region
        transfer_out_ = times_.transfer_out;
      } else if (one_chunk > 0) {
        transfer_out_ += copy_time;
        next_offset_ = end_offset_;
        result_.reset();
      } else {
        whole = next_offset_ == end_offset_;
      }
      const bool failed = state_ == State::kAllQueued;
      const v1::BufferInfo* stored_info = stored.has_value() ? &*stored : nullptr;
      if (!failed && whole && output_.accept_complete) {
        // A one-message result in the zero-copy framing: the payload slice is
        // referenced between the header's and the trailer's bytes.
        ready_.push_back({v1::wire::ResultCompleteMessage(header, *std::move(payload),
                                                          MakeTrailer(stored_info)),
                          one_chunk, /*complete=*/true});
        state_ = State::kAllQueued;
      } else if (!failed) {
        ready_.push_back({HeaderMessage(header)});
        if (one_chunk > 0) {
          ready_.push_back({v1::wire::ResultDataMessage(begin, *std::move(payload)), one_chunk});
        }
        if (whole) QueueTrailer(stored_info);
      }
    }
    PumpLocked(lock);
  }
}

template <typename Call>
absl::StatusOr<grpc::Slice> ResultStream<Call>::CopyOut(const StreamSource& source,
                                                         uint64_t offset, uint64_t n,
                                                         absl::Duration& elapsed) {
  const absl::Time start = absl::Now();
  if (cancelled_.load()) return absl::CancelledError("cancelled while streaming");
  if (source.host != nullptr) {
    // A batch's result, on the host already (counted when the batch copied it
    // out): the slice references it.
    auto* owner = new std::shared_ptr<const std::string>(source.host);
    return grpc::Slice(const_cast<char*>((*owner)->data()) + source.host_offset + offset, n,
                       [](void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); },
                       owner);
  }
  absl::Duration took = absl::ZeroDuration();
  GC_ASSIGN_OR_RETURN(grpc::Slice slice,
                      ArrayPayloadSlice(service_.backend, host_budget_, source.array, offset, n, took));
  took = absl::Now() - start;
  elapsed += took;
  service_.metrics.Transferred(Direction::kDeviceToHost, n, took);
  return slice;
}

template <typename Call>
void ResultStream<Call>::ProduceChunk() {
  std::shared_ptr<Array> array;
  uint64_t offset;
  uint64_t end;
  uint32_t chunk_bytes;
  {
    absl::MutexLock lock(&mu_);
    array = result_;
    offset = next_offset_;
    end = end_offset_;
    chunk_bytes = output_.chunk_bytes;
  }
  const uint64_t n = std::min<uint64_t>(chunk_bytes, end - offset);
  absl::Duration elapsed = absl::ZeroDuration();
  absl::StatusOr<grpc::Slice> payload = CopyOut(StreamSource{.array = array}, offset, n, elapsed);
  {
    absl::ReleasableMutexLock lock(&mu_);
    state_ = State::kChunksLeft;  // unless Fail or QueueTrailer below
    if (!payload.ok()) {
      Fail(payload.status());
    } else {
      transfer_out_ += elapsed;
      next_offset_ = offset + n;
      ready_.push_back({v1::wire::ResultDataMessage(offset, *std::move(payload)), n});
      if (next_offset_ == end) {
        result_.reset();  // free the result memory as soon as it is copied out
        QueueTrailer(nullptr);
      }
    }
    PumpLocked(lock);
  }
}

template <typename Call>
void ResultStream<Call>::Fail(const absl::Status& status) {
  if (IsMemoryBudgetRefusal(status)) service_.metrics.Rejected(Rejection::kMemoryBudget);
  if (final_status_.ok()) final_status_ = ToGrpcStatus(status);  // the first error stands
  ready_.clear();
  result_.reset();
  output_.keep.reset();
  state_ = State::kAllQueued;
}

template <typename Call>
v1::ResultTrailer ResultStream<Call>::MakeTrailer(const v1::BufferInfo* stored) {
  v1::ResultTrailer trailer;
  v1::Timing* timing = trailer.mutable_timing();
  timing->set_queue_us(Micros(queue_time_));
  timing->set_transfer_in_us(Micros(times_.transfer_in));
  timing->set_compute_us(Micros(times_.compute));
  timing->set_transfer_out_us(Micros(transfer_out_));
  timing->set_stream_write_us(Micros(stream_write_));
  timing->set_prepare_us(Micros(prepare_time_));
  timing->set_total_us(Micros(absl::Now() - accepted_));
  trailer.set_backend(std::string(service_.backend.name()));
  trailer.set_device(times_.device);
  trailer.set_method(times_.method);
  trailer.set_batch_size(static_cast<uint32_t>(times_.batch_size));
  if (stored != nullptr) *trailer.mutable_stored_buffer() = *stored;
  trailer.set_shared_memory_region_id(output_.shared_memory_region_id);
  return trailer;
}

template <typename Call>
void ResultStream<Call>::QueueTrailer(const v1::BufferInfo* stored) {
  v1::ResultChunk message;
  *message.mutable_trailer() = MakeTrailer(stored);
  ready_.push_back({v1::wire::SerializedMessage(message)});
  state_ = State::kAllQueued;
}

template <typename Call>
void ResultStream<Call>::Pump() {
  absl::ReleasableMutexLock lock(&mu_);
  PumpLocked(lock);
}

template <typename Call>
void ResultStream<Call>::PumpLocked(absl::ReleasableMutexLock& lock) {
  if (state_ == State::kFinished) {
    lock.Release();
    return;
  }
  const bool cancelled = cancelled_.load();
  const bool write = !writing_ && !cancelled && !ready_.empty();
  // A complete result is the last message: it goes out with Finish, one step.
  const bool write_and_finish = write && ready_.front().complete;
  if (write) {
    in_flight_ = std::move(ready_.front().message);
    in_flight_data_bytes_ = ready_.front().data_bytes;
    ready_.pop_front();
    writing_ = true;
    write_started_ = absl::Now();
    if (write_and_finish) {
      ArmLastWriteAlarm();
    } else {
      ArmStallAlarm();
    }
  }
  std::optional<grpc::Status> finish;
  if (write_and_finish) {
    state_ = State::kFinished;
    output_ = Output{};  // the admission ticket goes before the client hears the status
    finish = final_status_;
  } else if (!writing_ && state_ != State::kOnExecutor &&
      (cancelled || (state_ == State::kAllQueued && ready_.empty()))) {
    state_ = State::kFinished;
    // Memory, quota and the admission ticket are released before the client
    // hears the status.
    ready_.clear();
    result_.reset();
    output_ = Output{};
    finish = cancelled && final_status_.ok()
                 ? grpc::Status(grpc::CANCELLED, "cancelled by the client")
                 : final_status_;
  }
  const bool copy_chunk =
      state_ == State::kChunksLeft && !cancelled && ready_.size() < kReadAhead;
  if (copy_chunk) state_ = State::kOnExecutor;
  lock.Release();
  if (write_and_finish) {
    RecordFinish(*finish);
    this->StartWriteAndFinish(&in_flight_, grpc::WriteOptions(), *finish);
    return;
  }
  if (write) this->StartWrite(&in_flight_);
  if (copy_chunk) service_.executor.SubmitContinuation([this] { ProduceChunk(); });
  if (finish.has_value()) {
    RecordFinish(*finish);
    this->Finish(*finish);
  }
}

template <typename Call>
void ResultStream<Call>::ArmStallAlarm() {
  uint64_t write = ++writes_;
  pending_write_->store(write);
  stall_alarm_ = stall_timer_.Schedule(absl::Now() + service_.config.stream_idle_timeout,
                                       [this, pending = pending_write_, write]() mutable {
                                         if (pending->compare_exchange_strong(write, 0)) OnStalled();
                                       });
}

template <typename Call>
void ResultStream<Call>::OnStalled() {
  service_.metrics.Rejected(Rejection::kStreamIdle);
  cancelled_.store(true);
  // Safe: the call cannot finish while this write is pending. Completes the
  // write with ok = false.
  context_->TryCancel();
  {
    // Not Fail: a chunk copy may be pending on the executor; it stops on
    // cancelled_, and the call finishes with this status.
    absl::MutexLock lock(&mu_);
    final_status_ = ToGrpcStatus(absl::DeadlineExceededError(absl::StrCat(
        "result stream: the client took no message for ",
        absl::FormatDuration(service_.config.stream_idle_timeout),
        " (stream_idle_timeout); the stream is cancelled and its result freed")));
    stall_handled_ = true;
    if (!write_done_waiting_) return;  // OnWriteDone ends the write
    writing_ = false;
  }
  Pump();
}

template <typename Call>
void ResultStream<Call>::OnWriteDone(bool ok) {
  const bool alarm_took_write = pending_write_->exchange(0) == 0;
  {
    absl::MutexLock lock(&mu_);
    stall_timer_.Cancel(std::exchange(stall_alarm_, 0));
    stream_write_ += absl::Now() - write_started_;
    if (in_flight_data_bytes_ > 0) service_.metrics.NetworkSent(in_flight_data_bytes_);
    // Our reference to the message: its memory goes back once gRPC drops its own.
    in_flight_.Clear();
    in_flight_data_bytes_ = 0;
    if (!ok) cancelled_.store(true);  // the stream is broken: stop producing
    if (alarm_took_write && !stall_handled_) {
      write_done_waiting_ = true;  // OnStalled is running: it ends the write
      return;
    }
    writing_ = false;
  }
  Pump();
}

template <typename Call>
void ResultStream<Call>::OnCancel() {
  cancelled_.store(true);
  Pump();
}

template <typename Call>
void ResultStream<Call>::RecordFinish(const grpc::Status& status) {
  Metrics& metrics = service_.metrics;
  const absl::Duration total = absl::Now() - accepted_;
  metrics.RequestDone(op_, rpc_.Done(status.error_code()), total);
  metrics.AddInFlight(op_, -1);
  absl::MutexLock lock(&mu_);
  metrics.ObserveStage(op_, Stage::kPrepare, prepare_time_);
  if (status.ok()) {
    metrics.ObserveStage(op_, Stage::kQueue, queue_time_);
    metrics.ObserveStage(op_, Stage::kTransferIn, times_.transfer_in);
    metrics.ObserveStage(op_, Stage::kCompute, times_.compute);
    metrics.ObserveStage(op_, Stage::kTransferOut, transfer_out_);
    if (last_write_guard_ == nullptr) metrics.ObserveStage(op_, Stage::kStreamWrite, stream_write_);
    if (times_.bytes_in > 0) metrics.NetworkReceived(times_.bytes_in);
  }
}

template <typename Call>
void ResultStream<Call>::ArmLastWriteAlarm() {
  last_write_guard_ = std::make_shared<LastWriteGuard>();
  {
    absl::MutexLock lock(&last_write_guard_->mu);
    last_write_guard_->context = context_;
  }
  stall_alarm_ = stall_timer_.Schedule(
      absl::Now() + service_.config.stream_idle_timeout,
      [guard = last_write_guard_, metrics = &service_.metrics] {
        absl::MutexLock lock(&guard->mu);
        if (guard->context == nullptr) return;  // the call ended
        metrics->Rejected(Rejection::kStreamIdle);
        guard->context->TryCancel();
      });
}

template <typename Call>
void ResultStream<Call>::OnDone() {
  {
    absl::MutexLock lock(&mu_);
    if (last_write_guard_ != nullptr) {
      stall_timer_.Cancel(std::exchange(stall_alarm_, 0));
      {
        absl::MutexLock guard_lock(&last_write_guard_->mu);
        last_write_guard_->context = nullptr;
      }
      // The write that went with Finish has no OnWriteDone: it ended here.
      service_.metrics.ObserveStage(op_, Stage::kStreamWrite, absl::Now() - write_started_);
      service_.metrics.NetworkSent(in_flight_data_bytes_);
    }
  }
  delete this;
}

template class ResultStream<grpc::ServerWriteReactor<grpc::ByteBuffer>>;
template class ResultStream<SessionRequestCall>;

}  // namespace gpucompute
