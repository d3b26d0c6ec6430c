// Parsers for the command line of gpucompute-cli and its compact argument
// forms, kept out of the binary so they can be tested.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "gpucompute/v1/gpucompute.pb.h"

namespace gpucompute::client {

// Usage errors make the CLI exit 2 with its usage text; they are
// INVALID_ARGUMENT carrying this payload.
inline constexpr absl::string_view kUsageErrorPayload = "type.gpucompute/cli.UsageError";

absl::Status UsageError(absl::string_view message);
bool IsUsageError(const absl::Status& status);

// Marks a failed parse of a command-line argument as a usage error.
template <typename T>
absl::StatusOr<T> AsUsageError(absl::StatusOr<T> parsed) {
  if (parsed.ok()) return parsed;
  absl::Status status = std::move(parsed).status();
  status.SetPayload(kUsageErrorPayload, absl::Cord());
  return status;
}

struct CommandLine {
  std::vector<std::string> positional;
  // Names of the flags present.
  std::set<std::string> given;
  bool help = false;
  bool version = false;
};

// Sets the absl flags named on the command line and collects the other
// arguments. Accepts --flag=value, --flag value, --bool_flag, --nobool_flag and
// "--" ending the flags; a single leading dash works too. Only flags for which
// `is_known_flag` holds may be set; those in `repeatable_flags` may be given
// more than once, their values joined with ';'. Every error is a usage error.
absl::StatusOr<CommandLine> ParseCommandLine(
    int argc, char** argv, const std::function<bool(absl::string_view)>& is_known_flag,
    std::span<const absl::string_view> repeatable_flags);

// "START:STOP:COUNT", an inclusive linspace as in LatLonMesh and FrequencyGrid.
struct Linspace {
  double start = 0;
  double stop = 0;
  uint64_t count = 0;
};
absl::StatusOr<Linspace> ParseLinspace(absl::string_view text, absl::string_view flag);

// "LAT,LON" points separated by ';' (repeated --ref flags arrive joined so).
absl::StatusOr<std::vector<v1::GeoPoint>> ParseGeoPoints(absl::string_view text,
                                                         absl::string_view flag);

// "sum", "l1", "l2", "max_abs".
absl::StatusOr<v1::Norm> ParseNorm(absl::string_view text);

// Lomb-Scargle's --normalization: "power", "normalize", "amplitude" (SciPy's names).
absl::StatusOr<v1::LombScargleNormalization> ParseLombScargleNormalization(absl::string_view text);
// Lomb-Scargle's --method: "auto", "direct", "nufft".
absl::StatusOr<v1::LombScargleMethod> ParseLombScargleMethod(absl::string_view text);

// An operand argument: "buffer:ID" names a stored buffer, anything else a .npy file.
struct OperandSpec {
  enum class Kind { kFile, kBuffer };
  Kind kind = Kind::kFile;
  std::string value;  // the path or the buffer id
};
absl::StatusOr<OperandSpec> ParseOperandSpec(absl::string_view text, absl::string_view flag);

// The compute operations a load test can mix.
// kHealth: a health check, the round trip of a call with no work (the floor).
enum class BenchOp { kNormalize, kHaversine, kDiscount, kLombScargle, kHealth };
absl::string_view BenchOpName(BenchOp op);

struct MixEntry {
  BenchOp op;
  uint32_t weight = 1;
};
// "normalize:1,haversine:2,discount:1,lombscargle:1"; a name without ":W" has
// weight 1; weight 0 drops the operation; at least one must remain.
absl::StatusOr<std::vector<MixEntry>> ParseMix(absl::string_view text);

}  // namespace gpucompute::client
