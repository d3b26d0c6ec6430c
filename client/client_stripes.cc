// Striped transfers: one Download or Upload split into ranges of
// ClientOptions::stripe_bytes on several streams (and connections, with
// ClientOptions::stripe_channels), taken from a shared counter by `stripes`
// threads once the first range has gone (it gives a download's size and creates
// a resumable upload). Only UNAVAILABLE (a broken connection) is retried: a
// download range is fetched again from its start, an upload range resumes with
// the bytes the upload lacks (UploadStatus). The first other failure stops the rest.
// A striped StreamingCompute runs one call per range of the leading axis at once,
// each on the next stripe connection; one failing with UNAVAILABLE runs again whole.
#include <algorithm>
#include <atomic>
#include <functional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "common/thread_name.h"

namespace gpucompute::client {
namespace {

// 128 random bits as 32 hex digits: a resumable upload's token.
std::string NewUploadToken() {
  std::random_device random;
  std::string token;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&token, absl::Hex(random(), absl::kZeroPad8));
  return token;
}

// Runs run(k) for k in [1, count) on up to `threads` threads, k from a shared
// counter; stops taking new k once failed() says so.
void ForEachRange(uint64_t count, int threads, const std::function<void(uint64_t, int)>& run,
                  const std::function<bool()>& failed) {
  std::atomic<uint64_t> next{1};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads && static_cast<uint64_t>(t) + 1 < count; ++t) {
    workers.emplace_back([&, t] {
      NameThisThread("gc-stripe");  // per-thread CPU (perf, /proc) tells stripes apart
      for (uint64_t k = next++; k < count && !failed(); k = next++) run(k, t);
    });
  }
  for (std::thread& worker : workers) worker.join();
}

// Before a range is tried again after UNAVAILABLE: a connection that failed is in
// gRPC's reconnect backoff, and a call started then fails at once; wait (at most this
// long) for it to be connected again: a fresh stripe connection fails now and then
// ("failed to connect to all addresses"), and immediate retries would fail with it.
constexpr absl::Duration kReconnectWait = absl::Seconds(5);

void AwaitReconnect(grpc::Channel& channel) {
  (void)channel.WaitForConnected(absl::ToChronoTime(absl::Now() + kReconnectWait));
}

// One trailer for calls that ran at once: work summed, waits and spans the longest.
void MergeTrailer(const v1::ResultTrailer& part, v1::ResultTrailer& merged) {
  v1::Timing& timing = *merged.mutable_timing();
  timing.set_transfer_in_us(timing.transfer_in_us() + part.timing().transfer_in_us());
  timing.set_compute_us(timing.compute_us() + part.timing().compute_us());
  timing.set_transfer_out_us(timing.transfer_out_us() + part.timing().transfer_out_us());
  timing.set_queue_us(std::max(timing.queue_us(), part.timing().queue_us()));
  timing.set_total_us(std::max(timing.total_us(), part.timing().total_us()));
  merged.set_streamed_chunks(merged.streamed_chunks() + part.streamed_chunks());
}

}  // namespace

absl::Status Client::DownloadRange(grpc::Channel& channel, const v1::DownloadRequest& request,
                                   uint64_t total_bytes, char* destination) const {
  ResultAssembler::Options options = AssemblerOptions(/*expect_data=*/true, {});
  options.range_begin = request.offset();
  options.range_end = request.offset() + request.length();
  options.destination = [total_bytes, destination](
                            const v1::ResultHeader& header) -> absl::StatusOr<char*> {
    if (header.total_bytes() != total_bytes) {
      return absl::DataLossError(absl::StrCat("striped download: a stripe's header declares ",
                                              header.total_bytes(), " bytes, the first ",
                                              total_bytes));
    }
    return destination;
  };
  absl::Status status;
  for (int attempt = 0; attempt <= options_.stripe_retries; ++attempt) {
    if (attempt > 0) AwaitReconnect(channel);
    status = ResultStream(download_method_, request, options, &channel).status();
    if (status.code() != absl::StatusCode::kUnavailable) break;
  }
  return status;
}

absl::StatusOr<Result> Client::StripedDownload(const std::string& buffer_id,
                                               const ResultDestination& destination,
                                               uint32_t chunk_bytes,
                                               const ProgressCallback& progress) {
  std::vector<grpc::Channel*> channels = {channel_.get()};
  for (const auto& channel : options_.stripe_channels) channels.push_back(channel.get());
  const uint64_t stripe = std::max<uint64_t>(options_.stripe_bytes, 1);

  v1::DownloadRequest request;
  request.set_buffer_id(buffer_id);
  request.set_chunk_bytes(chunk_bytes);
  request.set_length(stripe);

  absl::Mutex mu;
  absl::Status failure;  // the first failure of any stripe
  uint64_t done_bytes = 0;
  std::vector<std::thread> workers;  // one, running the ranges after the first
  uint64_t total = 0;
  char* memory = nullptr;
  const auto fail = [&](const absl::Status& status) {
    absl::MutexLock lock(&mu);
    if (failure.ok()) failure = status;
  };
  const auto failed = [&] {
    absl::MutexLock lock(&mu);
    return !failure.ok();
  };
  const auto report = [&](uint64_t bytes) {
    absl::MutexLock lock(&mu);
    done_bytes += bytes;
    if (progress) progress(done_bytes, total);
  };
  // The header of the first range: the size, the memory, then the other stripes.
  ResultAssembler::Options first = AssemblerOptions(/*expect_data=*/true, {});
  first.range_end = stripe;
  HostBytes owned;  // the result's memory when the caller gave no destination
  first.destination = [&](const v1::ResultHeader& header) -> absl::StatusOr<char*> {
    total = header.total_bytes();
    if (destination) {
      GC_ASSIGN_OR_RETURN(memory, destination(header));
    } else {
      owned = HostBytes::Allocate(total);
      memory = owned.data();
    }
    const uint64_t stripes = (total + stripe - 1) / stripe;
    // The other ranges start now, beside the rest of this one.
    workers.emplace_back([&, stripes] {
      ForEachRange(
          stripes, options_.stripes,
          [&](uint64_t k, int t) {
            v1::DownloadRequest range = request;
            range.set_offset(k * stripe);
            range.set_length(std::min(stripe, total - k * stripe));
            const absl::Status status =
                DownloadRange(*channels[(t + 1) % channels.size()], range, total, memory);
            if (!status.ok()) return fail(status);
            report(range.length());
          },
          failed);
    });
    return memory;
  };
  absl::StatusOr<Result> head = ResultStream(download_method_, request, std::move(first));
  if (head.ok()) {
    report(std::min(stripe, total));
  } else {
    fail(head.status());
  }
  for (std::thread& worker : workers) worker.join();
  GC_RETURN_IF_ERROR(failure);
  Result result = *std::move(head);
  result.data = std::move(owned);
  return result;
}

absl::StatusOr<std::vector<std::pair<uint64_t, uint64_t>>> Client::MissingRanges(
    const std::string& token, uint64_t begin, uint64_t end) const {
  GC_ASSIGN_OR_RETURN(const v1::UploadStatusResponse status, UploadStatus(token));
  std::vector<std::pair<uint64_t, uint64_t>> missing;
  uint64_t at = begin;
  for (const v1::UploadedRange& range : status.received()) {
    const uint64_t range_end = range.offset() + range.length();
    if (range_end <= at || range.offset() >= end) continue;
    if (range.offset() > at) missing.emplace_back(at, range.offset());
    at = std::max(at, range_end);
  }
  if (at < end) missing.emplace_back(at, end);
  return missing;
}

absl::StatusOr<v1::BufferInfo> Client::UploadRange(grpc::Channel& channel,
                                                   v1::UploadHeader header,
                                                   absl::string_view data, uint64_t begin,
                                                   uint64_t end) const {
  std::vector<std::pair<uint64_t, uint64_t>> todo = {{begin, end}};
  absl::StatusOr<v1::BufferInfo> info = v1::BufferInfo();
  for (int attempt = 0; attempt <= options_.stripe_retries; ++attempt) {
    if (attempt > 0) AwaitReconnect(channel);
    for (const auto& [from, to] : todo) {
      header.set_offset(from);
      info = UploadStream(channel, header, data.substr(from, to - from), {});
      if (!info.ok() || !info->id().empty()) break;
    }
    if (info.status().code() != absl::StatusCode::kUnavailable) return info;
    // Resume: only what the upload lacks of this range goes again.
    GC_ASSIGN_OR_RETURN(todo, MissingRanges(header.session_token(), begin, end));
    if (todo.empty()) return v1::BufferInfo();
  }
  return info;
}

absl::StatusOr<v1::BufferInfo> Client::StripedUpload(v1::UploadHeader header,
                                                     absl::string_view data,
                                                     const ProgressCallback& progress) {
  std::vector<grpc::Channel*> channels = {channel_.get()};
  for (const auto& channel : options_.stripe_channels) channels.push_back(channel.get());
  const uint64_t stripe = std::max<uint64_t>(options_.stripe_bytes, 1);
  const uint64_t total = data.size();
  const uint64_t count = (total + stripe - 1) / stripe;
  header.set_session_token(NewUploadToken());

  absl::Mutex mu;
  absl::Status failure;
  v1::BufferInfo stored;  // from the stream that ended with every byte there
  uint64_t done_bytes = 0;
  const auto finish_range = [&](uint64_t k, const absl::StatusOr<v1::BufferInfo>& info) {
    absl::MutexLock lock(&mu);
    if (!info.ok()) {
      if (failure.ok()) failure = info.status();
      return;
    }
    if (!info->id().empty()) stored = *info;
    done_bytes += std::min(stripe, total - k * stripe);
    if (progress) progress(done_bytes, total);
  };
  const auto failed = [&] {
    absl::MutexLock lock(&mu);
    return !failure.ok();
  };
  const auto range = [&](uint64_t k, grpc::Channel& channel) {
    finish_range(k, UploadRange(channel, header, data, k * stripe,
                                std::min(total, (k + 1) * stripe)));
  };
  if (progress) progress(0, total);
  range(0, *channel_);  // creates the upload before the others join it
  if (!failed()) {
    ForEachRange(count, options_.stripes,
                 [&](uint64_t k, int t) { range(k, *channels[(t + 1) % channels.size()]); },
                 failed);
  }
  GC_RETURN_IF_ERROR(failure);
  if (!stored.id().empty()) return stored;
  // Every byte is there but the stream that completed it broke before it ended:
  // a stream with no data stores the buffer.
  header.set_offset(total);
  GC_ASSIGN_OR_RETURN(stored, UploadStream(*channel_, header, {}, {}));
  if (stored.id().empty()) {
    return absl::DataLossError("striped upload: every range was sent but the upload is incomplete");
  }
  return stored;
}

absl::StatusOr<Result> Client::StripedStreamingCompute(
    const v1::StreamingComputeHeader& header, std::span<const absl::string_view> operands,
    uint64_t calls, const ResultDestination& destination, const ProgressCallback& progress) {
  std::vector<grpc::Channel*> channels = {channel_.get()};
  for (const auto& channel : options_.stripe_channels) channels.push_back(channel.get());
  const uint64_t leading = static_cast<uint64_t>(header.shape(0));
  const uint64_t slice_bytes = operands[0].size() / leading;  // of one leading index

  // The whole result's memory, before any call: every call writes its rows there.
  Result result;
  v1::ResultHeader& whole = result.header;
  whole.set_dtype(header.dtype());
  whole.mutable_shape()->CopyFrom(header.shape());
  whole.set_total_bytes(operands[0].size());
  char* memory = nullptr;
  if (destination) {
    GC_ASSIGN_OR_RETURN(memory, destination(whole));
  } else {
    result.data = HostBytes::Allocate(whole.total_bytes());
    memory = result.data.data();
  }

  absl::Mutex mu;
  absl::Status failure;  // the first failure; it cancels the other calls
  std::vector<uint64_t> done_by_call(calls, 0);
  // Each call's context in flight, replaced by a retry; null between attempts.
  std::vector<grpc::ClientContext*> in_flight(calls, nullptr);
  std::vector<v1::ResultTrailer> trailers(calls);
  const auto run = [&](uint64_t k) {
    const uint64_t begin = leading * k / calls, end = leading * (k + 1) / calls;
    v1::StreamingComputeHeader part = header;
    part.set_shape(0, static_cast<int64_t>(end - begin));
    std::vector<absl::string_view> part_operands;
    for (absl::string_view operand : operands) {
      part_operands.push_back(operand.substr(begin * slice_bytes, (end - begin) * slice_bytes));
    }
    const uint64_t part_bytes = (end - begin) * slice_bytes;
    grpc::Channel& channel = *channels[k % channels.size()];
    absl::StatusOr<Result> done = absl::UnknownError("not run");
    // A call is one range, rewritten whole: one that fails with UNAVAILABLE (a
    // connection that broke or did not open) runs again from its start.
    for (int attempt = 0; attempt <= options_.stripe_retries; ++attempt) {
      if (attempt > 0) AwaitReconnect(channel);
      grpc::ClientContext context;
      SetDeadline(context);
      {
        absl::MutexLock lock(&mu);
        if (!failure.ok()) return;  // another call failed: this one is not needed
        in_flight[k] = &context;
        done_by_call[k] = 0;
      }
      ResultAssembler::Options options = AssemblerOptions(/*expect_data=*/true, {});
      options.destination = [&, begin, part_bytes](
                                const v1::ResultHeader& got) -> absl::StatusOr<char*> {
        if (got.total_bytes() != part_bytes) {
          return absl::DataLossError(absl::StrCat("striped StreamingCompute: call ", k,
                                                  "'s header declares ", got.total_bytes(),
                                                  " bytes, its rows ", part_bytes));
        }
        return memory + begin * slice_bytes;
      };
      if (progress) {
        options.progress = [&, k](uint64_t bytes, uint64_t) {
          absl::MutexLock lock(&mu);
          done_by_call[k] = bytes;
          uint64_t sum = 0;
          for (uint64_t d : done_by_call) sum += d;
          progress(sum, operands[0].size());
        };
      }
      done = StreamingCall(channel, context, part, part_operands, part_bytes, std::move(options));
      {
        absl::MutexLock lock(&mu);
        in_flight[k] = nullptr;
      }
      if (done.status().code() != absl::StatusCode::kUnavailable) break;
    }
    absl::MutexLock lock(&mu);
    if (done.ok()) {
      trailers[k] = std::move(done->trailer);
      return;
    }
    if (!failure.ok()) return;  // cancelled by the first failure
    failure = WithContext(done.status(), absl::StrCat("striped StreamingCompute, call ", k,
                                                      " (leading rows ", begin, " to ", end - 1,
                                                      ")"));
    for (grpc::ClientContext* context : in_flight) {
      if (context != nullptr) context->TryCancel();
    }
  };
  std::vector<std::thread> threads;
  for (uint64_t k = 1; k < calls; ++k) {
    threads.emplace_back([&run, k] {
      NameThisThread("gc-stripe");
      run(k);
    });
  }
  run(0);
  for (std::thread& thread : threads) thread.join();
  GC_RETURN_IF_ERROR(failure);
  result.trailer = trailers[0];
  for (uint64_t k = 1; k < calls; ++k) MergeTrailer(trailers[k], result.trailer);
  return result;
}

}  // namespace gpucompute::client
