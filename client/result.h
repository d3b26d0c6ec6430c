// Reassembly of a result stream (header, data chunks, trailer) into one buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpucompute/v1/gpucompute.pb.h"

namespace gpucompute::client {

// Called as bytes arrive or leave: (bytes done, bytes in total).
using ProgressCallback = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

// A compute result or a downloaded buffer.
struct Result {
  v1::ResultHeader header;
  // header.total_bytes() bytes, little-endian, C order; empty when the result was
  // kept on the server (trailer.stored_buffer() then describes it).
  std::string data;
  v1::ResultTrailer trailer;

  // The elements widened to double.
  absl::StatusOr<std::vector<double>> AsDoubles() const;
};

// Checks the framing of a result stream chunk by chunk and copies the data into
// one buffer allocated from the header. Any break in the framing (no header
// first, a second header, an offset other than the bytes received so far, more
// or fewer bytes than the header declares, anything after the trailer) is
// DATA_LOSS naming what was expected and what came.
class ResultAssembler {
 public:
  struct Options {
    // False when the request set keep_on_device: no data is expected and the
    // trailer must name the stored buffer.
    bool expect_data = true;
    // Larger declared results fail with RESOURCE_EXHAUSTED before allocating.
    uint64_t max_result_bytes = uint64_t{16} << 30;
    ProgressCallback progress;
  };

  explicit ResultAssembler(Options options);

  absl::Status Add(const v1::ResultChunk& chunk);
  // The result once the stream ended; DATA_LOSS if the trailer never came.
  absl::StatusOr<Result> Finish() &&;

 private:
  absl::Status AddHeader(const v1::ResultHeader& header);
  absl::Status AddData(uint64_t offset, const std::string& bytes);
  absl::Status AddComplete(const v1::ResultComplete& complete);
  absl::Status AddTrailer(const v1::ResultTrailer& trailer);

  Options options_;
  bool have_header_ = false;
  bool have_trailer_ = false;
  uint64_t received_bytes_ = 0;
  Result result_;
};

}  // namespace gpucompute::client
