#include "client/bench.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/format.h"
#include "client/session.h"
#include "client/tensor.h"

namespace gpucompute::client {
namespace {

// Samples per Lomb-Scargle series and frequencies per periodogram; the batch
// size makes up the requested result size.
constexpr int64_t kLombScargleSamples = 256;
constexpr int64_t kLombScargleFrequencies = 256;
// Row length for Normalize; leading extent of the discount factors (M in the
// seed case (M, O) * (D, M, O)) and the number of value slices D.
constexpr int64_t kNormalizeRowLength = 256;
constexpr int64_t kDiscountRows = 64;
constexpr int64_t kDiscountSlices = 4;

// Uniform values in [low, high) of `dtype`, shaped `shape`.
v1::Tensor RandomTensor(v1::DType dtype, const Shape& shape, double low, double high,
                        std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uniform(low, high);
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  absl::StatusOr<v1::Tensor> tensor;
  if (dtype == v1::FLOAT32) {
    std::vector<float> values(count);
    for (float& value : values) value = static_cast<float>(uniform(rng));
    tensor = MakeTensor(values, shape);
  } else {
    std::vector<double> values(count);
    for (double& value : values) value = uniform(rng);
    tensor = MakeTensor(values, shape);
  }
  return *std::move(tensor);  // the shape matches the values by construction
}

// One prebuilt request per operation, reused by every thread (read-only).
struct Workload {
  v1::NormalizeRequest normalize;
  v1::HaversineGridRequest haversine;
  v1::DiscountProductRequest discount;
  v1::LombScargleRequest lombscargle;
};

Workload BuildWorkload(const BenchConfig& config) {
  std::mt19937_64 rng(config.seed);
  const int64_t size = static_cast<int64_t>(std::max<uint64_t>(config.size, 1));
  Workload workload;
  v1::OutputOptions output;
  output.set_chunk_bytes(config.chunk_bytes);
  output.set_accept_complete_result(config.complete_results);
  output.set_single_message(config.complete_results && config.unary_results);

  const int64_t rows = std::max<int64_t>(1, size / kNormalizeRowLength);
  *workload.normalize.mutable_input() =
      TensorOperand(RandomTensor(config.dtype, {rows, kNormalizeRowLength}, 0.5, 1.5, rng));
  workload.normalize.set_norm(v1::NORM_L2);
  *workload.normalize.mutable_output() = output;

  v1::LatLonMesh& mesh = *workload.haversine.mutable_mesh();
  const auto n_lat = static_cast<uint64_t>(std::max<double>(1, std::sqrt(size)));
  mesh.set_lat_start(-60);
  mesh.set_lat_stop(60);
  mesh.set_n_lat(n_lat);
  mesh.set_lon_start(-180);
  mesh.set_lon_stop(180);
  mesh.set_n_lon(std::max<uint64_t>(1, static_cast<uint64_t>(size) / n_lat));
  mesh.set_dtype(config.dtype);
  v1::GeoPoint& reference = *workload.haversine.add_references();
  reference.set_lat(48.8566);
  reference.set_lon(2.3522);
  *workload.haversine.mutable_output() = output;

  const int64_t columns = std::max<int64_t>(1, size / (kDiscountRows * kDiscountSlices));
  *workload.discount.mutable_factors() =
      TensorOperand(RandomTensor(config.dtype, {kDiscountRows, columns}, 0.9, 1.0, rng));
  *workload.discount.mutable_values() = TensorOperand(
      RandomTensor(config.dtype, {kDiscountSlices, kDiscountRows, columns}, 0, 100, rng));
  *workload.discount.mutable_output() = output;

  const int64_t batch = std::max<int64_t>(1, size / kLombScargleFrequencies);
  *workload.lombscargle.mutable_x() =
      TensorOperand(RandomTensor(config.dtype, {kLombScargleSamples}, 0, 100, rng));
  *workload.lombscargle.mutable_y() =
      TensorOperand(RandomTensor(config.dtype, {batch, kLombScargleSamples}, -1, 1, rng));
  v1::FrequencyGrid& grid = *workload.lombscargle.mutable_freq_grid();
  grid.set_start(0.01);
  grid.set_stop(10);
  grid.set_count(kLombScargleFrequencies);
  workload.lombscargle.set_precenter(true);
  *workload.lombscargle.mutable_output() = output;
  return workload;
}

absl::StatusOr<Result> Send(Client& client, const Workload& workload, BenchOp op) {
  switch (op) {
    case BenchOp::kNormalize:
      return client.Normalize(workload.normalize);
    case BenchOp::kHaversine:
      return client.HaversineGrid(workload.haversine);
    case BenchOp::kDiscount:
      return client.DiscountProduct(workload.discount);
    case BenchOp::kLombScargle:
      return client.LombScargle(workload.lombscargle);
    case BenchOp::kHealth: {
      absl::Status checked = client.Health().status();
      if (!checked.ok()) return checked;
      return Result{};
    }
  }
  return absl::InternalError("unknown operation");
}

// Starts one request of `op` on gRPC's callback API, as a call of its own (a Client)
// or on a Session; `done` runs on a gRPC thread.
template <typename Starter>
void Start(Starter& starter, const Workload& workload, BenchOp op, Client::ResultCallback done) {
  switch (op) {
    case BenchOp::kNormalize:
      return starter.StartSingleMessage(workload.normalize, std::move(done));
    case BenchOp::kHaversine:
      return starter.StartSingleMessage(workload.haversine, std::move(done));
    case BenchOp::kDiscount:
      return starter.StartSingleMessage(workload.discount, std::move(done));
    case BenchOp::kLombScargle:
      return starter.StartSingleMessage(workload.lombscargle, std::move(done));
    case BenchOp::kHealth:
      break;  // refused by RunBench
  }
  std::move(done)(absl::InternalError("no callback form of this operation"));
}

// What one thread (or callback slot) saw.
struct ThreadRecord {
  std::map<BenchOp, std::vector<absl::Duration>> latencies;
  uint64_t requests = 0;
  uint64_t result_bytes = 0;
  std::map<std::string, uint64_t> errors_by_code;
  std::map<std::string, std::string> example_error_by_code;

  void Add(BenchOp op, absl::Duration latency, const absl::StatusOr<Result>& result) {
    ++requests;
    if (result.ok()) {
      latencies[op].push_back(latency);
      result_bytes += result->data.size();
      return;
    }
    const std::string code = absl::StatusCodeToString(result.status().code());
    ++errors_by_code[code];
    example_error_by_code.emplace(code, result.status().message());
  }
};

// What drives the requests: the operations to draw from, when to stop, and the
// requests not yet claimed when a count is set.
struct Drive {
  const Workload& workload;
  std::vector<BenchOp> ops;  // each as often as its weight
  absl::Time stop;
  uint64_t count = 0;
  std::atomic<int64_t> remaining;

  bool Another() {
    if (absl::Now() >= stop) return false;
    return count == 0 || remaining.fetch_sub(1) > 0;
  }
};

// One thread per request in flight, each sending with the blocking API, request t
// on clients[t % clients.size()].
void RunThreads(std::span<Client* const> clients, Drive& drive, uint64_t seed,
                std::vector<ThreadRecord>& records) {
  std::vector<std::jthread> threads;
  for (size_t t = 0; t < records.size(); ++t) {
    threads.emplace_back([&, t, &client = *clients[t % clients.size()]] {
      std::mt19937_64 rng(seed + 1 + t);
      std::uniform_int_distribution<size_t> pick(0, drive.ops.size() - 1);
      while (drive.Another()) {
        const BenchOp op = drive.ops[pick(rng)];
        const absl::Time sent = absl::Now();
        absl::StatusOr<Result> result = Send(client, drive.workload, op);
        records[t].Add(op, absl::Now() - sent, result);
      }
    });
  }
}

// The requests in flight as slots on gRPC's callback API: each slot starts its next
// request from the completion of the previous one, on a gRPC thread; no thread per
// request; slot s on starters[s % starters.size()] (Clients or Sessions). Returns
// once every slot has stopped.
template <typename Starter>
void RunSlots(std::span<Starter* const> starters, Drive& drive, uint64_t seed,
              std::vector<ThreadRecord>& records) {
  // Kept alive by each request in flight: the slot that stops last may still be
  // returning through `next` when this function has returned.
  struct Slots : std::enable_shared_from_this<Slots> {
    absl::Mutex mu;
    size_t running ABSL_GUARDED_BY(mu) = 0;
    std::vector<std::mt19937_64> rngs;
    std::function<void(size_t)> next;  // starts slot s's next request, or stops the slot
  };
  auto slots = std::make_shared<Slots>();
  Slots* const shared = slots.get();
  {
    absl::MutexLock lock(&shared->mu);
    shared->running = records.size();
  }
  for (size_t s = 0; s < records.size(); ++s) shared->rngs.emplace_back(seed + 1 + s);
  shared->next = [starters, &drive, &records, shared](size_t s) {
    if (!drive.Another()) {
      absl::MutexLock lock(&shared->mu);
      --shared->running;
      return;
    }
    std::uniform_int_distribution<size_t> pick(0, drive.ops.size() - 1);
    const BenchOp op = drive.ops[pick(shared->rngs[s])];
    const absl::Time sent = absl::Now();
    Start(*starters[s % starters.size()], drive.workload, op,
          [&records, keep = shared->shared_from_this(), s, op, sent](
              absl::StatusOr<Result> result) {
            records[s].Add(op, absl::Now() - sent, result);
            keep->next(s);
          });
  };
  for (size_t s = 0; s < records.size(); ++s) shared->next(s);
  absl::MutexLock lock(&shared->mu);
  shared->mu.Await(absl::Condition(
      +[](size_t* running) { return *running == 0; }, &shared->running));
}

std::string FormatLatency(const LatencySummary& summary) {
  const auto ms = [](absl::Duration d) { return absl::ToDoubleMilliseconds(d); };
  return absl::StrFormat("p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms", ms(summary.p50),
                         ms(summary.p90), ms(summary.p99), ms(summary.max));
}

}  // namespace

LatencySummary Summarize(std::vector<absl::Duration>& latencies) {
  LatencySummary summary;
  summary.count = latencies.size();
  if (latencies.empty()) return summary;
  std::sort(latencies.begin(), latencies.end());
  const auto percentile = [&latencies](double p) {
    const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(latencies.size())));
    return latencies[std::clamp<size_t>(rank, 1, latencies.size()) - 1];
  };
  summary.p50 = percentile(0.50);
  summary.p90 = percentile(0.90);
  summary.p99 = percentile(0.99);
  summary.max = latencies.back();
  return summary;
}

absl::StatusOr<BenchReport> RunBench(Client& client, const BenchConfig& config,
                                     std::span<Client* const> more_clients) {
  if (config.concurrency < 1) {
    return absl::InvalidArgumentError("--concurrency must be at least 1");
  }
  if (config.mix.empty()) return absl::InvalidArgumentError("--mix names no operation");
  if (config.count == 0 && config.duration <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("give --duration above 0 or --count");
  }
  if (config.sessions_per_connection < 1) {
    return absl::InvalidArgumentError("--sessions_per_connection must be at least 1");
  }
  if (config.session && !config.callbacks) {
    return absl::InvalidArgumentError("--session sends the requests of callback slots: it needs --callbacks");
  }
  if (config.callbacks) {
    if (!config.complete_results || !config.unary_results) {
      return absl::InvalidArgumentError(
          "--callbacks reads single-message results: it needs --complete_results and "
          "--unary_results");
    }
    for (const MixEntry& entry : config.mix) {
      if (entry.op == BenchOp::kHealth) {
        return absl::InvalidArgumentError("--callbacks runs compute operations only, not health");
      }
    }
  }
  const Workload workload = BuildWorkload(config);
  Drive drive{.workload = workload, .count = config.count};
  for (const MixEntry& entry : config.mix) drive.ops.insert(drive.ops.end(), entry.weight, entry.op);
  drive.remaining = config.count == 0 ? -1 : static_cast<int64_t>(config.count);
  const absl::Time start = absl::Now();
  drive.stop = start + config.duration;
  std::vector<ThreadRecord> records(config.concurrency);
  std::vector<Client*> clients = {&client};
  clients.insert(clients.end(), more_clients.begin(), more_clients.end());
  if (config.session) {
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<Session*> starters;
    for (int k = 0; k < config.sessions_per_connection; ++k) {
      for (Client* each : clients) {
        sessions.push_back(std::make_unique<Session>(each->channel()));
        starters.push_back(sessions.back().get());
      }
    }
    RunSlots<Session>(starters, drive, config.seed, records);
  } else if (config.callbacks) {
    RunSlots<Client>(clients, drive, config.seed, records);
  } else {
    RunThreads(clients, drive, config.seed, records);
  }

  BenchReport report;
  report.elapsed = absl::Now() - start;
  std::vector<absl::Duration> all;
  std::map<BenchOp, std::vector<absl::Duration>> by_op;
  for (ThreadRecord& record : records) {
    report.requests += record.requests;
    report.result_bytes += record.result_bytes;
    for (auto& [op, latencies] : record.latencies) {
      all.insert(all.end(), latencies.begin(), latencies.end());
      by_op[op].insert(by_op[op].end(), latencies.begin(), latencies.end());
    }
    for (const auto& [code, count] : record.errors_by_code) report.errors_by_code[code] += count;
    report.example_error_by_code.merge(record.example_error_by_code);
  }
  report.succeeded = all.size();
  report.latency = Summarize(all);
  for (auto& [op, latencies] : by_op) report.latency_by_op[op] = Summarize(latencies);
  return report;
}

std::string FormatBenchReport(const BenchReport& report) {
  const double seconds = std::max(absl::ToDoubleSeconds(report.elapsed), 1e-9);
  std::string out =
      absl::StrFormat("requests    %d in %.2f s (%d ok, %d failed)\n", report.requests, seconds,
                      report.succeeded, report.requests - report.succeeded);
  absl::StrAppendFormat(
      &out, "throughput  %.1f req/s, %s/s of results\n",
      static_cast<double>(report.succeeded) / seconds,
      FormatBytes(static_cast<uint64_t>(static_cast<double>(report.result_bytes) / seconds)));
  if (report.succeeded > 0) {
    absl::StrAppendFormat(&out, "latency     %s\n", FormatLatency(report.latency));
    for (const auto& [op, summary] : report.latency_by_op) {
      absl::StrAppendFormat(&out, "  %-12s %6d ok  %s\n", BenchOpName(op), summary.count,
                            FormatLatency(summary));
    }
  }
  if (!report.errors_by_code.empty()) {
    absl::StrAppend(&out, "errors\n");
    for (const auto& [code, count] : report.errors_by_code) {
      absl::StrAppendFormat(&out, "  %-20s %6d  e.g. %s\n", code, count,
                            report.example_error_by_code.at(code));
    }
  }
  return out;
}

}  // namespace gpucompute::client
