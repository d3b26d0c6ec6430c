#include "client/result.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/tensor.h"
#include "common/status_macros.h"

namespace gpucompute::client {

absl::StatusOr<std::vector<double>> Result::AsDoubles() const {
  return DecodeAsDoubles(header.dtype(), data);
}

ResultAssembler::ResultAssembler(Options options) : options_(std::move(options)) {}

absl::Status ResultAssembler::Add(const v1::ResultChunk& chunk) {
  if (have_trailer_) {
    return absl::DataLossError("result stream: message after the trailer");
  }
  switch (chunk.kind_case()) {
    case v1::ResultChunk::kHeader:
      return AddHeader(chunk.header());
    case v1::ResultChunk::kData:
      return AddData(chunk.data().offset(), chunk.data().data());
    case v1::ResultChunk::kTrailer:
      return AddTrailer(chunk.trailer());
    case v1::ResultChunk::kComplete:
      return AddComplete(chunk.complete());
    case v1::ResultChunk::KIND_NOT_SET:
      break;
  }
  return absl::DataLossError("result stream: empty message (no header, data or trailer)");
}

absl::Status ResultAssembler::AddHeader(const v1::ResultHeader& header) {
  if (have_header_) return absl::DataLossError("result stream: second header");
  absl::StatusOr<uint64_t> expected = ByteCount(header.dtype(), ShapeOf(header.shape()));
  if (!expected.ok()) {
    return absl::DataLossError(
        absl::StrCat("result stream: invalid header: ", expected.status().message()));
  }
  if (*expected != header.total_bytes()) {
    return absl::DataLossError(absl::StrCat(
        "result stream: header declares ", header.total_bytes(), " bytes but ",
        DTypeName(header.dtype()), " ", ShapeToString(ShapeOf(header.shape())), " is ", *expected));
  }
  if (options_.expect_data && header.total_bytes() > options_.max_result_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("result of ", header.total_bytes(),
                                                     " bytes exceeds the client's limit of ",
                                                     options_.max_result_bytes));
  }
  have_header_ = true;
  result_.header = header;
  // One allocation for the whole result; chunks are copied into place.
  if (options_.expect_data) result_.data.resize(header.total_bytes());
  if (options_.progress) options_.progress(0, header.total_bytes());
  return absl::OkStatus();
}

absl::Status ResultAssembler::AddComplete(const v1::ResultComplete& complete) {
  GC_RETURN_IF_ERROR(AddHeader(complete.header()));
  // A kept result carries no data (and AddData refuses any).
  if (options_.expect_data || !complete.data().empty()) {
    GC_RETURN_IF_ERROR(AddData(0, complete.data()));
  }
  return AddTrailer(complete.trailer());
}

absl::Status ResultAssembler::AddData(uint64_t offset, const std::string& bytes) {
  if (!have_header_) return absl::DataLossError("result stream: data before the header");
  if (!options_.expect_data) {
    return absl::DataLossError("result stream: data chunk although the result was kept on device");
  }
  if (offset != received_bytes_) {
    return absl::DataLossError(absl::StrCat("result stream: chunk at offset ", offset,
                                            ", expected offset ", received_bytes_));
  }
  const uint64_t total = result_.header.total_bytes();
  if (bytes.size() > total - received_bytes_) {
    return absl::DataLossError(absl::StrCat("result stream: chunk of ", bytes.size(),
                                            " bytes at offset ", offset,
                                            " overruns the declared ", total, " bytes"));
  }
  if (!bytes.empty()) {
    std::memcpy(result_.data.data() + received_bytes_, bytes.data(), bytes.size());
  }
  received_bytes_ += bytes.size();
  if (options_.progress) options_.progress(received_bytes_, total);
  return absl::OkStatus();
}

absl::Status ResultAssembler::AddTrailer(const v1::ResultTrailer& trailer) {
  if (!have_header_) return absl::DataLossError("result stream: trailer before the header");
  if (options_.expect_data && received_bytes_ != result_.header.total_bytes()) {
    return absl::DataLossError(absl::StrCat("result stream: short data: received ", received_bytes_,
                                            " of ", result_.header.total_bytes(), " bytes"));
  }
  if (!options_.expect_data && !trailer.has_stored_buffer() &&
      trailer.shared_memory_region_id().empty()) {
    return absl::DataLossError(
        "result stream: the result was to be kept on the server or written into shared "
        "memory, but the trailer names no stored buffer nor region");
  }
  have_trailer_ = true;
  result_.trailer = trailer;
  return absl::OkStatus();
}

absl::StatusOr<Result> ResultAssembler::Finish() && {
  if (!have_header_) return absl::DataLossError("result stream ended without a header");
  if (!have_trailer_) {
    return absl::DataLossError(absl::StrCat("result stream ended without a trailer after ",
                                            received_bytes_, " of ", result_.header.total_bytes(),
                                            " bytes"));
  }
  return std::move(result_);
}

}  // namespace gpucompute::client
