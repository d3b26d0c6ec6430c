// Client::StripedDownload: one Download split into ranged Downloads on several
// streams (and connections, with ClientOptions::stripe_channels), each range
// copied straight to its place in the result. The first range's header gives
// the size; the remaining ranges are then taken from a shared counter by
// `stripes` threads. A range whose stream breaks (UNAVAILABLE) is fetched again
// from its start; nothing else is retried, and the first failure stops the others.
#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "common/status_macros.h"

namespace gpucompute::client {

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
  std::atomic<uint64_t> next_stripe{1};
  std::vector<std::thread> workers;
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
  std::string owned;  // the result's memory when the caller gave no destination
  first.destination = [&](const v1::ResultHeader& header) -> absl::StatusOr<char*> {
    total = header.total_bytes();
    if (destination) {
      GC_ASSIGN_OR_RETURN(memory, destination(header));
    } else {
      owned.resize(total);
      memory = owned.data();
    }
    const uint64_t stripes = (total + stripe - 1) / stripe;
    const int threads =
        stripes > 1 ? static_cast<int>(std::min<uint64_t>(options_.stripes, stripes - 1)) : 0;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t, stripes] {
        grpc::Channel& channel = *channels[(t + 1) % channels.size()];
        for (uint64_t k = next_stripe++; k < stripes && !failed(); k = next_stripe++) {
          v1::DownloadRequest range = request;
          range.set_offset(k * stripe);
          range.set_length(std::min(stripe, total - k * stripe));
          const absl::Status status = DownloadRange(channel, range, total, memory);
          if (!status.ok()) return fail(status);
          report(range.length());
        }
      });
    }
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

}  // namespace gpucompute::client
