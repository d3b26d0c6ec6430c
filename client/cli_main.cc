// gpucompute-cli: command-line client for the gpucompute server.
//
//   gpucompute-cli [--target=HOST:PORT] [--timeout=DURATION] SUBCOMMAND [ARGS] [--flags]
//
// Flags may come before or after the subcommand. Commands that store a buffer
// (upload, compute with --keep_on_device) print its id alone on stdout and their
// report on stderr, so that ID=$(gpucompute-cli upload data.npy) works; the
// others print their report on stdout. Exit status: 0 on success, 1
// when a call fails (the gRPC code name and message go to stderr), 2 for usage
// errors (with the usage text). The command line is parsed by ParseCommandLine
// (client/cli_parse.h) rather than absl::ParseCommandLine so that usage errors
// exit 2, repeated --ref flags accumulate, and flags that do not apply to the
// subcommand are refused. The subcommands live in client/cli_commands.cc.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <iostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/bulk_memory.h"
#include "client/cli_commands.h"
#include "client/cli_parse.h"
#include "client/client.h"
#include "common/grpc_lifetime.h"
#include "common/mutex_checks.h"
#include "common/status_macros.h"
#include "common/version.h"

// Connection and output, for every subcommand.
ABSL_FLAG(std::string, target, "",
          "server address, HOST:PORT or unix:PATH; empty: $GPUCOMPUTE_TARGET, else "
          "localhost:50051");
ABSL_FLAG(absl::Duration, timeout, absl::InfiniteDuration(),
          "deadline of each call: seconds (30) or with a unit (500ms, 2m); inf for none");
ABSL_FLAG(std::string, format, "text", "info, list: text, or json (protobuf's JSON mapping)");
ABSL_FLAG(int32_t, stripes, 1,
          "uploads, downloads and streamed operations larger than --stripe_bytes run as up to "
          "this many streams at once, each on its own connection (ClientOptions::stripes)");
ABSL_FLAG(uint64_t, stripe_bytes, uint64_t{64} << 20, "bytes of each stripe");
ABSL_FLAG(bool, progress, false, "draw progress bars even when stderr is not a terminal");
// Transfers and results.
ABSL_FLAG(std::string, name, "",
          "name of an uploaded buffer (its file name if not given) or of a kept result");
ABSL_FLAG(uint32_t, chunk_bytes, 0, "result chunk size in bytes; 0: the server's default");
ABSL_FLAG(uint64_t, inline_limit_bytes, uint64_t{8} << 20,
          "input files larger than this are uploaded first and deleted afterwards");
ABSL_FLAG(std::string, out, "", "write the result to this .npy file");
ABSL_FLAG(bool, keep_on_device, false, "store the result as a buffer on the server");
ABSL_FLAG(bool, shared_memory, false,
          "same host: map FILE.npy operands into shared-memory regions the server reads "
          "directly (it needs --allow_shared_memory) instead of sending them");
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
ABSL_FLAG(std::string, normalization, "",
          "lombscargle output: power, normalize (as --normalize) or amplitude (complex, written "
          "as (..., M, 2) pairs of real and imaginary parts)");
ABSL_FLAG(std::string, method, "auto",
          "lombscargle: auto, direct or nufft (evenly spaced frequencies)");
ABSL_FLAG(double, accuracy, 0,
          "lombscargle NUFFT: relative error bound in [1e-14, 1e-2]; 0: the server's default");
// Load test.
ABSL_FLAG(int32_t, concurrency, 8, "bench: requests in flight");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "bench: how long to run");
ABSL_FLAG(uint64_t, count, 0, "bench: stop after this many requests; 0: run for --duration");
ABSL_FLAG(std::string, mix, "normalize:1,haversine:1,discount:1,lombscargle:1",
          "bench: operations and their weights (health: health checks, the round trip of "
          "a call with no work)");
ABSL_FLAG(uint64_t, size, uint64_t{1} << 16, "bench: elements in each result");
ABSL_FLAG(bool, unary_results, true,
          "bench: with --complete_results, ask for single-message results and read each call "
          "as a unary call (a larger result is refused and streamed)");
ABSL_FLAG(bool, callbacks, false,
          "bench: each request in flight a slot on gRPC's callback API rather than a thread "
          "calling the blocking API (less client CPU per request; single-message results of "
          "compute operations)");
ABSL_FLAG(bool, session, false,
          "bench: the requests of every connection on Compute.Session calls rather than a "
          "call each (on callback slots: implies --callbacks)");
ABSL_FLAG(int32_t, sessions_per_connection, 8,
          "bench: with --session, the Compute.Session calls each connection's requests are "
          "spread over (one stream each)");
ABSL_FLAG(int32_t, connections, 1,
          "bench: connections the requests in flight are spread over, each its own channel");
ABSL_FLAG(bool, complete_results, true,
          "bench: ask for results of one chunk as one message (false: header, data and "
          "trailer as three)");

namespace gpucompute::client {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr char kDefaultTarget[] = "localhost:50051";

CliConfig ReadConfig(std::set<std::string> given) {
  CliConfig config;
  config.target = absl::GetFlag(FLAGS_target);
  if (config.target.empty()) {
    const char* from_environment = std::getenv("GPUCOMPUTE_TARGET");
    config.target = from_environment != nullptr && *from_environment != '\0'
                        ? from_environment
                        : kDefaultTarget;
  }
  config.format = absl::GetFlag(FLAGS_format);
  config.timeout = absl::GetFlag(FLAGS_timeout);
  config.show_progress = absl::GetFlag(FLAGS_progress) || isatty(STDERR_FILENO);
  config.name = absl::GetFlag(FLAGS_name);
  config.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  config.inline_limit_bytes = absl::GetFlag(FLAGS_inline_limit_bytes);
  config.out = absl::GetFlag(FLAGS_out);
  config.keep_on_device = absl::GetFlag(FLAGS_keep_on_device);
  config.shared_memory = absl::GetFlag(FLAGS_shared_memory);
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
  config.normalization = absl::GetFlag(FLAGS_normalization);
  config.method = absl::GetFlag(FLAGS_method);
  config.accuracy = absl::GetFlag(FLAGS_accuracy);
  config.concurrency = absl::GetFlag(FLAGS_concurrency);
  config.duration = absl::GetFlag(FLAGS_duration);
  config.count = absl::GetFlag(FLAGS_count);
  config.mix = absl::GetFlag(FLAGS_mix);
  config.size = absl::GetFlag(FLAGS_size);
  config.complete_results = absl::GetFlag(FLAGS_complete_results);
  config.unary_results = absl::GetFlag(FLAGS_unary_results);
  config.callbacks = absl::GetFlag(FLAGS_callbacks);
  config.session = absl::GetFlag(FLAGS_session);
  config.sessions_per_connection = absl::GetFlag(FLAGS_sessions_per_connection);
  config.connections = absl::GetFlag(FLAGS_connections);
  config.given = std::move(given);
  return config;
}

const std::vector<absl::string_view> kConnectionFlags = {"target", "timeout", "progress", "stripes",
                                                         "stripe_bytes"};
// Flags that may be repeated; their values are joined with ';'.
constexpr absl::string_view kRepeatableFlags[] = {"ref"};

bool Contains(const std::vector<absl::string_view>& flags, absl::string_view flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

bool IsKnownFlag(absl::string_view name) {
  if (Contains(kConnectionFlags, name)) return true;
  return std::any_of(Commands().begin(), Commands().end(),
                     [&](const Command& command) { return Contains(command.flags, name); });
}

std::string UsageText() {
  std::string out =
      "usage: gpucompute-cli [--target=HOST:PORT] [--timeout=DURATION] [--progress]\n"
      "                      [--stripes=N [--stripe_bytes=N]]\n"
      "                      SUBCOMMAND [ARGS] [FLAGS]\n"
      "       gpucompute-cli SUBCOMMAND --help | --help | --version\n\nsubcommands:\n";
  for (const Command& command : Commands()) absl::StrAppend(&out, "  ", command.synopsis, "\n");
  absl::StrAppend(
      &out,
      "\ncompute subcommands also take --out=OUT.npy or --keep_on_device [--name=NAME],\n"
      "--chunk_bytes=N and --inline_limit_bytes=N (default 8 MiB: larger input files are\n"
      "uploaded first and deleted afterwards) or --shared_memory (on the server's host:\n"
      ".npy inputs go through shared memory). SRC is a .npy file or buffer:ID.\n"
      "upload and --keep_on_device print the stored buffer's id alone on stdout\n"
      "(ID=$(gpucompute-cli upload data.npy)) and the details on stderr.\n"
      "The target defaults to $GPUCOMPUTE_TARGET, else localhost:50051.\n"
      "Run with --help for every flag, SUBCOMMAND --help for one subcommand's.\n");
  return out;
}

// Help for `flags` and the connection flags, or for every flag (no command).
std::string FlagHelpText(const Command* command = nullptr) {
  std::set<absl::string_view> names(kConnectionFlags.begin(), kConnectionFlags.end());
  for (const Command& each : Commands()) {
    if (command == nullptr || &each == command) names.insert(each.flags.begin(), each.flags.end());
  }
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

absl::Status Run(int argc, char** argv) {
  GC_ASSIGN_OR_RETURN(const CommandLine line,
                      ParseCommandLine(argc, argv, IsKnownFlag, kRepeatableFlags));
  if (line.version) {
    std::cout << VersionText("gpucompute-cli");
    return absl::OkStatus();
  }
  const auto command =
      line.positional.empty()
          ? Commands().end()
          : std::find_if(Commands().begin(), Commands().end(),
                         [&](const Command& c) { return c.name == line.positional.front(); });
  if (line.help) {
    if (command == Commands().end()) {
      std::cout << UsageText() << FlagHelpText();
    } else {
      std::cout << "usage: gpucompute-cli [--target=HOST:PORT] [--timeout=DURATION] "
                << command->synopsis << "\n" << FlagHelpText(&*command);
    }
    return absl::OkStatus();
  }
  if (line.positional.empty()) return UsageError("no subcommand given");
  const std::string& name = line.positional.front();
  const Args args(line.positional.begin() + 1, line.positional.end());
  if (command == Commands().end()) {
    return UsageError(absl::StrCat("unknown subcommand '", name, "'"));
  }
  for (const std::string& flag : line.given) {
    if (!Contains(kConnectionFlags, flag) && !Contains(command->flags, flag)) {
      return UsageError(absl::StrCat("--", flag, " does not apply to ", name));
    }
  }
  if (args.size() != command->positional_args) {
    return UsageError(absl::StrCat(name, " takes ", command->positional_args, " argument",
                                   command->positional_args == 1 ? "" : "s", ", got ", args.size(),
                                   ": ", command->synopsis));
  }
  const CliConfig config = ReadConfig(line.given);
  if (config.format != "text" && config.format != "json") {
    return UsageError(absl::StrCat("--format=", config.format, ": text or json"));
  }
  ClientOptions options{.timeout = config.timeout};
  options.stripes = absl::GetFlag(FLAGS_stripes);
  options.stripe_bytes = absl::GetFlag(FLAGS_stripe_bytes);
  if (options.stripes < 1 || options.stripe_bytes < 1) {
    return UsageError(absl::StrCat("--stripes ", options.stripes, " and --stripe_bytes ",
                                   options.stripe_bytes, " must be >= 1"));
  }
  if (options.stripes > 1) {
    options.stripe_channels = MakeStripeChannels(config.target, options.stripes - 1);
  }
  Client client(MakeChannel(config.target), std::move(options));
  return command->run(config, client, args);
}

}  // namespace
}  // namespace gpucompute::client

int main(int argc, char** argv) {
  namespace cli = gpucompute::client;
  gpucompute::KeepGrpcInitializedUntilExit();
  cli::TuneMallocForBulkTransfers();
  gpucompute::DisableMutexDeadlockDetection();
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
