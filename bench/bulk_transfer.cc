// bulk-transfer-bench: one large Upload and Download through the C++ client
// library, as a caller would use it, timed end to end (median of --repeat runs)
// and checked byte-exact. With --server_pid it also reads the server's CPU time
// (/proc/PID/stat) around each transfer: core-seconds per GB moved.
//
//   bulk-transfer-bench --target=127.0.0.1:50051 --bytes=2147483648 --stripes=1
//
// Prints one line per direction:  cpp stripes=N upload 2.00 GiB median 0.61 s 3.5 GB/s ...
//
// With --streaming: seed 000's discount product instead, float64 values (D, 1e6, 5)
// of --bytes streamed through StreamingCompute against (1e6, 5) factors stored on the
// server (--stripes calls at once over ranges of D), the result checked exactly:
//   cpp stripes=N streaming 2.00 GiB median 1.2 s 1.8 GB/s each way ...
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/bulk_memory.h"
#include "client/client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "server address");
ABSL_FLAG(uint64_t, bytes, uint64_t{2} << 30, "bytes per transfer (a float32 array)");
ABSL_FLAG(int, repeat, 3, "transfers per direction; the median is reported");
ABSL_FLAG(int, stripes, 1, "streams one transfer is split across (ClientOptions::stripes)");
ABSL_FLAG(uint64_t, stripe_bytes, uint64_t{64} << 20, "bytes of each stripe (ClientOptions::stripe_bytes)");
ABSL_FLAG(uint32_t, upload_chunk_bytes, 0, "Upload message size; 0: the client's default");
ABSL_FLAG(uint32_t, download_chunk_bytes, 0, "Download chunk size; 0: the server's default");
ABSL_FLAG(int, server_pid, 0, "the server's pid, to report its CPU time per GB moved");
ABSL_FLAG(std::string, label, "cpp", "first column of the output lines");
ABSL_FLAG(bool, reuse_destination, false,
          "download into one caller buffer, reused (DownloadTo), rather than fresh memory "
          "per download: what a caller that downloads repeatedly does, no page faults");
ABSL_FLAG(bool, streaming, false,
          "time StreamingCompute (a discount product, bytes of float64 values each way) "
          "instead of Upload and Download");
ABSL_FLAG(uint64_t, streaming_total_bytes, 0,
          "with --streaming: values streamed per repeat as back-to-back calls of --bytes each "
          "(seed 000's full case: 80000000000), results into one reused buffer, each call "
          "checked between calls; the calls' time is reported");
ABSL_FLAG(std::vector<std::string>, channel_args, {},
          "integer gRPC channel arguments of the client's channels, grpc.NAME=VALUE,...");

namespace gc = gpucompute::client;

namespace {

// A /proc stat file's command name and its utime + stime in seconds; nullopt when
// unreadable (the process or thread is gone).
struct StatCpu {
  std::string name;
  double seconds = 0;
};
std::optional<StatCpu> ReadStatCpu(const std::filesystem::path& stat_file) {
  std::ifstream stat(stat_file);
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t open = text.find('('), close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return std::nullopt;
  // Fields after the command name: state is field 3, utime 14, stime 15.
  std::vector<std::string> fields = absl::StrSplit(text.substr(close + 2), ' ');
  if (fields.size() < 13) return std::nullopt;
  return StatCpu{text.substr(open + 1, close - open - 1),
                 (std::stod(fields[11]) + std::stod(fields[12])) /
                     static_cast<double>(sysconf(_SC_CLK_TCK))};
}

// utime + stime of `pid` in seconds; 0 when unknown.
double CpuSeconds(int pid) {
  if (pid <= 0) return 0;
  const std::optional<StatCpu> cpu = ReadStatCpu(absl::StrFormat("/proc/%d/stat", pid));
  return cpu.has_value() ? cpu->seconds : 0;
}

// This process's CPU time, all threads, in seconds.
double OwnCpuSeconds() { return CpuSeconds(getpid()); }

// CPU seconds of `pid`'s threads, summed by thread name (/proc/PID/task/TID/stat):
// which of the server's threads (gRPC's, the executor's, the driver's) a transfer
// keeps busy.
std::map<std::string, double> ThreadCpuSeconds(int pid) {
  std::map<std::string, double> by_name;
  if (pid <= 0) return by_name;
  std::error_code error;
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrFormat("/proc/%d/task", pid), error)) {
    if (std::optional<StatCpu> cpu = ReadStatCpu(task.path() / "stat")) {
      by_name[cpu->name] += cpu->seconds;
    }
  }
  return by_name;
}

// Adds after - before, by thread name, into `into`.
void AddThreadCpu(const std::map<std::string, double>& before,
                  const std::map<std::string, double>& after, std::map<std::string, double>& into) {
  for (const auto& [name, seconds] : after) {
    auto was = before.find(name);
    into[name] += seconds - (was == before.end() ? 0.0 : was->second);
  }
}

void ReportThreads(const std::string& what, uint64_t bytes, int repeats,
                   const std::map<std::string, double>& by_name) {
  if (by_name.empty()) return;
  std::string line;
  const double gb = static_cast<double>(bytes) * repeats / 1e9;
  for (const auto& [name, seconds] : by_name) {
    if (seconds / gb >= 0.005) line += absl::StrFormat(" %s=%.2f", name, seconds / gb);
  }
  std::cout << absl::StrFormat("%s stripes=%d %s server threads core-s/GB:%s\n",
                               absl::GetFlag(FLAGS_label), absl::GetFlag(FLAGS_stripes), what, line);
}

struct Sample {
  double seconds = 0;
  double server_cpu = 0;
  double client_cpu = 0;
};

void Report(const std::string& what, uint64_t bytes, std::vector<Sample> samples) {
  std::sort(samples.begin(), samples.end(),
            [](const Sample& a, const Sample& b) { return a.seconds < b.seconds; });
  const Sample& median = samples[samples.size() / 2];
  const double gb = static_cast<double>(bytes) / 1e9;
  std::cout << absl::StrFormat(
      "%s stripes=%d %s %.2f GiB median %.3f s %.2f GB/s (best %.2f) server %.2f client %.2f "
      "core-s/GB\n",
      absl::GetFlag(FLAGS_label), absl::GetFlag(FLAGS_stripes), what,
      static_cast<double>(bytes) / (1 << 30), median.seconds, gb / median.seconds,
      gb / samples.front().seconds, median.server_cpu / gb, median.client_cpu / gb);
}

// Seed 000's shape: factors (kFactorRows, 5) float64 broadcast over (D, kFactorRows, 5).
constexpr int64_t kFactorRows = 1000000;
constexpr int64_t kFactorElements = kFactorRows * 5;

int RunStreaming(gc::Client& client, uint64_t bytes, int pid) {
  const int64_t slices = std::max<int64_t>(1, bytes / (kFactorElements * 8));
  const uint64_t elements = static_cast<uint64_t>(slices * kFactorElements);
  std::vector<double> factors(kFactorElements), values(elements);
  for (int64_t i = 0; i < kFactorElements; ++i) factors[i] = 0.5 + static_cast<double>(i % 977) / 1024;
  for (uint64_t i = 0; i < elements; ++i) values[i] = static_cast<double>(i % 1000003) - 5e5;
  const int64_t factors_shape[] = {kFactorRows, 5};
  absl::StatusOr<gpucompute::v1::BufferInfo> stored = client.Upload(
      "factors", gpucompute::v1::FLOAT64, factors_shape,
      absl::string_view(reinterpret_cast<const char*>(factors.data()), kFactorElements * 8));
  if (!stored.ok()) {
    std::cerr << "factors upload: " << stored.status() << "\n";
    return 1;
  }
  gpucompute::v1::StreamingComputeHeader header;
  header.set_operation(gpucompute::v1::STREAMING_DISCOUNT_PRODUCT);
  header.set_dtype(gpucompute::v1::FLOAT64);
  for (int64_t extent : {slices, kFactorRows, int64_t{5}}) header.add_shape(extent);
  header.mutable_factors()->set_buffer_id(stored->id());
  const absl::string_view operand(reinterpret_cast<const char*>(values.data()), elements * 8);
  // Calls per repeat: one, or a full case's worth back to back into one reused buffer.
  const uint64_t calls = std::max<uint64_t>(
      1, (absl::GetFlag(FLAGS_streaming_total_bytes) + elements * 8 - 1) / (elements * 8));
  gc::HostBytes reused = gc::HostBytes::Allocate(calls > 1 ? elements * 8 : 0);
  std::vector<Sample> samples;
  std::map<std::string, double> thread_cpu;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeat); ++r) {
    Sample sample;
    for (uint64_t call = 0; call < calls; ++call) {
      const std::map<std::string, double> threads = ThreadCpuSeconds(pid);
      const double cpu = CpuSeconds(pid), own = OwnCpuSeconds();
      const absl::Time start = absl::Now();
      absl::StatusOr<gc::Result> result =
          calls > 1 ? client.StreamingCompute(
                          header, {&operand, 1},
                          [&reused](const gpucompute::v1::ResultHeader&) -> absl::StatusOr<char*> {
                            return reused.data();
                          })
                    : client.StreamingCompute(header, {&operand, 1});
      if (!result.ok()) {
        std::cerr << "streaming: " << result.status() << "\n";
        return 1;
      }
      sample.seconds += absl::ToDoubleSeconds(absl::Now() - start);
      sample.server_cpu += CpuSeconds(pid) - cpu;
      sample.client_cpu += OwnCpuSeconds() - own;
      AddThreadCpu(threads, ThreadCpuSeconds(pid), thread_cpu);
      const double* out =
          reinterpret_cast<const double*>(calls > 1 ? reused.data() : result->data.data());
      for (uint64_t i = 0; i < elements; ++i) {
        if (out[i] != factors[i % kFactorElements] * values[i]) {
          std::cerr << "streaming: element " << i << " is " << out[i] << ", expected "
                    << factors[i % kFactorElements] * values[i] << "\n";
          return 1;
        }
      }
      if (calls > 1) std::memset(reused.data(), 0xA5, reused.size());  // poison (untimed)
    }
    samples.push_back(sample);
  }
  const std::string what = calls > 1 ? absl::StrCat("streaming ", calls, " calls") : "streaming";
  Report(what, calls * elements * 8, std::move(samples));
  ReportThreads(what, calls * elements * 8, absl::GetFlag(FLAGS_repeat), thread_cpu);
  return client.Delete(stored->id()).ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  gc::TuneMallocForBulkTransfers();
  absl::ParseCommandLine(argc, argv);
  const uint64_t bytes = absl::GetFlag(FLAGS_bytes) / 4 * 4;
  const int pid = absl::GetFlag(FLAGS_server_pid);
  absl::StatusOr<gpucompute::IntChannelArgs> channel_args =
      gpucompute::ParseIntChannelArgs(absl::GetFlag(FLAGS_channel_args), "--channel_args");
  if (!channel_args.ok()) {
    std::cerr << channel_args.status().message() << "\n";
    return 2;
  }
  const gc::ChannelOptions channel_options{.int_arguments = *channel_args};
  gc::ClientOptions options;
  if (absl::GetFlag(FLAGS_upload_chunk_bytes) != 0) {
    options.upload_chunk_bytes = absl::GetFlag(FLAGS_upload_chunk_bytes);
  }
  options.stripes = absl::GetFlag(FLAGS_stripes);
  options.stripe_bytes = absl::GetFlag(FLAGS_stripe_bytes);
  if (options.stripes > 1) {
    options.stripe_channels = gc::MakeStripeChannels(absl::GetFlag(FLAGS_target), options.stripes - 1,
                                                     channel_options);
  }
  gc::Client client(gc::MakeChannel(absl::GetFlag(FLAGS_target), channel_options), options);
  if (absl::GetFlag(FLAGS_streaming)) return RunStreaming(client, absl::GetFlag(FLAGS_bytes), pid);

  std::string data(bytes, '\0');
  for (uint64_t i = 0; i < bytes / 4; ++i) {
    const float v = static_cast<float>(i % 1000003) * 0.5f;
    std::memcpy(data.data() + i * 4, &v, 4);
  }
  const int64_t shape[] = {static_cast<int64_t>(bytes / 4)};
  // --reuse_destination's buffer, poisoned before each download (untimed).
  gc::HostBytes reused = gc::HostBytes::Allocate(absl::GetFlag(FLAGS_reuse_destination) ? bytes : 0);
  std::vector<Sample> uploads, downloads;
  std::map<std::string, double> upload_threads, download_threads;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeat); ++r) {
    std::map<std::string, double> threads = ThreadCpuSeconds(pid);
    double cpu = CpuSeconds(pid), own = OwnCpuSeconds();
    absl::Time start = absl::Now();
    absl::StatusOr<gpucompute::v1::BufferInfo> info =
        client.Upload("bulk", gpucompute::v1::FLOAT32, shape, data);
    if (!info.ok()) {
      std::cerr << "upload: " << info.status() << "\n";
      return 1;
    }
    uploads.push_back({absl::ToDoubleSeconds(absl::Now() - start), CpuSeconds(pid) - cpu,
                       OwnCpuSeconds() - own});
    AddThreadCpu(threads, ThreadCpuSeconds(pid), upload_threads);

    if (!reused.empty()) std::memset(reused.data(), 0xA5, reused.size());
    threads = ThreadCpuSeconds(pid);
    cpu = CpuSeconds(pid), own = OwnCpuSeconds();
    start = absl::Now();
    absl::StatusOr<gc::Result> result =
        absl::GetFlag(FLAGS_reuse_destination)
            ? client.DownloadTo(
                  info->id(),
                  [&reused](const gpucompute::v1::ResultHeader&) -> absl::StatusOr<char*> {
                    return reused.data();
                  },
                  absl::GetFlag(FLAGS_download_chunk_bytes))
            : client.Download(info->id(), absl::GetFlag(FLAGS_download_chunk_bytes));
    if (!result.ok()) {
      std::cerr << "download: " << result.status() << "\n";
      return 1;
    }
    downloads.push_back({absl::ToDoubleSeconds(absl::Now() - start), CpuSeconds(pid) - cpu,
                         OwnCpuSeconds() - own});
    AddThreadCpu(threads, ThreadCpuSeconds(pid), download_threads);
    const absl::string_view downloaded =
        absl::GetFlag(FLAGS_reuse_destination) ? reused.view() : result->data.view();
    if (downloaded != data) {
      std::cerr << "download differs from the upload\n";
      return 1;
    }
    result = absl::UnknownError("freed");
    if (absl::StatusOr<uint64_t> freed = client.Delete(info->id()); !freed.ok()) {
      std::cerr << "delete: " << freed.status() << "\n";
      return 1;
    }
  }
  Report("upload", bytes, uploads);
  Report("download", bytes, downloads);
  ReportThreads("upload", bytes, absl::GetFlag(FLAGS_repeat), upload_threads);
  ReportThreads("download", bytes, absl::GetFlag(FLAGS_repeat), download_threads);
  return 0;
}
