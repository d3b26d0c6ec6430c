#include "client/session.h"

#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/error_details.h"
#include "gpucompute/v1/bulk_wire.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/client_callback.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace gpucompute::client {
namespace {

void SetOperation(v1::SessionRequest& message, const v1::DiscountProductRequest& request) {
  *message.mutable_discount_product() = request;
}
void SetOperation(v1::SessionRequest& message, const v1::HaversineGridRequest& request) {
  *message.mutable_haversine_grid() = request;
}
void SetOperation(v1::SessionRequest& message, const v1::NormalizeRequest& request) {
  *message.mutable_normalize() = request;
}
void SetOperation(v1::SessionRequest& message, const v1::LombScargleRequest& request) {
  *message.mutable_lombscargle() = request;
}

}  // namespace

// The call's reactor: one write in flight with the rest queued behind it, one read
// always pending, the requests in flight by id. Lives until OnDone, which the
// Session's destructor waits for.
class Session::Call final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  Call(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
      : options_(std::move(options)), stub_(std::move(channel)) {
    stub_.PrepareBidiStreamingCall(&context_, "/gpucompute.v1.Compute/Session", grpc::StubOptions(),
                                   this);
    StartRead(&reply_);
    StartCall();
  }

  void Send(uint64_t id, bool expect_data, grpc::ByteBuffer message, Client::ResultCallback done) {
    {
      absl::MutexLock lock(&mu_);
      if (!ended_) {
        pending_.emplace(id, Pending{expect_data, std::move(done)});
        writes_.push_back(std::move(message));
        if (!writing_) {
          writing_ = true;
          StartWrite(&writes_.front(), WriteOptionsLocked());
        }
        return;
      }
    }
    std::move(done)(absl::UnavailableError("the session's call has ended"));
  }

  uint64_t NextId() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

  // Half-closes once the queued writes are out; returns when OnDone has run.
  void Close() {
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
      if (!writing_ && !ended_) StartWritesDone();
    }
    done_.WaitForNotification();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writes_.pop_front();
    if (ok && !writes_.empty()) {
      StartWrite(&writes_.front(), WriteOptionsLocked());
      return;
    }
    writing_ = false;
    // A failed write means the call is over: OnDone answers what is pending.
    if (ok && closing_) StartWritesDone();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the call is ending: OnDone follows
    v1::SessionResponse response;
    grpc::ProtoBufferReader reader(&reply_);
    const bool parsed = response.ParseFromZeroCopyStream(&reader);
    reply_.Clear();
    Pending pending;
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(response.id());
      if (!parsed || it == pending_.end()) {
        // A broken answer: nothing can be told apart any more.
        broken_ = true;
        context_.TryCancel();
        return;
      }
      pending = std::move(it->second);
      pending_.erase(it);
    }
    StartRead(&reply_);
    std::move(pending.done)(Decode(response, pending.expect_data));
  }

  void OnDone(const grpc::Status& status) override {
    absl::flat_hash_map<uint64_t, Pending> orphans;
    bool broken = false;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      orphans.swap(pending_);
      broken = broken_;
    }
    const absl::Status why =
        broken ? absl::DataLossError("a session answer could not be parsed or named no request in flight")
        : status.ok() ? absl::DataLossError("the session's call ended without answering this request")
                      : ToAbslStatus(status);
    for (auto& [id, pending] : orphans) std::move(pending.done)(why);
    done_.Notify();  // the last touch: Close may destroy this right after
  }

 private:
  struct Pending {
    bool expect_data = true;
    Client::ResultCallback done;
  };

  // A write with more queued behind it may wait in gRPC's buffer for them: one flush
  // for the lot rather than one a request.
  grpc::WriteOptions WriteOptionsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    grpc::WriteOptions options;
    if (writes_.size() > 1) options.set_buffer_hint();
    return options;
  }

  absl::StatusOr<Result> Decode(v1::SessionResponse& response, bool expect_data) const {
    if (response.has_error()) {
      return WithErrorDetails(absl::Status(static_cast<absl::StatusCode>(response.error().code()),
                                           response.error().message()),
                              response.error().details());
    }
    if (!response.has_complete()) {
      return absl::DataLossError(
          absl::StrCat("session answer ", response.id(), " carries neither a result nor an error"));
    }
    ResultAssembler assembler(
        {.expect_data = expect_data, .max_result_bytes = options_.max_result_bytes});
    v1::ResultChunk chunk;
    chunk.mutable_complete()->Swap(response.mutable_complete());
    if (absl::Status framing = assembler.Add(chunk); !framing.ok()) return framing;
    return std::move(assembler).Finish();
  }

  const ClientOptions options_;
  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::ByteBuffer reply_;  // touched by the one read in flight only
  std::atomic<uint64_t> next_id_{1};
  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> writes_ ABSL_GUARDED_BY(mu_);  // front: the write in flight
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;   // no more answers will come
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // an answer made no sense: the call was cancelled
  absl::Notification done_;                    // OnDone has run every callback
};

Session::Session(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : call_(std::make_unique<Call>(std::move(channel), std::move(options))) {}

Session::~Session() { call_->Close(); }

template <typename Request>
void Session::StartSingleMessage(const Request& request, Client::ResultCallback done) {
  v1::SessionRequest message;
  message.set_id(call_->NextId());
  SetOperation(message, request);
  call_->Send(message.id(), ResultDataComesBack(request.output()), v1::wire::SerializedMessage(message),
              std::move(done));
}

template void Session::StartSingleMessage(const v1::DiscountProductRequest&, Client::ResultCallback);
template void Session::StartSingleMessage(const v1::HaversineGridRequest&, Client::ResultCallback);
template void Session::StartSingleMessage(const v1::NormalizeRequest&, Client::ResultCallback);
template void Session::StartSingleMessage(const v1::LombScargleRequest&, Client::ResultCallback);

}  // namespace gpucompute::client
