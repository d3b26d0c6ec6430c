// The server-streaming reactor shared by the four compute RPCs and Download: it
// runs the work on the executor, then streams header, data chunks and trailer
// with one write in flight. Chunks are copied out of the backend on the executor
// (read ahead by kReadAhead chunks) while earlier chunks are on the wire, so
// device-to-host copies overlap gRPC writes. Finish is called exactly once, and
// only when no executor task for this call is pending, so the request message
// and this object outlive every task that uses them. As in gRPC's callback
// examples, one write at most is in flight and no reaction ever blocks.
// A write the client does not take within stream_idle_timeout cancels the call,
// so that a stalled reader cannot hold its result (and its memory budget); the
// limit is armed on the service's Timer (a gRPC Alarm per write cost a timer and,
// when cancelled, a hop to gRPC's executor thread).
// Data chunks go out as raw bytes (proto/gpucompute/v1/bulk_wire.h), never
// through a protobuf string: a host array's chunk references the array itself
// (no copy: gRPC writes from the result's memory, which the chunk keeps alive);
// a device array's chunk is copied once, into host memory charged to the host
// budget before the copy and released when gRPC lets go of the chunk. A stream
// thus holds at most kReadAhead + 1 chunks of host memory beyond its result.
// A result that is one message (OutputOptions.accept_complete_result, and it fits
// one chunk, is kept, or went into a shared-memory region) goes as
// ResultChunk.complete in the same framing, its payload slice between the
// header's and the trailer's bytes, written together with Finish.
// `Call` is where the messages go: a gRPC call of the request's own
// (ResultStreamReactor), or one request of a Compute.Session
// (SessionRequestCall, server/session_request.h), whose result is always that
// one message or a status.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "grpcpp/grpcpp.h"
#include "kernels/memory/memory_budget.h"
#include "server/rpc_labels.h"
#include "server/dynamic_batcher.h"
#include "server/prepared_operation.h"
#include "server/service_context.h"
#include "server/session_request.h"

namespace gpucompute {

// Where a result goes and how it is framed.
struct ResultOutput {
  Admission::Ticket ticket;
  uint32_t chunk_bytes = 0;
  // Set for keep_on_device: the result is stored under this reservation.
  std::optional<BufferStore::Reservation> keep;
  std::string buffer_name;
  // Set for output.shared_memory: the result is written into this region, not streamed.
  std::string shared_memory_region_id;
  // The executor lane the work runs on (ServiceContext::LaneFor).
  Executor::Lane lane = Executor::Lane::kGeneral;
  // OutputOptions.accept_complete_result: a result of one chunk goes as one message.
  bool accept_complete = false;
};

template <typename Call>
class ResultStream final : public Call {
 public:
  using ProduceFn = absl::AnyInvocable<absl::StatusOr<StreamSource>(OpContext& ctx)>;
  using Output = ResultOutput;

  // `stall_timer` (outliving every call) times each write against stream_idle_timeout;
  // `method` is what the request counts as in the grpc_server_* metrics.
  ResultStream(ServiceContext& service, Timer& stall_timer, grpc::CallbackServerContext* context,
               Operation op, RpcMethod method);

  // Exactly one of these, once, right after construction.
  void Start(Output output, absl::Duration prepare_time, ProduceFn produce);
  // Start, with the work joining `batcher` (which fills in the member's
  // cancellation, deadline and delivery).
  void StartInBatch(Output output, absl::Duration prepare_time, DynamicBatcher& batcher,
                    BatchMember member);
  void Reject(const absl::Status& status);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  static constexpr size_t kReadAhead = 2;

  // A message waiting to be written (it owns its payload's memory and charge).
  struct ReadyMessage {
    grpc::ByteBuffer message;
    uint64_t data_bytes = 0;  // payload bytes of a data chunk or complete result
    bool complete = false;    // ResultChunk.complete: the last message, sent with Finish
  };

  // Where the call is; it only moves down this list (kOnExecutor and kChunksLeft
  // alternate while the result is copied out). Writes run beside it, one at a
  // time (writing_).
  enum class State {
    kNotStarted,  // until Start or Reject
    kOnExecutor,  // the operation or a chunk copy is pending on the executor
    kChunksLeft,  // result bytes remain to be copied; no copy is pending
    kAllQueued,   // the trailer or the error is queued: only writes remain
    kFinished,    // Finish was called: OnDone may delete this at any moment
  };

  // `admitted`: OK, or why the executor dropped the queued request.
  void RunProduce(ProduceFn produce, absl::Status admitted);
  // Takes the outcome of the work that started at `started` (on the executor):
  // a result of one chunk is copied out right here, with no further executor hop.
  void Deliver(absl::StatusOr<StreamSource> source, absl::Time started);
  void ProduceChunk();
  // The payload of the chunk [offset, offset + n) of the source's result as a
  // slice: the result's own host memory (the array, or a batch's host copy), else
  // a charged host copy; `elapsed` grows by the time it took.
  absl::StatusOr<grpc::Slice> CopyOut(const StreamSource& source, uint64_t offset, uint64_t n,
                                      absl::Duration& elapsed);
  void Fail(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::ResultTrailer MakeTrailer(const v1::BufferInfo* stored) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void QueueTrailer(const v1::BufferInfo* stored) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Decides the next write / chunk copy / Finish; never blocks. Finish only
  // outside kOnExecutor, so that no executor task can outlive this.
  void Pump();
  // The same under `lock`, which it releases before acting. Executor threads use
  // this so that their last state change and the decision are one critical
  // section: after it, another thread may finish the call and delete this.
  void PumpLocked(absl::ReleasableMutexLock& lock);
  void RecordFinish(const grpc::Status& status);
  // Arms the stall limit of a complete result written together with Finish
  // (StartWriteAndFinish): the call may end while the timer is pending, so the
  // callback reaches the call only through last_write_guard_, which OnDone closes.
  void ArmLastWriteAlarm() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Arms the stall limit of the write about to start.
  void ArmStallAlarm() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The write in flight outlived stream_idle_timeout: cancels the call.
  void OnStalled();

  ServiceContext& service_;
  Timer& stall_timer_;
  grpc::CallbackServerContext* const context_;
  const Operation op_;
  RpcRecorder rpc_;
  const absl::Time accepted_;
  // Null when the backend has no budgets: chunk copies are then not charged.
  const std::shared_ptr<MemoryBudget> host_budget_;
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  Output output_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Array> result_ ABSL_GUARDED_BY(mu_);
  uint64_t next_offset_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t end_offset_ ABSL_GUARDED_BY(mu_) = 0;  // where the data chunks stop
  std::deque<ReadyMessage> ready_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer in_flight_;  // owned by the write in flight
  uint64_t in_flight_data_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The number of the write in flight, 0 when none. The stall callback may run
  // after this reactor is gone: it holds this marker, not the reactor, and
  // touches the reactor only when it takes the marker, which it can only do
  // while the write is pending, hence before Finish.
  const std::shared_ptr<std::atomic<uint64_t>> pending_write_ =
      std::make_shared<std::atomic<uint64_t>>(0);
  uint64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  // The stall callback armed for the write in flight (0: none); cancelled when
  // the write ends.
  Timer::Id stall_alarm_ ABSL_GUARDED_BY(mu_) = 0;
  struct LastWriteGuard {
    absl::Mutex mu;
    grpc::CallbackServerContext* context ABSL_GUARDED_BY(mu) = nullptr;  // null once done
  };
  // Set when the last message went out with Finish.
  std::shared_ptr<LastWriteGuard> last_write_guard_;
  // When the alarm takes a write, OnStalled and OnWriteDone both run; the later
  // one clears writing_, so that the call cannot finish under the other.
  bool stall_handled_ ABSL_GUARDED_BY(mu_) = false;
  bool write_done_waiting_ ABSL_GUARDED_BY(mu_) = false;
  State state_ ABSL_GUARDED_BY(mu_) = State::kNotStarted;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // in_flight_ is being written
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  absl::Time write_started_ ABSL_GUARDED_BY(mu_);
  absl::Duration stream_write_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Duration transfer_out_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Duration prepare_time_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Duration queue_time_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  ExecutionTimes times_ ABSL_GUARDED_BY(mu_);
};

// A request's own server-streaming call.
using ResultStreamReactor = ResultStream<grpc::ServerWriteReactor<grpc::ByteBuffer>>;
// One request of a session.
using SessionRequestStream = ResultStream<SessionRequestCall>;

// Admits a new streaming request and resolves its chunk size (`chunk_field`
// names the request field): the Output the stream starts with.
absl::StatusOr<ResultOutput> AdmitStream(const ServiceContext& service,
                                                        const grpc::CallbackServerContext& context,
                                                        uint32_t chunk_bytes,
                                                        absl::string_view chunk_field);

}  // namespace gpucompute
