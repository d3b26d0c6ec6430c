// Striped transfers: one Download or Upload split into ranges of
// ClientOptions::stripe_bytes on several streams (and connections, with
// ClientOptions::stripe_channels), taken from a shared counter by `stripes`
// threads once the first range has gone (it gives a download's size and creates
// an upload's session). Only UNAVAILABLE (a broken connection) is retried: a
// download range is fetched again from its start, an upload range resumes with
// the bytes the session lacks (UploadStatus). The first other failure stops the rest.
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
#include "common/status_macros.h"
#include "common/thread_name.h"

namespace gpucompute::client {
namespace {

// 128 random bits as 32 hex digits: an upload session's token.
std::string NewSessionToken() {
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
// long) for it to be connected again. On the H100 machine a fresh stripe connection
// failed now and then ("failed to connect to all addresses") and the immediate retries
// with it.
constexpr absl::Duration kReconnectWait = absl::Seconds(5);

void AwaitReconnect(grpc::Channel& channel) {
  (void)channel.WaitForConnected(absl::ToChronoTime(absl::Now() + kReconnectWait));
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
    // Resume: only what the session lacks of this range goes again.
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
  header.set_session_token(NewSessionToken());

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
  range(0, *channel_);  // creates the session before the others join it
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
    return absl::DataLossError("striped upload: every range was sent but the session is incomplete");
  }
  return stored;
}

}  // namespace gpucompute::client
