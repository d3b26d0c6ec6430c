#include "server/dynamic_batcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/memory/memory_budget.h"

namespace gpucompute {
namespace {

// The operation the requests of one key run as together: stacked operands
// gathered from the requests' own bytes (copied once, straight to the backend),
// shared ones those of the first request, the result stacked likewise, and the
// first request's run (one key: same options).
PreparedOperation Stack(const std::vector<BatchMember*>& members) {
  PreparedOperation& first = members.front()->prepared;
  const BatchPlan& plan = *first.batch;
  PreparedOperation stacked;
  stacked.out_dtype = first.out_dtype;
  int64_t rows = 0;
  for (const BatchMember* member : members) {
    rows += member->prepared.batch->out[0];
    stacked.work += member->prepared.work;
  }
  stacked.out_shape = plan.out;
  stacked.out_shape[0] = rows;
  for (size_t i = 0; i < first.operands.size(); ++i) {
    OperandSpec operand = first.operands[i];
    if (!plan.stacked[i].empty()) {
      operand.shape = plan.stacked[i];
      operand.shape[0] = 0;
      operand.tensor = nullptr;
      operand.pieces.reserve(members.size());
      for (const BatchMember* member : members) {
        operand.shape[0] += member->prepared.batch->stacked[i][0];
        const std::string& data = member->prepared.operands[i].tensor->data();
        operand.pieces.push_back({data.data(), data.size()});
      }
    }
    stacked.operands.push_back(std::move(operand));
  }
  stacked.run = [&run = first.run](Backend& backend, std::span<const std::shared_ptr<Array>> in,
                                   Array& out, OpContext& ctx) { return run(backend, in, out, ctx); };
  return stacked;
}

int64_t ElementCount(const Shape& shape) {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

}  // namespace

DynamicBatcher::DynamicBatcher(ServiceContext& service)
    : state_(std::make_shared<State>(service)) {
  if (service.config.batch_window > absl::ZeroDuration()) timer_ = std::make_unique<Timer>();
}

DynamicBatcher::~DynamicBatcher() {
  timer_.reset();  // each window's drain either ran or was dropped
  absl::MutexLock lock(&state_->mu);
  for (auto& [key, group] : state_->groups) {
    state_->service.executor.SubmitContinuation(
        [state = state_, key = key] { Drain(state, key); });
  }
}

bool DynamicBatcher::Accepts(const PreparedOperation& prepared, bool keep_on_device) const {
  const ServerConfig& config = state_->service.config;
  // A result written into a shared-memory slice (output_view) runs alone.
  return config.batching && config.max_batch_size > 1 && !keep_on_device &&
         prepared.output_view == nullptr && prepared.batch.has_value() &&
         prepared.work <= config.small_request_work;
}

absl::Status DynamicBatcher::Submit(BatchMember member) {
  State& state = *state_;
  // Waiting to be batched is waiting for a thread: the bound of the lane the
  // request would take.
  const ServerConfig& config = state.service.config;
  const bool small_lane = state.service.executor.small_lane_threads() > 0;
  const size_t limit =
      static_cast<size_t>(small_lane ? config.max_small_queue_depth : config.max_queue_depth);
  std::string key = absl::StrCat(member.client, "|", member.prepared.batch->key);
  const Operation op = member.op;
  bool in_place = false;
  absl::ReleasableMutexLock lock(&state.mu);
  size_t& mine = state.waiting_by_client[member.client];
  if (mine >= limit) {
    if (mine == 0) state.waiting_by_client.erase(member.client);
    state.service.metrics.Rejected(Rejection::kQueueFull);
    return absl::ResourceExhaustedError(absl::StrCat(
        small_lane ? "small-request queue is full: " : "request queue is full: ", mine,
        " requests of this connection waiting to be batched (",
        small_lane ? "max_small_queue_depth " : "max_queue_depth ", limit, ")"));
  }
  State::Group& group = state.groups[key];
  if (!group.drain_scheduled) {  // the group is empty: this request opens it
    group.client = member.client;
    // The window only pays off while others of this key are in flight: a lone
    // request goes at once.
    const bool lone = !state.running.contains(key);
    if (lone && member.prepared.work <= config.in_place_work &&
        state.service.executor.BeginInPlace()) {
      // Nothing waits for a thread and none of its kind runs: queueing it would
      // only add a thread's wake-up, so it runs here, once counted in.
      in_place = true;
    } else if (timer_ == nullptr || lone) {
      // In turn with every other small request of this client (drains of the
      // rest of a batch are continuations: they waited their turn).
      absl::Status queued =
          state.service.SubmitRequest(DrainTask(state_, key), member.client, Executor::Lane::kSmall);
      if (!queued.ok()) {
        state.groups.erase(key);
        if (mine == 0) state.waiting_by_client.erase(member.client);
        return queued;
      }
    } else {
      ScheduleWindow(key, member.client);
    }
    group.drain_scheduled = true;
  }
  group.members.push_back(std::move(member));
  ++mine;
  ++state.waiting;
  lock.Release();
  if (in_place) {
    state.service.metrics.RanInPlace(op);
    Drain(state_, key);
    state.service.executor.EndInPlace();
  }
  return absl::OkStatus();
}

void DynamicBatcher::State::Left(const std::string& client, size_t count) {
  waiting -= count;
  auto it = waiting_by_client.find(client);
  if (it == waiting_by_client.end()) return;
  it->second -= count;
  if (it->second == 0) waiting_by_client.erase(it);
}

Executor::RequestTask DynamicBatcher::DrainTask(std::shared_ptr<State> state, std::string key) {
  return [state = std::move(state), key = std::move(key)](absl::Status admitted) {
    if (admitted.ok()) {
      Drain(state, key);
    } else {
      Refuse(*state, key, admitted);
    }
  };
}

size_t DynamicBatcher::waiting() const {
  absl::MutexLock lock(&state_->mu);
  return state_->waiting;
}

void DynamicBatcher::ScheduleWindow(const std::string& key, const std::string& client) {
  timer_->Schedule(absl::Now() + state_->service.config.batch_window,
                   [state = state_, key, client] {
                     absl::Status queued = state->service.SubmitRequest(
                         DrainTask(state, key), client, Executor::Lane::kSmall);
                     if (!queued.ok()) Refuse(*state, key, queued);
                   });
}

void DynamicBatcher::Refuse(State& state, const std::string& key, const absl::Status& status) {
  std::vector<BatchMember> refused;
  {
    absl::MutexLock lock(&state.mu);
    auto it = state.groups.find(key);
    if (it == state.groups.end()) return;
    refused = std::move(it->second.members);
    state.Left(it->second.client, refused.size());
    state.groups.erase(it);
  }
  const absl::Time now = absl::Now();
  for (BatchMember& member : refused) std::move(member.deliver)(status, now);
}

void DynamicBatcher::Drain(const std::shared_ptr<State>& state, const std::string& key) {
  std::vector<BatchMember> batch;
  {
    absl::MutexLock lock(&state->mu);
    auto it = state->groups.find(key);
    if (it == state->groups.end() || it->second.members.empty()) return;
    std::vector<BatchMember>& waiting = it->second.members;
    // A batch stays a small request: at most max_batch_size requests and
    // small_request_work units (more only makes each unit slower on a CPU).
    const ServerConfig& config = state->service.config;
    const size_t most = std::min(waiting.size(), static_cast<size_t>(config.max_batch_size));
    size_t take = 1;
    for (int64_t work = waiting[0].prepared.work;
         take < most && work + waiting[take].prepared.work <= config.small_request_work; ++take) {
      work += waiting[take].prepared.work;
    }
    batch.assign(std::make_move_iterator(waiting.begin()),
                 std::make_move_iterator(waiting.begin() + take));
    waiting.erase(waiting.begin(), waiting.begin() + take);
    state->Left(it->second.client, take);
    if (waiting.empty()) {
      state->groups.erase(it);
    } else {  // the rest make the next batch, at once: they waited their window
      state->service.executor.SubmitContinuation([state, key] { Drain(state, key); });
    }
    ++state->running[key];
  }
  const absl::Time started = absl::Now();
  std::vector<Outcome> outcomes = Run(state->service, batch, started);
  {
    // No longer running before anyone hears back: a caller's next request must
    // not find its own finished one still running (and wait for a window).
    absl::MutexLock lock(&state->mu);
    auto it = state->running.find(key);
    if (--it->second == 0) state->running.erase(it);
  }
  for (Outcome& outcome : outcomes) {
    std::move(outcome.member->deliver)(std::move(outcome.source), started);
  }
}

absl::StatusOr<StreamSource> DynamicBatcher::RunAlone(ServiceContext& service,
                                                      BatchMember& member) {
  OpContext ctx;
  ctx.cancelled = member.cancelled;
  StreamSource source;
  absl::StatusOr<std::shared_ptr<Array>> out =
      Execute(member.prepared, service.backend, service.device_queues, service.metrics, ctx,
              source.times, /*result_to_host=*/true);
  service.metrics.ObserveBatch(member.op, 1);
  if (!out.ok()) return out.status();
  source.array = *std::move(out);
  return source;
}

std::vector<DynamicBatcher::Outcome> DynamicBatcher::Run(ServiceContext& service,
                                                         std::vector<BatchMember>& members,
                                                         absl::Time started) {
  std::vector<Outcome> outcomes;
  outcomes.reserve(members.size());
  // Requests that left before the launch get their own status.
  std::vector<BatchMember*> live;
  for (BatchMember& member : members) {
    if (member.cancelled != nullptr && member.cancelled->load()) {
      outcomes.push_back({&member, absl::CancelledError("cancelled while queued")});
    } else if (member.deadline < started) {
      service.metrics.Rejected(Rejection::kDeadlineExceeded);
      outcomes.push_back(
          {&member, absl::DeadlineExceededError("deadline passed while the request was queued")});
    } else {
      live.push_back(&member);
    }
  }
  if (live.size() == 1) outcomes.push_back({live.front(), RunAlone(service, *live.front())});
  if (live.size() <= 1) return outcomes;

  PreparedOperation stacked = Stack(live);
  OpContext ctx;  // not cancelled as a whole; a request cancelled now drops its part
  ExecutionTimes times;
  absl::StatusOr<std::shared_ptr<Array>> out =
      Execute(stacked, service.backend, service.device_queues, service.metrics, ctx, times,
              /*result_to_host=*/true);
  // A device result goes to the host in one copy, charged while it lives (the
  // members' slices share it); a host result (CPU backend) is sliced as it is.
  struct HostResult {
    std::string bytes;
    MemoryBudget::Charge charge;
  };
  std::shared_ptr<std::string> host;
  if (out.ok() && (*out)->device() != kHostDevice) {
    auto owner = std::make_shared<HostResult>();
    host = std::shared_ptr<std::string>(owner, &owner->bytes);
    const absl::Time copy_start = absl::Now();
    absl::Status copied = absl::OkStatus();
    if (std::shared_ptr<MemoryBudget> budget = HostMemoryBudget(service.backend)) {
      absl::StatusOr<MemoryBudget::Charge> reserved = budget->Reserve((*out)->bytes());
      if (reserved.ok()) owner->charge = *std::move(reserved);
      copied = reserved.status();
    }
    if (copied.ok()) {
      host->resize((*out)->bytes());
      copied = service.backend.CopyFromArray(**out, 0, host->size(), host->data());
    }
    if (copied.ok()) {
      service.metrics.Transferred(Direction::kDeviceToHost, host->size(), absl::Now() - copy_start);
    } else {
      out = copied;
    }
  }
  if (!out.ok()) {
    // Each request alone: a bad one fails with its own message, the others run.
    for (BatchMember* member : live) outcomes.push_back({member, RunAlone(service, *member)});
    return outcomes;
  }
  service.metrics.ObserveBatch(live.front()->op, static_cast<int>(live.size()));
  times.batch_size = static_cast<int>(live.size());
  int64_t offset = 0;  // elements
  for (BatchMember* member : live) {
    const int64_t count = ElementCount(member->prepared.out_shape);
    StreamSource source;
    source.array = std::make_shared<ArraySlice>(*out, offset, member->prepared.out_shape, count);
    source.times = times;
    if (host != nullptr) {
      source.host = host;
      source.host_offset = static_cast<uint64_t>(offset) * ElementSize(stacked.out_dtype);
    }
    offset += count;
    outcomes.push_back({member, std::move(source)});
  }
  return outcomes;
}

}  // namespace gpucompute
