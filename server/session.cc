#include "server/session.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "kernels/memory/memory_budget.h"
#include "server/compute_request.h"
#include "server/request_parse.h"
#include "server/result_stream.h"
#include "server/session_request.h"
#include "server/status_convert.h"

namespace gpucompute {

class SessionReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public SessionAnswers {
 public:
  SessionReactor(Sessions& sessions, grpc::CallbackServerContext* context)
      : sessions_(sessions), service_(sessions.service_), batcher_(sessions.batcher_),
        idle_timer_(sessions.idle_timer_), context_(context),
        host_budget_(HostMemoryBudget(service_.backend)) {
    reading_ = true;
    reads_requested_ = reads_started_ = 1;
    StartRead(&read_);
  }

  // Sessions::Drain: no more reads; the call ends UNAVAILABLE once the requests
  // in flight are answered.
  void Close() {
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
      if (status_.ok()) {
        status_ = grpc::Status(grpc::UNAVAILABLE,
                               "the server is draining: this session ends; open a new one");
      }
    }
    Act();
  }

  // Held by Sessions::Drain while it calls Close outside its lock: the last of
  // Unpin and OnDone deletes this.
  void Pin() {
    absl::MutexLock lock(&mu_);
    ++drain_pins_;
  }
  void Unpin() {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      last = --drain_pins_ == 0 && done_;
    }
    if (last) delete this;
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call ended)
      {
        absl::MutexLock lock(&mu_);
        reading_ = false;
        half_closed_ = true;
      }
      Act();
      return;
    }
    ++messages_read_;
    absl::StatusOr<v1::SessionRequest> parsed = ParseRequest<v1::SessionRequest>(
        read_, absl::StrCat("session message ", messages_read_));
    read_.Clear();
    if (parsed.ok()) Dispatch(std::make_shared<const v1::SessionRequest>(*std::move(parsed)));
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
    }
    if (!parsed.ok()) {
      End(parsed.status());
      return;
    }
    Act();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      waiting_bytes_ -= std::exchange(write_bytes_, 0);
      write_.message.Clear();
      if (write_.request != nullptr) Release(std::exchange(write_.request, nullptr));
    }
    if (!ok) {  // the call is broken: nothing more can be written
      End(absl::OkStatus());
      return;
    }
    Act();
  }

  void OnCancel() override { End(absl::OkStatus()); }

  void OnDone() override {
    sessions_.Remove(this);
    bool last;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      last = drain_pins_ == 0;
    }
    if (last) delete this;
  }

  void Answer(SessionRequestCall* request, grpc::ByteBuffer answer) override {
    {
      absl::MutexLock lock(&mu_);
      const bool answered = cancelled_requests_.erase(request) > 0;  // CANCELLED already
      if (!answered) in_flight_.erase(request->id());
      if (cancelled_ || answered) {
        Release(request);
      } else {
        if (waiting_bytes_ + answer.Length() > 2 * service_.config.session_answer_bytes) {
          answer = ErrorAnswer(
              request->id(),
              grpc::Status(grpc::RESOURCE_EXHAUSTED,
                           absl::StrCat("this session holds ", waiting_bytes_,
                                        " bytes of answers its client has not read, over "
                                        "twice the limit (session_answer_bytes ",
                                        service_.config.session_answer_bytes,
                                        "); read the answers, then send again")));
        }
        QueueLocked({request, std::move(answer)});
      }
    }
    Act();
  }

 private:
  // An answer waiting to be written, and the request it ends (null for an
  // answer given apart from a stream: Refuse).
  struct Waiting {
    SessionRequestCall* request = nullptr;
    grpc::ByteBuffer message;
  };

  void QueueLocked(Waiting waiting) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    waiting_bytes_ += waiting.message.Length();
    answers_.push_back(std::move(waiting));
  }

  void Dispatch(std::shared_ptr<const v1::SessionRequest> message) {
    switch (message->kind_case()) {
      case v1::SessionRequest::kDiscountProduct:
        return Run(message, message->discount_product());
      case v1::SessionRequest::kHaversineGrid:
        return Run(message, message->haversine_grid());
      case v1::SessionRequest::kNormalize:
        return Run(message, message->normalize());
      case v1::SessionRequest::kLombscargle:
        return Run(message, message->lombscargle());
      case v1::SessionRequest::kCancel:
        return CancelRequest(message->cancel().id());
      case v1::SessionRequest::KIND_NOT_SET:
        return Refuse(message->id(), absl::InvalidArgumentError(absl::StrCat(
                                         "session message ", messages_read_, " (id ",
                                         message->id(), ") sets no operation and no cancel")));
    }
  }

  // Starts the compute request `request`, a part of `message`, on a stream of its own.
  template <typename Request>
  void Run(std::shared_ptr<const v1::SessionRequest> message, const Request& request) {
    constexpr Operation op = ComputeOp<Request>::kOperation;
    const absl::Time start = absl::Now();
    const uint64_t id = message->id();
    bool duplicate;
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_) return;
      duplicate = in_flight_.contains(id);
    }
    if (duplicate) {
      return Refuse(id, absl::InvalidArgumentError(absl::StrCat(
                            "session request id ", id, " is already in flight on this session; "
                            "ids must be unique among the requests in flight")));
    }
    auto* stream = new SessionRequestStream(service_, idle_timer_, context_, op,
                                            RpcMethod::kSession);
    stream->Bind(this, id);
    {
      absl::MutexLock lock(&mu_);
      // The parsed request lives until its answer is written: its memory counts.
      if (host_budget_ != nullptr) {
        request_charges_[stream] = host_budget_->ChargeFixed(message->ByteSizeLong());
      }
      in_flight_[id] = stream;
      ++pins_[stream];  // StartCompute may touch the stream after it has answered
      starting_ = stream;
    }
    StartCompute(service_, batcher_, op, start,
                 AcceptCompute(service_, *context_,
                               std::shared_ptr<const Request>(std::move(message), &request),
                               ResultFraming::kOneMessage),
                 *stream);
    bool cancel;
    {
      absl::MutexLock lock(&mu_);
      starting_ = nullptr;
      cancel = std::exchange(cancel_when_started_, false);
    }
    if (cancel) stream->OnCancel();
    Unpin({stream});
  }

  // Answers `id` with `status` apart from any stream (none started, or cancelled).
  void Refuse(uint64_t id, const absl::Status& status) {
    grpc::ByteBuffer answer = ErrorAnswer(id, ToGrpcStatus(status));
    {
      absl::MutexLock lock(&mu_);
      if (!cancelled_) QueueLocked({nullptr, std::move(answer)});
    }
    Act();
  }

  // Answers `id` CANCELLED at once, as a cancelled call's client hears at once,
  // and cancels its work, which ends when it can (its id is free meanwhile).
  void CancelRequest(uint64_t id) {
    SessionRequestCall* request;
    {
      absl::MutexLock lock(&mu_);
      auto it = in_flight_.find(id);
      if (it == in_flight_.end()) return;  // answered already, or never sent
      request = it->second;
      in_flight_.erase(it);
      cancelled_requests_.insert(request);
      ++pins_[request];
    }
    Refuse(id, absl::CancelledError("cancelled by the client"));
    request->OnCancel();  // outside mu_: it may answer at once
    Unpin({request});
  }

  // Cancels every request in flight and drops the answers; the call ends with
  // `status` (OK: CANCELLED, the client's doing) once they are all done.
  void End(const absl::Status& status) {
    std::vector<SessionRequestCall*> requests;
    {
      absl::MutexLock lock(&mu_);
      if (!status.ok() && status_.ok()) status_ = ToGrpcStatus(status);
      cancelled_ = true;
      for (Waiting& waiting : answers_) {
        if (waiting.request != nullptr) Release(waiting.request);
        waiting_bytes_ -= waiting.message.Length();
      }
      answers_.clear();
      for (const auto& [id, request] : in_flight_) {
        // A stream is cancelled only once started, as a gRPC call once its reactor is.
        if (request == starting_) {
          cancel_when_started_ = true;
        } else {
          requests.push_back(request);
        }
      }
      requests.insert(requests.end(), cancelled_requests_.begin(), cancelled_requests_.end());
      for (SessionRequestCall* request : requests) ++pins_[request];
    }
    for (SessionRequestCall* request : requests) request->OnCancel();
    Unpin(requests);
  }

  // `request` answered and its answer written or dropped: it ends, once nothing
  // holds it.
  void Release(SessionRequestCall* request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (pins_.contains(request)) {
      released_while_pinned_.insert(request);
    } else {
      to_end_.push_back(request);
    }
  }

  void Unpin(const std::vector<SessionRequestCall*>& requests) {
    {
      absl::MutexLock lock(&mu_);
      for (SessionRequestCall* request : requests) {
        auto it = pins_.find(request);
        if (--it->second > 0) continue;
        pins_.erase(it);
        if (released_while_pinned_.erase(request) > 0) to_end_.push_back(request);
      }
    }
    Act();
  }

  // Ends the released requests, then starts the next write and read and
  // finishes the call when it is time; called without mu_ held.
  void Act() {
    for (;;) {
      std::vector<SessionRequestCall*> ending;
      bool write = false;
      bool more_to_write = false;
      bool read = false;
      uint64_t read_number = 0;
      std::optional<grpc::Status> finish;
      {
        absl::MutexLock lock(&mu_);
        if (!to_end_.empty()) {
          ending.swap(to_end_);
          ending_ += ending.size();
        } else if (!finished_) {
          write = !writing_ && !answers_.empty();
          if (write) {
            write_ = std::move(answers_.front());
            write_bytes_ = write_.message.Length();
            answers_.pop_front();
            writing_ = true;
            more_to_write = !answers_.empty();
          }
          read = !reading_ && !half_closed_ && !cancelled_ && !closing_ &&
                 answers_.size() <
                     static_cast<size_t>(service_.config.max_in_flight_per_connection) &&
                 waiting_bytes_ < service_.config.session_answer_bytes;
          if (read) {
            reading_ = true;
            read_number = ++reads_requested_;
          }
          // Closing, a pending read may stay (gRPC ends it), once it has been started.
          const bool read_settled =
              !reading_ || (closing_ && reads_started_ == reads_requested_);
          if ((half_closed_ || cancelled_ || closing_) && read_settled && !writing_ &&
              in_flight_.empty() && cancelled_requests_.empty() && answers_.empty() &&
              pins_.empty() && ending_ == 0) {
            finished_ = true;
            finish = !status_.ok() || !cancelled_
                         ? status_
                         : grpc::Status(grpc::CANCELLED, "cancelled by the client");
          }
        }
      }
      if (!ending.empty()) {
        // A request's OnDone deletes it; the call cannot finish meanwhile.
        for (SessionRequestCall* request : ending) request->OnDone();
        absl::MutexLock lock(&mu_);
        for (SessionRequestCall* request : ending) request_charges_.erase(request);
        ending_ -= ending.size();
        continue;
      }
      // An answer with more queued behind it may wait in gRPC's buffer for them: one
      // flush for the lot (the last one written flushes).
      if (write) {
        StartWrite(&write_.message,
                   more_to_write ? grpc::WriteOptions().set_buffer_hint() : grpc::WriteOptions());
      }
      if (finish.has_value()) Finish(*finish);
      if (read) {
        StartRead(&read_);
        absl::MutexLock lock(&mu_);
        reads_started_ = std::max(reads_started_, read_number);
        if (closing_) continue;  // Close may be waiting for this read to be started
      }
      return;
    }
  }

  Sessions& sessions_;
  ServiceContext& service_;
  DynamicBatcher& batcher_;
  Timer& idle_timer_;
  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<MemoryBudget> host_budget_;  // null without budgets
  grpc::ByteBuffer read_;       // owned by the read in flight
  uint64_t messages_read_ = 0;  // only the read reaction touches it

  absl::Mutex mu_;
  // Requests started and not yet answered, by id.
  absl::flat_hash_map<uint64_t, SessionRequestCall*> in_flight_ ABSL_GUARDED_BY(mu_);
  // The request Run is starting (StartCompute), and whether End cancelled it meanwhile.
  SessionRequestCall* starting_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancel_when_started_ ABSL_GUARDED_BY(mu_) = false;
  // Requests cancelled (and answered so) whose work has not ended yet.
  absl::flat_hash_set<SessionRequestCall*> cancelled_requests_ ABSL_GUARDED_BY(mu_);
  std::deque<Waiting> answers_ ABSL_GUARDED_BY(mu_);  // to be written, in order
  Waiting write_ ABSL_GUARDED_BY(mu_);                // the answer being written
  uint64_t waiting_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of answers_ and write_
  uint64_t write_bytes_ ABSL_GUARDED_BY(mu_) = 0;    // of write_
  // The host-budget charge of each started request's message, until it ends.
  absl::flat_hash_map<SessionRequestCall*, MemoryBudget::Charge> request_charges_
      ABSL_GUARDED_BY(mu_);
  // Requests the session is still calling (starting or cancelling them) outside
  // mu_: they end only after, even if answered meanwhile.
  absl::flat_hash_map<SessionRequestCall*, int> pins_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<SessionRequestCall*> released_while_pinned_ ABSL_GUARDED_BY(mu_);
  std::vector<SessionRequestCall*> to_end_ ABSL_GUARDED_BY(mu_);  // released: OnDone due
  size_t ending_ ABSL_GUARDED_BY(mu_) = 0;  // taken from to_end_, OnDone running
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool half_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // by the client, or the call broke or failed
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;  // the server drains
  // Reads decided on and reads StartRead was called for: a pending read started.
  uint64_t reads_requested_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reads_started_ ABSL_GUARDED_BY(mu_) = 0;
  int drain_pins_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // OnDone came
  grpc::Status status_ ABSL_GUARDED_BY(mu_);  // the call's, when a message was no SessionRequest
};

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Sessions::Start(
    grpc::CallbackServerContext* context) {
  auto* session = new SessionReactor(*this, context);
  bool draining;
  {
    absl::MutexLock lock(&mu_);
    open_.insert(session);
    draining = draining_;
  }
  // Safe before it is returned: gRPC calls no reaction (OnDone) before.
  if (draining) session->Close();
  return session;
}

void Sessions::Drain() {
  std::vector<SessionReactor*> open;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    for (SessionReactor* session : open_) {
      session->Pin();  // OnDone, waiting for mu_ in Remove, cannot delete it now
      open.push_back(session);
    }
  }
  for (SessionReactor* session : open) {
    session->Close();
    session->Unpin();
  }
}

void Sessions::Remove(SessionReactor* session) {
  absl::MutexLock lock(&mu_);
  open_.erase(session);
}

}  // namespace gpucompute
