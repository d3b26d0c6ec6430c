// gpucompute-cli: command-line client for the gpucompute server.
//
//   gpucompute-cli [--target=HOST:PORT] [--timeout=DURATION] SUBCOMMAND [ARGS] [--flags]
//
// Flags may come before or after the subcommand. Exit status: 0 on success, 1
// when a call fails (the gRPC code name and message go to stderr), 2 for usage
// errors (with the usage text). The command line is parsed here rather than by
// absl::ParseCommandLine so that usage errors exit 2, repeated --ref flags
// accumulate, and flags that do not apply to the subcommand are refused.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/bench.h"
#include "client/cli_parse.h"
#include "client/client.h"
#include "client/format.h"
#include "client/npy.h"
#include "client/operand_resolver.h"
#include "client/progress_bar.h"
#include "client/tensor.h"

// Connection and output, for every subcommand.
ABSL_FLAG(std::string, target, "localhost:50051", "server address, HOST:PORT or unix:PATH");
ABSL_FLAG(absl::Duration, timeout, absl::InfiniteDuration(),
          "deadline of each call, e.g. 30s; inf for none");
ABSL_FLAG(bool, progress, false, "draw progress bars even when stderr is not a terminal");
// Transfers and results.
ABSL_FLAG(std::string, name, "",
          "name of an uploaded buffer (its file name if not given) or of a kept result");
ABSL_FLAG(uint32_t, chunk_bytes, 0, "result chunk size in bytes; 0: the server's default");
ABSL_FLAG(uint64_t, inline_limit_bytes, uint64_t{8} << 20,
          "input files larger than this are uploaded first and deleted afterwards");
ABSL_FLAG(std::string, out, "", "write the result to this .npy file");
ABSL_FLAG(bool, keep_on_device, false, "store the result as a buffer on the server");
// Operations.
ABSL_FLAG(std::string, factors, "", "discount-product factors: FILE.npy or buffer:ID");
ABSL_FLAG(std::string, values, "", "discount-product values: FILE.npy or buffer:ID");
ABSL_FLAG(std::string, lat, "", "haversine mesh latitudes START:STOP:N (degrees)");
ABSL_FLAG(std::string, lon, "", "haversine mesh longitudes START:STOP:N (degrees)");
ABSL_FLAG(std::string, lat_points, "", "haversine point latitudes: FILE.npy or buffer:ID");
ABSL_FLAG(std::string, lon_points, "", "haversine point longitudes: FILE.npy or buffer:ID");
ABSL_FLAG(std::string, ref, "", "reference points LAT,LON; repeat the flag or separate with ';'");
ABSL_FLAG(double, radius, 0, "sphere radius; 0: mean Earth radius in km");
ABSL_FLAG(std::string, dtype, "", "float32 or float64 (haversine mesh, bench)");
ABSL_FLAG(std::string, input, "", "normalize input: FILE.npy or buffer:ID");
ABSL_FLAG(std::string, norm, "sum", "normalize: sum, l1, l2 or max_abs");
ABSL_FLAG(std::string, x, "", "lombscargle sample times: FILE.npy or buffer:ID");
ABSL_FLAG(std::string, y, "", "lombscargle samples: FILE.npy or buffer:ID");
ABSL_FLAG(std::string, freqs, "", "lombscargle angular frequencies: FILE.npy or buffer:ID");
ABSL_FLAG(std::string, freq_grid, "", "lombscargle frequency grid START:STOP:COUNT");
ABSL_FLAG(std::string, weights, "", "lombscargle weights: FILE.npy or buffer:ID");
ABSL_FLAG(bool, precenter, false, "lombscargle: subtract the mean of y first");
ABSL_FLAG(bool, normalize, false, "lombscargle: normalize by the variance of y");
ABSL_FLAG(bool, floating_mean, false, "lombscargle: fit a constant offset too");
// Load test.
ABSL_FLAG(int32_t, concurrency, 8, "bench: requests in flight");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "bench: how long to run");
ABSL_FLAG(uint64_t, count, 0, "bench: stop after this many requests; 0: run for --duration");
ABSL_FLAG(std::string, mix, "normalize:1,haversine:1,discount:1,lombscargle:1",
          "bench: operations and their weights");
ABSL_FLAG(uint64_t, size, uint64_t{1} << 16, "bench: elements in each result");

namespace gpucompute::client {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr absl::string_view kUsagePayload = "type.gpucompute/cli.UsageError";

// A usage error: exit 2 with the usage text.
absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord());
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

absl::Status AsUsageError(absl::Status status) {
  if (!status.ok()) status.SetPayload(kUsagePayload, absl::Cord());
  return status;
}

// Every flag, read once after parsing.
struct CliConfig {
  std::string target;
  absl::Duration timeout;
  bool show_progress = false;
  std::string name;
  uint32_t chunk_bytes = 0;
  uint64_t inline_limit_bytes = 0;
  std::string out;
  bool keep_on_device = false;
  std::string factors, values;
  std::string lat, lon, lat_points, lon_points, ref;
  double radius = 0;
  std::string dtype;
  std::string input, norm;
  std::string x, y, freqs, freq_grid, weights;
  bool precenter = false, normalize = false, floating_mean = false;
  int32_t concurrency = 0;
  absl::Duration duration;
  uint64_t count = 0;
  std::string mix;
  uint64_t size = 0;
  // Flags present on the command line, for "exactly one of" checks.
  std::set<std::string> given;

  bool Given(absl::string_view flag) const { return given.contains(std::string(flag)); }
};

CliConfig ReadConfig(std::set<std::string> given) {
  CliConfig config;
  config.target = absl::GetFlag(FLAGS_target);
  config.timeout = absl::GetFlag(FLAGS_timeout);
  config.show_progress = absl::GetFlag(FLAGS_progress) || isatty(STDERR_FILENO);
  config.name = absl::GetFlag(FLAGS_name);
  config.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  config.inline_limit_bytes = absl::GetFlag(FLAGS_inline_limit_bytes);
  config.out = absl::GetFlag(FLAGS_out);
  config.keep_on_device = absl::GetFlag(FLAGS_keep_on_device);
  config.factors = absl::GetFlag(FLAGS_factors);
  config.values = absl::GetFlag(FLAGS_values);
  config.lat = absl::GetFlag(FLAGS_lat);
  config.lon = absl::GetFlag(FLAGS_lon);
  config.lat_points = absl::GetFlag(FLAGS_lat_points);
  config.lon_points = absl::GetFlag(FLAGS_lon_points);
  config.ref = absl::GetFlag(FLAGS_ref);
  config.radius = absl::GetFlag(FLAGS_radius);
  config.dtype = absl::GetFlag(FLAGS_dtype);
  config.input = absl::GetFlag(FLAGS_input);
  config.norm = absl::GetFlag(FLAGS_norm);
  config.x = absl::GetFlag(FLAGS_x);
  config.y = absl::GetFlag(FLAGS_y);
  config.freqs = absl::GetFlag(FLAGS_freqs);
  config.freq_grid = absl::GetFlag(FLAGS_freq_grid);
  config.weights = absl::GetFlag(FLAGS_weights);
  config.precenter = absl::GetFlag(FLAGS_precenter);
  config.normalize = absl::GetFlag(FLAGS_normalize);
  config.floating_mean = absl::GetFlag(FLAGS_floating_mean);
  config.concurrency = absl::GetFlag(FLAGS_concurrency);
  config.duration = absl::GetFlag(FLAGS_duration);
  config.count = absl::GetFlag(FLAGS_count);
  config.mix = absl::GetFlag(FLAGS_mix);
  config.size = absl::GetFlag(FLAGS_size);
  config.given = std::move(given);
  return config;
}

// ---------------------------------------------------------------------------
// Subcommands

using Args = std::vector<std::string>;

absl::Status RequireFlags(const CliConfig& config, std::initializer_list<absl::string_view> flags,
                          absl::string_view command) {
  for (absl::string_view flag : flags) {
    if (!config.Given(flag)) {
      return UsageError(absl::StrCat(command, " needs --", flag));
    }
  }
  return absl::OkStatus();
}

absl::Status RunHealth(const CliConfig&, Client& client, const Args&) {
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> status = client.Health();
  if (!status.ok()) return status.status();
  const std::string name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*status);
  std::cout << name << "\n";
  if (*status != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat("server reports ", name));
  }
  return absl::OkStatus();
}

absl::Status RunInfo(const CliConfig&, Client& client, const Args&) {
  absl::StatusOr<v1::ServerInfo> info = client.GetInfo();
  if (!info.ok()) return info.status();
  std::cout << FormatServerInfo(*info);
  return absl::OkStatus();
}

absl::Status RunUpload(const CliConfig& config, Client& client, const Args& args) {
  const std::string& path = args[0];
  absl::StatusOr<NpyArray> array = ReadNpyFile(path);
  if (!array.ok()) return array.status();
  const std::string name =
      config.Given("name") ? config.name : std::filesystem::path(path).filename().string();
  absl::StatusOr<v1::BufferInfo> buffer = [&] {
    ProgressBar bar(absl::StrCat("upload ", name), config.show_progress);
    return client.Upload(name, array->dtype, array->shape, array->data, bar.Callback());
  }();
  if (!buffer.ok()) return buffer.status();
  std::cout << FormatBufferInfo(*buffer);
  return absl::OkStatus();
}

absl::Status RunDownload(const CliConfig& config, Client& client, const Args& args) {
  const std::string& id = args[0];
  const std::string& path = args[1];
  absl::StatusOr<Result> result = [&] {
    ProgressBar bar(absl::StrCat("download ", id), config.show_progress);
    return client.Download(id, config.chunk_bytes, bar.Callback());
  }();
  if (!result.ok()) return result.status();
  const Shape shape = ShapeOf(result->header.shape());
  if (absl::Status written = WriteNpyFile(path, result->header.dtype(), shape, result->data);
      !written.ok()) {
    return written;
  }
  absl::PrintF("wrote %s: %s %s, %s\n", path, DTypeName(result->header.dtype()),
               ShapeToString(shape), FormatBytes(result->data.size()));
  return absl::OkStatus();
}

absl::Status RunDelete(const CliConfig&, Client& client, const Args& args) {
  absl::StatusOr<uint64_t> freed = client.Delete(args[0]);
  if (!freed.ok()) return freed.status();
  absl::PrintF("deleted %s, freed %s\n", args[0], FormatBytes(*freed));
  return absl::OkStatus();
}

absl::Status RunList(const CliConfig&, Client& client, const Args&) {
  absl::StatusOr<v1::ListResponse> list = client.List();
  if (!list.ok()) return list.status();
  std::cout << FormatBufferList(*list);
  return absl::OkStatus();
}

// Output options shared by the compute subcommands.
absl::StatusOr<v1::OutputOptions> OutputOptionsOf(const CliConfig& config) {
  if (config.keep_on_device && config.Given("out")) {
    return UsageError("--out and --keep_on_device exclude each other");
  }
  if (config.Given("name") && !config.keep_on_device) {
    return UsageError("--name names a kept result; add --keep_on_device");
  }
  // Fail before the computation rather than after it.
  if (config.Given("out")) {
    const std::filesystem::path directory = std::filesystem::path(config.out).parent_path();
    std::error_code error;
    if (!directory.empty() && !std::filesystem::is_directory(directory, error)) {
      return absl::NotFoundError(
          absl::StrCat("--out: directory ", directory.string(), " does not exist"));
    }
  }
  v1::OutputOptions output;
  output.set_chunk_bytes(config.chunk_bytes);
  output.set_keep_on_device(config.keep_on_device);
  output.set_buffer_name(config.name);
  return output;
}

// Runs `call` with the operands resolved, then prints or writes its result.
template <typename Call>
absl::Status RunCompute(const CliConfig& config, OperandResolver& operands, Call call) {
  absl::StatusOr<Result> result = [&] {
    ProgressBar bar("result", config.show_progress);
    return call(bar.Callback());
  }();
  if (absl::Status released = operands.Release(); !released.ok()) {
    std::cerr << "gpucompute-cli: warning: " << released.message() << "\n";
  }
  if (!result.ok()) return result.status();

  const Shape shape = ShapeOf(result->header.shape());
  absl::PrintF("result      %s %s, %s\n", DTypeName(result->header.dtype()), ShapeToString(shape),
               FormatBytes(result->header.total_bytes()));
  if (config.keep_on_device) {
    std::cout << "stored buffer\n" << FormatBufferInfo(result->trailer.stored_buffer());
  } else if (config.Given("out")) {
    if (absl::Status written =
            WriteNpyFile(config.out, result->header.dtype(), shape, result->data);
        !written.ok()) {
      return written;
    }
    absl::PrintF("written     %s\n", config.out);
  } else {
    absl::PrintF("values      %s\n", FormatPreview(*result, 8));
  }
  std::cout << FormatTrailer(result->trailer);
  return absl::OkStatus();
}

absl::Status RunDiscountProduct(const CliConfig& config, Client& client, const Args&) {
  if (absl::Status status = RequireFlags(config, {"factors", "values"}, "discount-product");
      !status.ok()) {
    return status;
  }
  absl::StatusOr<v1::OutputOptions> output = OutputOptionsOf(config);
  if (!output.ok()) return output.status();
  v1::DiscountProductRequest request;
  *request.mutable_output() = *output;
  OperandResolver operands(client, config.inline_limit_bytes, config.show_progress);
  absl::StatusOr<v1::Operand> factors = operands.Resolve(config.factors, "factors");
  if (!factors.ok()) return factors.status();
  *request.mutable_factors() = *std::move(factors);
  absl::StatusOr<v1::Operand> values = operands.Resolve(config.values, "values");
  if (!values.ok()) return values.status();
  *request.mutable_values() = *std::move(values);
  return RunCompute(config, operands, [&](const ProgressCallback& progress) {
    return client.DiscountProduct(request, progress);
  });
}

absl::Status RunHaversine(const CliConfig& config, Client& client, const Args&) {
  const bool mesh = config.Given("lat") || config.Given("lon");
  const bool points = config.Given("lat_points") || config.Given("lon_points");
  if (mesh == points) {
    return UsageError(
        "haversine needs either a mesh (--lat and --lon) or points (--lat_points and "
        "--lon_points)");
  }
  if (absl::Status status = RequireFlags(config, {"ref"}, "haversine"); !status.ok()) {
    return status;
  }
  absl::StatusOr<v1::OutputOptions> output = OutputOptionsOf(config);
  if (!output.ok()) return output.status();
  v1::HaversineGridRequest request;
  *request.mutable_output() = *output;
  absl::StatusOr<std::vector<v1::GeoPoint>> references = ParseGeoPoints(config.ref, "ref");
  if (!references.ok()) return AsUsageError(references.status());
  request.mutable_references()->Add(references->begin(), references->end());
  request.set_radius(config.radius);

  OperandResolver operands(client, config.inline_limit_bytes, config.show_progress);
  if (mesh) {
    if (absl::Status status = RequireFlags(config, {"lat", "lon"}, "a haversine mesh");
        !status.ok()) {
      return status;
    }
    absl::StatusOr<Linspace> lat = ParseLinspace(config.lat, "lat");
    if (!lat.ok()) return AsUsageError(lat.status());
    absl::StatusOr<Linspace> lon = ParseLinspace(config.lon, "lon");
    if (!lon.ok()) return AsUsageError(lon.status());
    v1::LatLonMesh& grid = *request.mutable_mesh();
    grid.set_lat_start(lat->start);
    grid.set_lat_stop(lat->stop);
    grid.set_n_lat(lat->count);
    grid.set_lon_start(lon->start);
    grid.set_lon_stop(lon->stop);
    grid.set_n_lon(lon->count);
    if (config.Given("dtype")) {
      absl::StatusOr<v1::DType> dtype = ParseDTypeName(config.dtype);
      if (!dtype.ok()) return AsUsageError(dtype.status());
      grid.set_dtype(*dtype);
    }
  } else {
    if (absl::Status status =
            RequireFlags(config, {"lat_points", "lon_points"}, "haversine points");
        !status.ok()) {
      return status;
    }
    if (config.Given("dtype")) {
      return UsageError("--dtype applies to a mesh; points keep the dtype of their files");
    }
    absl::StatusOr<v1::Operand> lat = operands.Resolve(config.lat_points, "lat_points");
    if (!lat.ok()) return lat.status();
    *request.mutable_points()->mutable_lat() = *std::move(lat);
    absl::StatusOr<v1::Operand> lon = operands.Resolve(config.lon_points, "lon_points");
    if (!lon.ok()) return lon.status();
    *request.mutable_points()->mutable_lon() = *std::move(lon);
  }
  return RunCompute(config, operands, [&](const ProgressCallback& progress) {
    return client.HaversineGrid(request, progress);
  });
}

absl::Status RunNormalize(const CliConfig& config, Client& client, const Args&) {
  if (absl::Status status = RequireFlags(config, {"input"}, "normalize"); !status.ok()) {
    return status;
  }
  absl::StatusOr<v1::OutputOptions> output = OutputOptionsOf(config);
  if (!output.ok()) return output.status();
  absl::StatusOr<v1::Norm> norm = ParseNorm(config.norm);
  if (!norm.ok()) return AsUsageError(norm.status());
  v1::NormalizeRequest request;
  *request.mutable_output() = *output;
  request.set_norm(*norm);
  OperandResolver operands(client, config.inline_limit_bytes, config.show_progress);
  absl::StatusOr<v1::Operand> input = operands.Resolve(config.input, "input");
  if (!input.ok()) return input.status();
  *request.mutable_input() = *std::move(input);
  return RunCompute(config, operands, [&](const ProgressCallback& progress) {
    return client.Normalize(request, progress);
  });
}

absl::Status RunLombScargle(const CliConfig& config, Client& client, const Args&) {
  if (absl::Status status = RequireFlags(config, {"x", "y"}, "lombscargle"); !status.ok()) {
    return status;
  }
  if (config.Given("freqs") == config.Given("freq_grid")) {
    return UsageError("lombscargle needs exactly one of --freqs and --freq_grid");
  }
  absl::StatusOr<v1::OutputOptions> output = OutputOptionsOf(config);
  if (!output.ok()) return output.status();
  v1::LombScargleRequest request;
  *request.mutable_output() = *output;
  request.set_precenter(config.precenter);
  request.set_normalize(config.normalize);
  request.set_floating_mean(config.floating_mean);
  if (config.Given("freq_grid")) {
    absl::StatusOr<Linspace> grid = ParseLinspace(config.freq_grid, "freq_grid");
    if (!grid.ok()) return AsUsageError(grid.status());
    request.mutable_freq_grid()->set_start(grid->start);
    request.mutable_freq_grid()->set_stop(grid->stop);
    request.mutable_freq_grid()->set_count(grid->count);
  }
  OperandResolver operands(client, config.inline_limit_bytes, config.show_progress);
  absl::StatusOr<v1::Operand> x = operands.Resolve(config.x, "x");
  if (!x.ok()) return x.status();
  *request.mutable_x() = *std::move(x);
  absl::StatusOr<v1::Operand> y = operands.Resolve(config.y, "y");
  if (!y.ok()) return y.status();
  *request.mutable_y() = *std::move(y);
  if (config.Given("freqs")) {
    absl::StatusOr<v1::Operand> freqs = operands.Resolve(config.freqs, "freqs");
    if (!freqs.ok()) return freqs.status();
    *request.mutable_freqs() = *std::move(freqs);
  }
  if (config.Given("weights")) {
    absl::StatusOr<v1::Operand> weights = operands.Resolve(config.weights, "weights");
    if (!weights.ok()) return weights.status();
    *request.mutable_weights() = *std::move(weights);
  }
  return RunCompute(config, operands, [&](const ProgressCallback& progress) {
    return client.LombScargle(request, progress);
  });
}

absl::Status RunBenchCommand(const CliConfig& config, Client& client, const Args&) {
  BenchConfig bench;
  bench.concurrency = config.concurrency;
  bench.duration = config.Given("count") && !config.Given("duration") ? absl::InfiniteDuration()
                                                                      : config.duration;
  bench.count = config.count;
  bench.size = config.size;
  bench.chunk_bytes = config.chunk_bytes;
  absl::StatusOr<std::vector<MixEntry>> mix = ParseMix(config.mix);
  if (!mix.ok()) return AsUsageError(mix.status());
  bench.mix = *std::move(mix);
  if (config.Given("dtype")) {
    absl::StatusOr<v1::DType> dtype = ParseDTypeName(config.dtype);
    if (!dtype.ok()) return AsUsageError(dtype.status());
    bench.dtype = *dtype;
  }
  if (bench.concurrency < 1) return UsageError("--concurrency must be at least 1");

  std::vector<std::string> mix_text;
  for (const MixEntry& entry : bench.mix) {
    mix_text.push_back(absl::StrCat(BenchOpName(entry.op), ":", entry.weight));
  }
  absl::PrintF("bench       %s, %d in flight, %s, %d-element %s results, mix %s\n", config.target,
               bench.concurrency,
               bench.count != 0 ? absl::StrCat(bench.count, " requests")
                                : absl::FormatDuration(bench.duration),
               bench.size, DTypeName(bench.dtype), absl::StrJoin(mix_text, ","));
  std::cout.flush();
  absl::StatusOr<BenchReport> report = RunBench(client, bench);
  if (!report.ok()) return AsUsageError(report.status());
  std::cout << FormatBenchReport(*report);
  if (report->requests > 0 && report->succeeded == 0) {
    return absl::UnavailableError("every request failed");
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Command table and command line

struct Command {
  absl::string_view name;
  absl::string_view synopsis;
  std::vector<absl::string_view> flags;  // besides the connection flags
  size_t positional_args;
  absl::Status (*run)(const CliConfig&, Client&, const Args&);
};

const std::vector<absl::string_view> kConnectionFlags = {"target", "timeout", "progress"};
const std::vector<absl::string_view> kComputeFlags = {"out", "keep_on_device", "name",
                                                      "chunk_bytes", "inline_limit_bytes"};

std::vector<absl::string_view> ComputeFlagsAnd(std::vector<absl::string_view> flags) {
  flags.insert(flags.end(), kComputeFlags.begin(), kComputeFlags.end());
  return flags;
}

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"health", "health", {}, 0, RunHealth},
      {"info", "info", {}, 0, RunInfo},
      {"upload", "upload FILE.npy [--name=NAME]", {"name"}, 1, RunUpload},
      {"download", "download ID OUT.npy [--chunk_bytes=N]", {"chunk_bytes"}, 2, RunDownload},
      {"delete", "delete ID", {}, 1, RunDelete},
      {"list", "list", {}, 0, RunList},
      {"discount-product", "discount-product --factors=SRC --values=SRC",
       ComputeFlagsAnd({"factors", "values"}), 0, RunDiscountProduct},
      {"haversine",
       "haversine (--lat=START:STOP:N --lon=START:STOP:N [--dtype=float32|float64] |\n"
       "                     --lat_points=SRC --lon_points=SRC) --ref=LAT,LON[;LAT,LON...]\n"
       "                     [--radius=R]",
       ComputeFlagsAnd({"lat", "lon", "lat_points", "lon_points", "ref", "radius", "dtype"}), 0,
       RunHaversine},
      {"normalize", "normalize --input=SRC [--norm=sum|l1|l2|max_abs]",
       ComputeFlagsAnd({"input", "norm"}), 0, RunNormalize},
      {"lombscargle",
       "lombscargle --x=SRC --y=SRC (--freqs=SRC | --freq_grid=START:STOP:COUNT)\n"
       "                     [--weights=SRC] [--precenter] [--normalize] [--floating_mean]",
       ComputeFlagsAnd(
           {"x", "y", "freqs", "freq_grid", "weights", "precenter", "normalize", "floating_mean"}),
       0, RunLombScargle},
      {"bench",
       "bench [--concurrency=8] [--duration=10s | --count=N] [--size=65536]\n"
       "                     [--mix=normalize:1,haversine:1,discount:1,lombscargle:1]\n"
       "                     [--dtype=float32|float64] [--chunk_bytes=N]",
       {"concurrency", "duration", "count", "mix", "size", "dtype", "chunk_bytes"},
       0,
       RunBenchCommand},
  };
  return commands;
}

std::string UsageText() {
  std::string out =
      "usage: gpucompute-cli [--target=HOST:PORT] [--timeout=DURATION] [--progress]\n"
      "                      SUBCOMMAND [ARGS] [FLAGS]\n\nsubcommands:\n";
  for (const Command& command : Commands()) absl::StrAppend(&out, "  ", command.synopsis, "\n");
  absl::StrAppend(
      &out,
      "\ncompute subcommands also take --out=OUT.npy or --keep_on_device [--name=NAME],\n"
      "--chunk_bytes=N and --inline_limit_bytes=N (default 8 MiB: larger input files are\n"
      "uploaded first and deleted afterwards). SRC is a .npy file or buffer:ID.\n"
      "Run with --help for every flag.\n");
  return out;
}

std::string FlagHelpText() {
  std::set<absl::string_view> names(kConnectionFlags.begin(), kConnectionFlags.end());
  for (const Command& command : Commands())
    names.insert(command.flags.begin(), command.flags.end());
  std::string out = "\nflags:\n";
  for (absl::string_view name : names) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    const std::string default_value = flag->DefaultValue();
    absl::StrAppendFormat(
        &out, "  --%-20s %s%s\n", name, flag->Help(),
        default_value.empty() ? "" : absl::StrCat(" (default: ", default_value, ")"));
  }
  return out;
}

struct CommandLine {
  Args positional;
  std::set<std::string> given;
  bool help = false;
};

// Flags that may be repeated; their values are joined with ';'.
constexpr absl::string_view kRepeatableFlags[] = {"ref"};

bool IsKnownFlag(absl::string_view name) {
  if (std::find(kConnectionFlags.begin(), kConnectionFlags.end(), name) != kConnectionFlags.end()) {
    return true;
  }
  for (const Command& command : Commands()) {
    if (std::find(command.flags.begin(), command.flags.end(), name) != command.flags.end()) {
      return true;
    }
  }
  return false;
}

// Accepts --flag=value, --flag value, --bool_flag, --nobool_flag and "--" ending
// the flags; a single leading dash works too.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv) {
  CommandLine line;
  // Values so far of repeatable flags.
  std::map<std::string, std::string> accumulated;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      line.positional.insert(line.positional.end(), argv + i + 1, argv + argc);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      line.positional.emplace_back(arg);
      continue;
    }
    absl::ConsumePrefix(&arg, "-");
    absl::ConsumePrefix(&arg, "-");
    const size_t equals = arg.find('=');
    std::string name(arg.substr(0, equals));
    std::optional<std::string> value;
    if (equals != absl::string_view::npos) value = std::string(arg.substr(equals + 1));
    if (name == "help" || name == "h") {
      line.help = true;
      continue;
    }
    absl::CommandLineFlag* flag = IsKnownFlag(name) ? absl::FindCommandLineFlag(name) : nullptr;
    if (flag == nullptr && absl::StartsWith(name, "no") && !value.has_value()) {
      const std::string positive = name.substr(2);
      absl::CommandLineFlag* negated =
          IsKnownFlag(positive) ? absl::FindCommandLineFlag(positive) : nullptr;
      if (negated != nullptr && negated->IsOfType<bool>()) {
        flag = negated;
        name = positive;
        value = "false";
      }
    }
    if (flag == nullptr) return UsageError(absl::StrCat("unknown flag --", name));
    if (!value.has_value()) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return UsageError(absl::StrCat("--", name, " needs a value"));
      }
    }
    const bool repeatable = std::find(std::begin(kRepeatableFlags), std::end(kRepeatableFlags),
                                      name) != std::end(kRepeatableFlags);
    if (line.given.contains(name)) {
      if (!repeatable) return UsageError(absl::StrCat("--", name, " is given twice"));
      value = absl::StrCat(accumulated[name], ";", *value);
    }
    if (repeatable) accumulated[name] = *value;
    std::string error;
    if (!flag->ParseFrom(*value, &error)) {
      return UsageError(absl::StrCat("invalid value for --", name, ": ", error));
    }
    line.given.insert(name);
  }
  return line;
}

absl::Status Run(int argc, char** argv) {
  absl::StatusOr<CommandLine> line = ParseCommandLine(argc, argv);
  if (!line.ok()) return line.status();
  if (line->help) {
    std::cout << UsageText() << FlagHelpText();
    return absl::OkStatus();
  }
  if (line->positional.empty()) return UsageError("no subcommand given");
  const std::string& name = line->positional.front();
  const Args args(line->positional.begin() + 1, line->positional.end());
  const auto command = std::find_if(Commands().begin(), Commands().end(),
                                    [&](const Command& c) { return c.name == name; });
  if (command == Commands().end()) {
    return UsageError(absl::StrCat("unknown subcommand '", name, "'"));
  }
  for (const std::string& flag : line->given) {
    const bool applies =
        std::find(kConnectionFlags.begin(), kConnectionFlags.end(), flag) !=
            kConnectionFlags.end() ||
        std::find(command->flags.begin(), command->flags.end(), flag) != command->flags.end();
    if (!applies) return UsageError(absl::StrCat("--", flag, " does not apply to ", name));
  }
  if (args.size() != command->positional_args) {
    return UsageError(absl::StrCat(name, " takes ", command->positional_args, " argument",
                                   command->positional_args == 1 ? "" : "s", ", got ", args.size(),
                                   ": ", command->synopsis));
  }
  const CliConfig config = ReadConfig(line->given);
  Client client(MakeChannel(config.target), ClientOptions{.timeout = config.timeout});
  return command->run(config, client, args);
}

}  // namespace
}  // namespace gpucompute::client

int main(int argc, char** argv) {
  namespace cli = gpucompute::client;
  const absl::Status status = cli::Run(argc, argv);
  if (status.ok()) return 0;
  if (cli::IsUsageError(status)) {
    std::cerr << "gpucompute-cli: " << status.message() << "\n\n" << cli::UsageText();
    return cli::kExitUsage;
  }
  std::cerr << "gpucompute-cli: error: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return cli::kExitFailure;
}
