// Shared by the request fuzzer and its seed generator: the input format and the
// stored buffers every fuzz input can name.
//
// Input: byte 0 picks the target (byte % kTargetCount), the rest is its payload.
//   kDiscountProduct..kLombScargle: a serialized v1.<Op>Request. An operand whose
//     buffer_id is "$0".."$9" is rewritten to the id of stored buffer k (see
//     kStoredBuffers); "$9" belongs to another principal and must never resolve.
//   kUpload: Buffers.Upload streams, framed like a message with
//     `repeated UploadRequest messages = 1;` (tag 0x0a, varint length, bytes);
//     any other field number (e.g. tag 0x10 0x00) ends the current stream and
//     starts the next one in the same store.
//   kStreaming: a serialized v1.StreamingComputeRequest with a header (factors
//     rewritten as above): CheckStreamingHeader, then its first rows run as one chunk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace gpucompute::fuzz {

enum Target : uint8_t {
  kDiscountProduct = 0,
  kHaversineGrid = 1,
  kNormalize = 2,
  kLombScargle = 3,
  kUpload = 4,
  kStreaming = 5,
};
inline constexpr int kTargetCount = 6;

// The principal fuzzed requests run as, and the owner of "$9".
inline constexpr char kPrincipal[] = "fuzz";
inline constexpr char kOtherPrincipal[] = "other";

struct StoredBufferSpec {
  DType dtype;
  Shape shape;
  const char* owner;
};

// "$k" -> kStoredBuffers[k]. Values are 0.5 * (i + 1): valid latitudes,
// longitudes, frequencies, weights and non-zero rows.
inline const std::vector<StoredBufferSpec>& StoredBuffers() {
  static const auto* specs = new std::vector<StoredBufferSpec>{
      {DType::kFloat64, {8}, kPrincipal},        // $0
      {DType::kFloat32, {8}, kPrincipal},        // $1
      {DType::kFloat64, {2, 8}, kPrincipal},     // $2
      {DType::kFloat32, {2, 8}, kPrincipal},     // $3
      {DType::kFloat64, {3, 1, 4}, kPrincipal},  // $4
      {DType::kFloat64, {}, kPrincipal},         // $5 (rank 0)
      {DType::kFloat64, {1}, kPrincipal},        // $6
      {DType::kFloat32, {4}, kPrincipal},        // $7
      {DType::kFloat64, {64}, kPrincipal},       // $8
      {DType::kFloat64, {8}, kOtherPrincipal},   // $9: not the caller's
  };
  return *specs;
}

inline constexpr int kForeignBuffer = 9;

}  // namespace gpucompute::fuzz
