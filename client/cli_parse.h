// Parsers for the compact argument forms of gpucompute-cli, kept out of the
// binary so they can be tested.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpucompute/v1/gpucompute.pb.h"

namespace gpucompute::client {

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

// An operand argument: "buffer:ID" names a stored buffer, anything else a .npy file.
struct OperandSpec {
  enum class Kind { kFile, kBuffer };
  Kind kind = Kind::kFile;
  std::string value;  // the path or the buffer id
};
absl::StatusOr<OperandSpec> ParseOperandSpec(absl::string_view text, absl::string_view flag);

// The compute operations a load test can mix.
enum class BenchOp { kNormalize, kHaversine, kDiscount, kLombScargle };
absl::string_view BenchOpName(BenchOp op);

struct MixEntry {
  BenchOp op;
  uint32_t weight = 1;
};
// "normalize:1,haversine:2,discount:1,lombscargle:1"; a name without ":W" has
// weight 1; weight 0 drops the operation; at least one must remain.
absl::StatusOr<std::vector<MixEntry>> ParseMix(absl::string_view text);

}  // namespace gpucompute::client
