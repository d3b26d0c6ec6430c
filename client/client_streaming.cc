// Client::StreamingCompute: a writer thread sends the header and the input
// chunks while the calling thread reads and places the result chunks. With
// ClientOptions::stripes, an input larger than stripe_bytes whose leading axis
// can be cut runs as calls over ranges of it (StripedStreamingCompute,
// client_stripes.cc).
#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/raw_call.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "gpucompute/v1/bulk_wire.h"

namespace gpucompute::client {
namespace {

// Elements of one row: what a chunk must hold whole (StreamingComputeRequest).
uint64_t RowElements(const v1::StreamingComputeHeader& header) {
  const auto& shape = header.shape();
  if (shape.empty() || header.operation() == v1::STREAMING_DISCOUNT_PRODUCT) return 1;
  if (header.operation() == v1::STREAMING_NORMALIZE) {
    return static_cast<uint64_t>(shape[shape.size() - 1]);
  }
  uint64_t elements = 1;
  for (int i = 1; i < shape.size(); ++i) elements *= static_cast<uint64_t>(shape[i]);
  return elements;
}

}  // namespace

absl::StatusOr<bool> Client::SplitsOnLeadingAxis(const v1::StreamingComputeHeader& header) {
  const int rank = header.shape_size();
  switch (header.operation()) {
    case v1::STREAMING_NORMALIZE:
      return rank >= 2;  // rows are the last axis
    case v1::STREAMING_DISCOUNT_PRODUCT: {
      // Calls over ranges of the leading axis see the same factors when these
      // repeat along it: they do not span it (leading extents of 1 aside).
      std::vector<int64_t> factors_shape;
      const v1::Operand& factors = header.factors();
      if (factors.has_tensor()) {
        factors_shape.assign(factors.tensor().shape().begin(), factors.tensor().shape().end());
      } else if (factors.has_shared_memory()) {
        factors_shape.assign(factors.shared_memory().shape().begin(),
                             factors.shared_memory().shape().end());
      } else {
        GC_ASSIGN_OR_RETURN(const v1::ListResponse list, List());
        const auto stored = std::find_if(
            list.buffers().begin(), list.buffers().end(),
            [&](const v1::BufferInfo& info) { return info.id() == factors.buffer_id(); });
        if (stored == list.buffers().end()) return false;  // the server says why
        factors_shape.assign(stored->shape().begin(), stored->shape().end());
      }
      const auto first_spanned = std::find_if(factors_shape.begin(), factors_shape.end(),
                                              [](int64_t extent) { return extent != 1; });
      return factors_shape.end() - first_spanned < rank;
    }
    default:
      return false;  // haversine points: the result's runs interleave the ranges
  }
}

absl::StatusOr<Result> Client::StreamingCall(grpc::Channel& channel, grpc::ClientContext& context,
                                             const v1::StreamingComputeHeader& header,
                                             std::span<const absl::string_view> operands,
                                             uint64_t operand_bytes,
                                             ResultAssembler::Options options) const {
  const uint64_t row_bytes = RowElements(header) * (header.dtype() == v1::FLOAT32 ? 4 : 8);
  const uint64_t rows_per_chunk = std::max<uint64_t>(
      1, options_.upload_chunk_bytes / (row_bytes * operands.size()));
  const uint64_t chunk_bytes = rows_per_chunk * row_bytes;
  RawCall stream(channel, context, streaming_compute_method_, RawCall::Start::kNow);
  // A failed Write means the call ended (the server failed it, or the reader
  // cancelled it): the statuses below say why.
  std::thread writer([&] {
    NameThisThread("gc-stream-send");
    v1::StreamingComputeRequest first;
    *first.mutable_header() = header;
    bool open = stream.Write(v1::wire::SerializedMessage(first));
    for (uint64_t offset = 0; open && offset < operand_bytes; offset += chunk_bytes) {
      const uint64_t length = std::min(chunk_bytes, operand_bytes - offset);
      std::vector<grpc::Slice> payload;
      // gRPC sends from the operands themselves, which outlive the call.
      for (absl::string_view operand : operands) {
        payload.emplace_back(operand.data() + offset, length, grpc::Slice::STATIC_SLICE);
      }
      open = stream.Write(v1::wire::UploadDataMessage(std::move(payload)));
    }
    if (open) stream.WritesDone();
  });
  if (header.operation() == v1::STREAMING_HAVERSINE_POINTS) {
    options.result_runs = std::max(1, header.references_size());
  }
  ResultAssembler assembler(std::move(options));
  const absl::Status framing = ReadResultStream(stream, context, assembler);
  writer.join();
  const grpc::Status status = stream.Finish();
  GC_RETURN_IF_ERROR(framing);
  GC_RETURN_IF_ERROR(ToAbslStatus(status));
  return std::move(assembler).Finish();
}

absl::StatusOr<Result> Client::StreamingCompute(const v1::StreamingComputeHeader& header,
                                                std::span<const absl::string_view> operands,
                                                const ResultDestination& destination,
                                                const ProgressCallback& progress) {
  const size_t expected_operands = header.operation() == v1::STREAMING_HAVERSINE_POINTS ? 2 : 1;
  if (operands.size() != expected_operands) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StreamingCompute needs ", expected_operands, " streamed operand(s), got ", operands.size()));
  }
  GC_ASSIGN_OR_RETURN(const uint64_t operand_bytes,
                      ByteCount(header.dtype(), ShapeOf(header.shape())));
  for (absl::string_view operand : operands) {
    if (operand.size() != operand_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a streamed operand has ", operand.size(), " bytes; header.shape needs ", operand_bytes));
    }
  }
  const uint64_t calls =
      header.shape_size() == 0
          ? 1
          : std::min({static_cast<uint64_t>(std::max(options_.stripes, 1)),
                      static_cast<uint64_t>(header.shape(0)),
                      operand_bytes / std::max<uint64_t>(options_.stripe_bytes, 1)});
  if (calls > 1) {
    GC_ASSIGN_OR_RETURN(const bool splits, SplitsOnLeadingAxis(header));
    if (splits) return StripedStreamingCompute(header, operands, calls, destination, progress);
  }
  grpc::ClientContext context;
  SetDeadline(context);
  ResultAssembler::Options options = AssemblerOptions(/*expect_data=*/true, progress);
  options.destination = destination;
  return StreamingCall(*channel_, context, header, operands, operand_bytes, std::move(options));
}

}  // namespace gpucompute::client
