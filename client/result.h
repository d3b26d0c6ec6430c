// Reassembly of a result stream (header, data chunks, trailer) into one buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/host_bytes.h"
#include "client/payload_copier.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/byte_buffer.h"

namespace gpucompute::client {

// Called as bytes arrive or leave: (bytes done, bytes in total).
using ProgressCallback = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

// Where a result's bytes go, given its header: header.total_bytes() writable bytes
// (e.g. a memory-mapped output file). Unset: Result::data.
using ResultDestination = std::function<absl::StatusOr<char*>(const v1::ResultHeader& header)>;

// Whether a compute call with these output options sends its result's data back
// (not kept on the server, not written to shared memory).
inline bool ResultDataComesBack(const v1::OutputOptions& output) {
  return !output.keep_on_device() && !output.has_shared_memory();
}

// A compute result or a downloaded buffer.
struct Result {
  v1::ResultHeader header;
  // header.total_bytes() bytes, little-endian, C order; empty when the result was
  // kept on the server (trailer.stored_buffer() then describes it) or went to a
  // ResultDestination.
  HostBytes data;
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
  // Data of results (or ranges) from this size on is copied into place by a
  // PayloadCopier, beside the thread reading the stream.
  static constexpr uint64_t kCopyBesideFromBytes = uint64_t{32} << 20;

  struct Options {
    // False when the request set keep_on_device: no data is expected and the
    // trailer must name the stored buffer.
    bool expect_data = true;
    // Larger declared results fail with RESOURCE_EXHAUSTED before allocating.
    uint64_t max_result_bytes = uint64_t{16} << 30;
    ProgressCallback progress;
    ResultDestination destination;
    // A ranged Download: the data chunks cover [range_begin, range_end) of the
    // result (range_end 0: to the end; cut at the end as the server does).
    uint64_t range_begin = 0;
    uint64_t range_end = 0;
    // The result is this many equal runs, each arriving in order but interleaved
    // with the others (StreamingCompute's haversine points: one run per
    // reference). Only for whole results.
    uint64_t result_runs = 1;
  };

  explicit ResultAssembler(Options options);

  absl::Status Add(const v1::ResultChunk& chunk);
  // One received message: a data chunk is copied from the received slices
  // straight to its place (proto/gpucompute/v1/bulk_wire.h); others are parsed.
  absl::Status AddBytes(const grpc::ByteBuffer& bytes);
  // The result once the stream ended; DATA_LOSS if the trailer never came.
  absl::StatusOr<Result> Finish() &&;

 private:
  absl::Status AddHeader(const v1::ResultHeader& header);
  // `size` bytes at `offset`, written by copy(destination).
  absl::Status AddData(uint64_t offset, uint64_t size, const std::function<void(char*)>& copy);
  // AddData for a result of several interleaved runs (Options::result_runs).
  absl::Status AddRunData(uint64_t offset, uint64_t size, const std::function<void(char*)>& copy);
  absl::Status AddComplete(const v1::ResultComplete& complete);
  absl::Status AddTrailer(const v1::ResultTrailer& trailer);

  Options options_;
  bool have_header_ = false;
  bool have_trailer_ = false;
  uint64_t received_bytes_ = 0;  // the offset the next chunk must have
  uint64_t range_end_ = 0;
  // With result_runs > 1: the offset the next chunk of each run must have.
  std::vector<uint64_t> run_next_;
  uint64_t run_bytes_ = 0;
  char* destination_ = nullptr;
  Result result_;
  // Declared after result_: destroyed (its copies finished) before the memory they fill.
  std::unique_ptr<PayloadCopier> copier_;
};

// Reads a result stream's raw messages (from a RawCall, client/raw_call.h) into
// `assembler`; a framing error cancels the call, whose rest is
// read and dropped. The framing's status; the call's comes from the reader's Finish.
template <typename Reader>
absl::Status ReadResultStream(Reader& reader, grpc::ClientContext& context,
                              ResultAssembler& assembler) {
  grpc::ByteBuffer message;
  while (reader.Read(&message)) {
    absl::Status framing = assembler.AddBytes(message);
    if (!framing.ok()) {
      // Stop the server streaming the rest; Read returns false once cancelled.
      context.TryCancel();
      while (reader.Read(&message)) {
      }
      return framing;
    }
  }
  return absl::OkStatus();
}

}  // namespace gpucompute::client
