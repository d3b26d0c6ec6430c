#include "client/cli_commands.h"

#include <filesystem>
#include <iostream>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/bench.h"
#include "client/cli_parse.h"
#include "client/format.h"
#include "client/npy.h"
#include "client/npy_mapped.h"
#include "client/operand_resolver.h"
#include "client/progress_bar.h"
#include "client/tensor.h"
#include "common/status_macros.h"

namespace gpucompute::client {
namespace {

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
  GC_ASSIGN_OR_RETURN(const grpc::health::v1::HealthCheckResponse::ServingStatus status,
                      client.Health());
  const std::string name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(status);
  std::cout << name << "\n";
  if (status != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError(absl::StrCat("server reports ", name));
  }
  return absl::OkStatus();
}

absl::Status RunInfo(const CliConfig& config, Client& client, const Args&) {
  GC_ASSIGN_OR_RETURN(const v1::ServerInfo info, client.GetInfo());
  if (config.format == "json") {
    GC_ASSIGN_OR_RETURN(const std::string json, FormatJson(info));
    std::cout << json;
  } else {
    std::cout << FormatServerInfo(info);
  }
  return absl::OkStatus();
}

absl::Status RunUpload(const CliConfig& config, Client& client, const Args& args) {
  const std::string& path = args[0];
  // Mapped, not read: the upload sends from the page cache.
  GC_ASSIGN_OR_RETURN(const MappedNpy array, MapNpyFile(path));
  const std::string name =
      config.Given("name") ? config.name : std::filesystem::path(path).filename().string();
  GC_ASSIGN_OR_RETURN(
      const v1::BufferInfo buffer,
      WithProgressBar(absl::StrCat("upload ", name), config.show_progress,
                      [&](const ProgressCallback& progress) {
                        return client.Upload(name, array.dtype, array.shape, array.data, progress);
                      }));
  // The id alone on stdout, so that ID=$(gpucompute-cli upload data.npy) works.
  std::cerr << FormatBufferInfo(buffer);
  std::cout << buffer.id() << "\n";
  return absl::OkStatus();
}

absl::Status RunDownload(const CliConfig& config, Client& client, const Args& args) {
  const std::string& id = args[0];
  const std::string& path = args[1];
  // The chunks land straight in the mapped output file, created once the header
  // gives the shape.
  std::optional<NpyOutputFile> file;
  const ResultDestination destination =
      [&](const v1::ResultHeader& header) -> absl::StatusOr<char*> {
    GC_ASSIGN_OR_RETURN(file, NpyOutputFile::Create(path, header.dtype(), ShapeOf(header.shape())));
    return file->data();
  };
  absl::StatusOr<Result> downloaded =
      WithProgressBar(absl::StrCat("download ", id), config.show_progress,
                      [&](const ProgressCallback& progress) {
                        return client.DownloadTo(id, destination, config.chunk_bytes, progress);
                      });
  if (!downloaded.ok() && file.has_value()) {
    file.reset();
    std::filesystem::remove(path);  // no partial file is left behind
  }
  GC_ASSIGN_OR_RETURN(const Result result, std::move(downloaded));
  const Shape shape = ShapeOf(result.header.shape());
  absl::PrintF("wrote %s: %s %s, %s\n", path, DTypeName(result.header.dtype()),
               ShapeToString(shape), FormatBytes(result.header.total_bytes()));
  return absl::OkStatus();
}

absl::Status RunDelete(const CliConfig&, Client& client, const Args& args) {
  GC_ASSIGN_OR_RETURN(const uint64_t freed, client.Delete(args[0]));
  absl::PrintF("deleted %s, freed %s\n", args[0], FormatBytes(freed));
  return absl::OkStatus();
}

absl::Status RunList(const CliConfig& config, Client& client, const Args&) {
  GC_ASSIGN_OR_RETURN(const v1::ListResponse list, client.List());
  if (config.format == "json") {
    GC_ASSIGN_OR_RETURN(const std::string json, FormatJson(list));
    std::cout << json;
  } else {
    std::cout << FormatBufferList(list);
  }
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
  output.set_accept_complete_result(true);
  return output;
}

// Runs `call` with the operands resolved, then prints or writes its result.
template <typename Call>
absl::Status RunCompute(const CliConfig& config, OperandResolver& operands, Call call) {
  absl::StatusOr<Result> computed = WithProgressBar("result", config.show_progress, call);
  if (absl::Status released = operands.Release(); !released.ok()) {
    std::cerr << "gpucompute-cli: warning: " << released.message() << "\n";
  }
  GC_ASSIGN_OR_RETURN(const Result result, std::move(computed));

  const Shape shape = ShapeOf(result.header.shape());
  // A kept result's id alone goes to stdout, as upload's does; the report to stderr.
  std::ostream& report = config.keep_on_device ? std::cerr : std::cout;
  report << absl::StrFormat("result      %s %s, %s\n", DTypeName(result.header.dtype()),
                            ShapeToString(shape), FormatBytes(result.header.total_bytes()));
  if (config.keep_on_device) {
    report << "stored buffer\n" << FormatBufferInfo(result.trailer.stored_buffer());
  } else if (config.Given("out")) {
    GC_RETURN_IF_ERROR(WriteNpyFile(config.out, result.header.dtype(), shape, result.data));
    report << absl::StrFormat("written     %s\n", config.out);
  } else {
    report << absl::StrFormat("values      %s\n", FormatPreview(result, 8));
  }
  report << FormatTrailer(result.trailer);
  if (config.keep_on_device) std::cout << result.trailer.stored_buffer().id() << "\n";
  return absl::OkStatus();
}

absl::Status RunDiscountProduct(const CliConfig& config, Client& client, const Args&) {
  GC_RETURN_IF_ERROR(RequireFlags(config, {"factors", "values"}, "discount-product"));
  v1::DiscountProductRequest request;
  GC_ASSIGN_OR_RETURN(*request.mutable_output(), OutputOptionsOf(config));
  OperandResolver operands(client, config.inline_limit_bytes, config.show_progress,
                           config.shared_memory);
  GC_ASSIGN_OR_RETURN(*request.mutable_factors(), operands.Resolve(config.factors, "factors"));
  GC_ASSIGN_OR_RETURN(*request.mutable_values(), operands.Resolve(config.values, "values"));
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
  GC_RETURN_IF_ERROR(RequireFlags(config, {"ref"}, "haversine"));
  v1::HaversineGridRequest request;
  GC_ASSIGN_OR_RETURN(*request.mutable_output(), OutputOptionsOf(config));
  GC_ASSIGN_OR_RETURN(const std::vector<v1::GeoPoint> references,
                      AsUsageError(ParseGeoPoints(config.ref, "ref")));
  request.mutable_references()->Add(references.begin(), references.end());
  request.set_radius(config.radius);

  OperandResolver operands(client, config.inline_limit_bytes, config.show_progress,
                           config.shared_memory);
  if (mesh) {
    GC_RETURN_IF_ERROR(RequireFlags(config, {"lat", "lon"}, "a haversine mesh"));
    GC_ASSIGN_OR_RETURN(const Linspace lat, AsUsageError(ParseLinspace(config.lat, "lat")));
    GC_ASSIGN_OR_RETURN(const Linspace lon, AsUsageError(ParseLinspace(config.lon, "lon")));
    v1::LatLonMesh& grid = *request.mutable_mesh();
    grid.set_lat_start(lat.start);
    grid.set_lat_stop(lat.stop);
    grid.set_n_lat(lat.count);
    grid.set_lon_start(lon.start);
    grid.set_lon_stop(lon.stop);
    grid.set_n_lon(lon.count);
    if (config.Given("dtype")) {
      GC_ASSIGN_OR_RETURN(const v1::DType dtype, AsUsageError(ParseDTypeName(config.dtype)));
      grid.set_dtype(dtype);
    }
  } else {
    GC_RETURN_IF_ERROR(RequireFlags(config, {"lat_points", "lon_points"}, "haversine points"));
    if (config.Given("dtype")) {
      return UsageError("--dtype applies to a mesh; points keep the dtype of their files");
    }
    GC_ASSIGN_OR_RETURN(*request.mutable_points()->mutable_lat(),
                        operands.Resolve(config.lat_points, "lat_points"));
    GC_ASSIGN_OR_RETURN(*request.mutable_points()->mutable_lon(),
                        operands.Resolve(config.lon_points, "lon_points"));
  }
  return RunCompute(config, operands, [&](const ProgressCallback& progress) {
    return client.HaversineGrid(request, progress);
  });
}

absl::Status RunNormalize(const CliConfig& config, Client& client, const Args&) {
  GC_RETURN_IF_ERROR(RequireFlags(config, {"input"}, "normalize"));
  v1::NormalizeRequest request;
  GC_ASSIGN_OR_RETURN(*request.mutable_output(), OutputOptionsOf(config));
  GC_ASSIGN_OR_RETURN(const v1::Norm norm, AsUsageError(ParseNorm(config.norm)));
  request.set_norm(norm);
  OperandResolver operands(client, config.inline_limit_bytes, config.show_progress,
                           config.shared_memory);
  GC_ASSIGN_OR_RETURN(*request.mutable_input(), operands.Resolve(config.input, "input"));
  return RunCompute(config, operands, [&](const ProgressCallback& progress) {
    return client.Normalize(request, progress);
  });
}

absl::Status RunLombScargle(const CliConfig& config, Client& client, const Args&) {
  GC_RETURN_IF_ERROR(RequireFlags(config, {"x", "y"}, "lombscargle"));
  if (config.Given("freqs") == config.Given("freq_grid")) {
    return UsageError("lombscargle needs exactly one of --freqs and --freq_grid");
  }
  v1::LombScargleRequest request;
  GC_ASSIGN_OR_RETURN(*request.mutable_output(), OutputOptionsOf(config));
  request.set_precenter(config.precenter);
  request.set_normalize(config.normalize);
  request.set_floating_mean(config.floating_mean);
  if (config.Given("normalization")) {
    GC_ASSIGN_OR_RETURN(const v1::LombScargleNormalization normalization,
                        AsUsageError(ParseLombScargleNormalization(config.normalization)));
    request.set_normalization(normalization);
  }
  GC_ASSIGN_OR_RETURN(const v1::LombScargleMethod method,
                      AsUsageError(ParseLombScargleMethod(config.method)));
  request.set_method(method);
  request.set_accuracy(config.accuracy);
  if (config.Given("freq_grid")) {
    GC_ASSIGN_OR_RETURN(const Linspace grid,
                        AsUsageError(ParseLinspace(config.freq_grid, "freq_grid")));
    request.mutable_freq_grid()->set_start(grid.start);
    request.mutable_freq_grid()->set_stop(grid.stop);
    request.mutable_freq_grid()->set_count(grid.count);
  }
  OperandResolver operands(client, config.inline_limit_bytes, config.show_progress,
                           config.shared_memory);
  GC_ASSIGN_OR_RETURN(*request.mutable_x(), operands.Resolve(config.x, "x"));
  GC_ASSIGN_OR_RETURN(*request.mutable_y(), operands.Resolve(config.y, "y"));
  if (config.Given("freqs")) {
    GC_ASSIGN_OR_RETURN(*request.mutable_freqs(), operands.Resolve(config.freqs, "freqs"));
  }
  if (config.Given("weights")) {
    GC_ASSIGN_OR_RETURN(*request.mutable_weights(), operands.Resolve(config.weights, "weights"));
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
  bench.complete_results = config.complete_results;
  bench.unary_results = config.unary_results;
  // A session carries the requests of callback slots: --session alone implies them.
  bench.callbacks = config.callbacks || config.session;
  bench.session = config.session;
  bench.sessions_per_connection = config.sessions_per_connection;
  GC_ASSIGN_OR_RETURN(bench.mix, AsUsageError(ParseMix(config.mix)));
  if (config.Given("dtype")) {
    GC_ASSIGN_OR_RETURN(bench.dtype, AsUsageError(ParseDTypeName(config.dtype)));
  }
  if (bench.concurrency < 1) return UsageError("--concurrency must be at least 1");
  if (config.connections < 1) return UsageError("--connections must be at least 1");
  std::vector<std::unique_ptr<Client>> more_clients;
  std::vector<Client*> more;
  for (const std::shared_ptr<grpc::Channel>& channel :
       MakeStripeChannels(config.target, config.connections - 1)) {
    more_clients.push_back(std::make_unique<Client>(channel, ClientOptions{.timeout = config.timeout}));
    more.push_back(more_clients.back().get());
  }

  std::vector<std::string> mix_text;
  for (const MixEntry& entry : bench.mix) {
    mix_text.push_back(absl::StrCat(BenchOpName(entry.op), ":", entry.weight));
  }
  absl::PrintF("bench       %s, %d in flight on %d connection%s%s, %s, %d-element %s results, mix %s\n",
               config.target, bench.concurrency, config.connections, config.connections == 1 ? "" : "s",
               bench.session ? absl::StrCat(" (", bench.sessions_per_connection, " session",
                                            bench.sessions_per_connection == 1 ? "" : "s", " each)")
                             : "",
               bench.count != 0 ? absl::StrCat(bench.count, " requests")
                                : absl::FormatDuration(bench.duration),
               bench.size, DTypeName(bench.dtype), absl::StrJoin(mix_text, ","));
  std::cout.flush();
  GC_ASSIGN_OR_RETURN(const BenchReport report, AsUsageError(RunBench(client, bench, more)));
  std::cout << FormatBenchReport(report);
  if (report.requests > 0 && report.succeeded == 0) {
    return absl::UnavailableError("every request failed");
  }
  return absl::OkStatus();
}

// stream OPERATION: the streamed operands mapped from .npy files, the result
// written chunk by chunk into the mapped --out file: any size, bounded memory.
absl::Status RunStream(const CliConfig& config, Client& client, const Args& args) {
  GC_RETURN_IF_ERROR(RequireFlags(config, {"out"}, "stream"));
  v1::StreamingComputeHeader header;
  header.set_chunk_bytes(config.chunk_bytes);
  std::vector<MappedNpy> streamed;
  OperandResolver operands(client, config.inline_limit_bytes, config.show_progress);
  const absl::string_view operation = args[0];
  if (operation == "discount-product") {
    GC_RETURN_IF_ERROR(RequireFlags(config, {"factors", "values"}, "stream discount-product"));
    header.set_operation(v1::STREAMING_DISCOUNT_PRODUCT);
    GC_ASSIGN_OR_RETURN(*header.mutable_factors(), operands.Resolve(config.factors, "factors"));
    GC_ASSIGN_OR_RETURN(streamed.emplace_back(), MapNpyFile(config.values));
  } else if (operation == "haversine") {
    GC_RETURN_IF_ERROR(
        RequireFlags(config, {"lat_points", "lon_points", "ref"}, "stream haversine"));
    header.set_operation(v1::STREAMING_HAVERSINE_POINTS);
    GC_ASSIGN_OR_RETURN(const std::vector<v1::GeoPoint> references,
                        AsUsageError(ParseGeoPoints(config.ref, "ref")));
    header.mutable_references()->Add(references.begin(), references.end());
    header.set_radius(config.radius);
    GC_ASSIGN_OR_RETURN(streamed.emplace_back(), MapNpyFile(config.lat_points));
    GC_ASSIGN_OR_RETURN(streamed.emplace_back(), MapNpyFile(config.lon_points));
    if (streamed[0].dtype != streamed[1].dtype || streamed[0].shape != streamed[1].shape) {
      return UsageError("--lat_points and --lon_points must have one dtype and shape");
    }
  } else if (operation == "normalize") {
    GC_RETURN_IF_ERROR(RequireFlags(config, {"input"}, "stream normalize"));
    header.set_operation(v1::STREAMING_NORMALIZE);
    GC_ASSIGN_OR_RETURN(const v1::Norm norm, AsUsageError(ParseNorm(config.norm)));
    header.set_norm(norm);
    GC_ASSIGN_OR_RETURN(streamed.emplace_back(), MapNpyFile(config.input));
  } else {
    return UsageError(absl::StrCat("stream: unknown operation \"", operation,
                                   "\"; use discount-product, haversine or normalize"));
  }
  header.set_dtype(streamed[0].dtype);
  header.mutable_shape()->Add(streamed[0].shape.begin(), streamed[0].shape.end());
  std::vector<absl::string_view> data;
  for (const MappedNpy& array : streamed) data.push_back(array.data);
  std::optional<NpyOutputFile> file;
  const ResultDestination destination =
      [&](const v1::ResultHeader& result) -> absl::StatusOr<char*> {
    GC_ASSIGN_OR_RETURN(file, NpyOutputFile::Create(config.out, result.dtype(),
                                                    ShapeOf(result.shape())));
    return file->data();
  };
  absl::StatusOr<Result> computed =
      WithProgressBar(absl::StrCat("stream ", operation), config.show_progress,
                      [&](const ProgressCallback& progress) {
                        return client.StreamingCompute(header, data, destination, progress);
                      });
  if (absl::Status released = operands.Release(); !released.ok()) {
    std::cerr << "gpucompute-cli: warning: " << released.message() << "\n";
  }
  if (!computed.ok() && file.has_value()) {
    file.reset();
    std::filesystem::remove(config.out);  // no partial file is left behind
  }
  GC_ASSIGN_OR_RETURN(const Result result, std::move(computed));
  std::cout << absl::StrFormat("result      %s %s, %s\nwritten     %s\n",
                               DTypeName(result.header.dtype()),
                               ShapeToString(ShapeOf(result.header.shape())),
                               FormatBytes(result.header.total_bytes()), config.out)
            << FormatTrailer(result.trailer);
  return absl::OkStatus();
}

const std::vector<absl::string_view> kComputeFlags = {
    "out", "keep_on_device", "name", "chunk_bytes", "inline_limit_bytes", "shared_memory"};

std::vector<absl::string_view> ComputeFlagsAnd(std::vector<absl::string_view> flags) {
  flags.insert(flags.end(), kComputeFlags.begin(), kComputeFlags.end());
  return flags;
}

}  // namespace

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"health", "health", {}, 0, RunHealth},
      {"info", "info [--format=text|json]", {"format"}, 0, RunInfo},
      {"upload", "upload FILE.npy [--name=NAME]", {"name"}, 1, RunUpload},
      {"download", "download ID OUT.npy [--chunk_bytes=N]", {"chunk_bytes"}, 2, RunDownload},
      {"delete", "delete ID", {}, 1, RunDelete},
      {"list", "list [--format=text|json]", {"format"}, 0, RunList},
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
       "                     [--weights=SRC] [--precenter] [--normalize] [--floating_mean]\n"
       "                     [--normalization=power|normalize|amplitude]\n"
       "                     [--method=auto|direct|nufft] [--accuracy=A]",
       ComputeFlagsAnd(
           {"x", "y", "freqs", "freq_grid", "weights", "precenter", "normalize", "floating_mean",
            "normalization", "method", "accuracy"}),
       0, RunLombScargle},
      {"stream",
       "stream (discount-product --factors=SRC --values=FILE.npy |\n"
       "                     haversine --lat_points=FILE.npy --lon_points=FILE.npy\n"
       "                     --ref=LAT,LON[;LAT,LON...] [--radius=R] |\n"
       "                     normalize --input=FILE.npy [--norm=sum|l1|l2|max_abs])\n"
       "                     --out=OUT.npy [--chunk_bytes=N]",
       {"factors", "values", "lat_points", "lon_points", "ref", "radius", "input", "norm", "out",
        "chunk_bytes", "inline_limit_bytes"},
       1, RunStream},
      {"bench",
       "bench [--concurrency=8] [--duration=10s | --count=N] [--size=65536]\n"
       "                     [--mix=normalize:1,haversine:1,discount:1,lombscargle:1]\n"
       "                     [--dtype=float32|float64] [--chunk_bytes=N] [--complete_results]\n"
       "                     [--unary_results] [--callbacks] [--session [--sessions_per_connection=8]]\n"
       "                     [--connections=1]",
       {"concurrency", "duration", "count", "mix", "size", "dtype", "chunk_bytes", "complete_results",
        "unary_results", "callbacks", "session", "sessions_per_connection", "connections"},
       0,
       RunBenchCommand},
  };
  return commands;
}

}  // namespace gpucompute::client
