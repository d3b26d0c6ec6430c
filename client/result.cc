#include "client/result.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/tensor.h"
#include "common/status_macros.h"
#include "gpucompute/v1/bulk_wire.h"

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
    case v1::ResultChunk::kData: {
      const std::string& bytes = chunk.data().data();
      return AddData(chunk.data().offset(), bytes.size(), [&bytes](char* destination) {
        std::memcpy(destination, bytes.data(), bytes.size());
      });
    }
    case v1::ResultChunk::kTrailer:
      return AddTrailer(chunk.trailer());
    case v1::ResultChunk::kComplete:
      return AddComplete(chunk.complete());
    case v1::ResultChunk::KIND_NOT_SET:
      break;
  }
  return absl::DataLossError("result stream: empty message (no header, data or trailer)");
}

absl::Status ResultAssembler::AddBytes(const grpc::ByteBuffer& bytes) {
  const v1::wire::MessageBytes message(bytes);
  if (std::optional<v1::wire::DataPayload> data = v1::wire::FindResultData(message)) {
    if (have_trailer_) return absl::DataLossError("result stream: message after the trailer");
    return AddData(data->offset, data->size, [&](char* destination) {
      if (copier_ != nullptr) {
        copier_->Copy(std::move(message), data->start, data->size, destination);
      } else {
        message.CopyOut(data->start, data->size, destination);
      }
    });
  }
  v1::ResultChunk chunk;
  if (!v1::wire::ParseMessageBytes(bytes, chunk)) {
    return absl::DataLossError("result stream: a message that is not a ResultChunk");
  }
  return Add(chunk);
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
  if (options_.range_begin > header.total_bytes()) {
    return absl::DataLossError(absl::StrCat("result stream: range starts at ", options_.range_begin,
                                            " past the result's ", header.total_bytes(), " bytes"));
  }
  received_bytes_ = options_.range_begin;
  range_end_ = options_.range_end == 0 ? header.total_bytes()
                                       : std::min(options_.range_end, header.total_bytes());
  if (options_.result_runs > 1) {
    if (header.total_bytes() % options_.result_runs != 0 || options_.range_begin != 0 ||
        options_.range_end != 0) {
      return absl::DataLossError(absl::StrCat("result stream: ", header.total_bytes(),
                                              " bytes do not split into ", options_.result_runs,
                                              " equal runs"));
    }
    run_bytes_ = header.total_bytes() / options_.result_runs;
    for (uint64_t run = 0; run < options_.result_runs; ++run) run_next_.push_back(run * run_bytes_);
  }
  have_header_ = true;
  result_.header = header;
  // One allocation for the whole result (or the caller's memory); chunks are
  // copied into place.
  if (options_.expect_data && options_.destination) {
    absl::StatusOr<char*> destination = options_.destination(header);
    if (!destination.ok()) return destination.status();
    destination_ = *destination;
  } else if (options_.expect_data) {
    result_.data = HostBytes::Allocate(header.total_bytes());
    destination_ = result_.data.data();
  }
  if (options_.expect_data && range_end_ - received_bytes_ >= kCopyBesideFromBytes) {
    copier_ = std::make_unique<PayloadCopier>();
  }
  if (options_.progress) options_.progress(0, header.total_bytes());
  return absl::OkStatus();
}

absl::Status ResultAssembler::AddComplete(const v1::ResultComplete& complete) {
  GC_RETURN_IF_ERROR(AddHeader(complete.header()));
  // A kept result carries no data (and AddData refuses any).
  const std::string& bytes = complete.data();
  if (options_.expect_data || !bytes.empty()) {
    GC_RETURN_IF_ERROR(AddData(0, bytes.size(), [&bytes](char* destination) {
      std::memcpy(destination, bytes.data(), bytes.size());
    }));
  }
  return AddTrailer(complete.trailer());
}

absl::Status ResultAssembler::AddData(uint64_t offset, uint64_t size,
                                      const std::function<void(char*)>& copy) {
  if (!have_header_) return absl::DataLossError("result stream: data before the header");
  if (!options_.expect_data) {
    return absl::DataLossError("result stream: data chunk although the result was kept on device");
  }
  const uint64_t total = range_end_;
  if (!run_next_.empty()) return AddRunData(offset, size, copy);
  if (offset != received_bytes_) {
    return absl::DataLossError(absl::StrCat("result stream: chunk at offset ", offset,
                                            ", expected offset ", received_bytes_));
  }
  if (size > total - received_bytes_) {
    return absl::DataLossError(absl::StrCat("result stream: chunk of ", size, " bytes at offset ",
                                            offset, " overruns the declared ", total, " bytes"));
  }
  if (size > 0) copy(destination_ + received_bytes_);
  received_bytes_ += size;
  if (options_.progress) options_.progress(received_bytes_, total);
  return absl::OkStatus();
}

absl::Status ResultAssembler::AddRunData(uint64_t offset, uint64_t size,
                                         const std::function<void(char*)>& copy) {
  const uint64_t run = std::min<uint64_t>(offset / run_bytes_, run_next_.size() - 1);
  if (offset != run_next_[run]) {
    return absl::DataLossError(absl::StrCat("result stream: chunk at offset ", offset,
                                            ", expected offset ", run_next_[run], " (run ", run,
                                            ")"));
  }
  if (size > (run + 1) * run_bytes_ - offset) {
    return absl::DataLossError(absl::StrCat("result stream: chunk of ", size, " bytes at offset ",
                                            offset, " overruns run ", run, " of ", run_bytes_,
                                            " bytes"));
  }
  if (size > 0) copy(destination_ + offset);
  run_next_[run] += size;
  received_bytes_ += size;
  if (options_.progress) options_.progress(received_bytes_, range_end_);
  return absl::OkStatus();
}

absl::Status ResultAssembler::AddTrailer(const v1::ResultTrailer& trailer) {
  if (!have_header_) return absl::DataLossError("result stream: trailer before the header");
  if (options_.expect_data && received_bytes_ != range_end_) {
    return absl::DataLossError(absl::StrCat("result stream: short data: received ", received_bytes_,
                                            " of ", range_end_, " bytes"));
  }
  if (!options_.expect_data && !trailer.has_stored_buffer() &&
      trailer.shared_memory_region_id().empty()) {
    return absl::DataLossError(
        "result stream: the result was to be kept on the server or written into shared "
        "memory, but the trailer names no stored buffer nor region");
  }
  have_trailer_ = true;
  result_.trailer = trailer;
  if (copier_ != nullptr) copier_->Drain();  // every byte in place before the result is used
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
