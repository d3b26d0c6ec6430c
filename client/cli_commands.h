// The subcommands of gpucompute-cli: the flags and arguments each takes and
// how it runs. cli_main.cc defines the flags, parses the command line and
// dispatches through Commands().
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace gpucompute::client {

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
  bool shared_memory = false;
  std::string factors, values;
  std::string lat, lon, lat_points, lon_points, ref;
  double radius = 0;
  std::string dtype;
  std::string input, norm;
  std::string x, y, freqs, freq_grid, weights;
  bool precenter = false, normalize = false, floating_mean = false;
  std::string normalization, method;
  double accuracy = 0;
  int32_t concurrency = 0;
  absl::Duration duration;
  uint64_t count = 0;
  std::string mix;
  std::string format = "text";  // info, list: text or json
  uint64_t size = 0;
  bool complete_results = true;
  bool unary_results = true;
  bool callbacks = false;
  bool session = false;
  int sessions_per_connection = 8;
  int connections = 1;
  // Flags present on the command line, for "exactly one of" checks.
  std::set<std::string> given;

  bool Given(absl::string_view flag) const { return given.contains(std::string(flag)); }
};

using Args = std::vector<std::string>;

struct Command {
  absl::string_view name;
  absl::string_view synopsis;
  std::vector<absl::string_view> flags;  // besides the connection flags
  size_t positional_args;
  absl::Status (*run)(const CliConfig&, Client&, const Args&);
};

// Every subcommand, in the order the usage text lists them.
const std::vector<Command>& Commands();

}  // namespace gpucompute::client
