// Client::StreamingCompute: a writer thread sends the header and the input
// chunks while the calling thread reads and places the result chunks.
#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "common/status_macros.h"
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
  const uint64_t row_bytes =
      RowElements(header) * (header.dtype() == v1::FLOAT32 ? 4 : 8);
  const uint64_t rows_per_chunk = std::max<uint64_t>(
      1, options_.upload_chunk_bytes / (row_bytes * expected_operands));
  const uint64_t chunk_bytes = rows_per_chunk * row_bytes;

  grpc::ClientContext context;
  SetDeadline(context);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel_.get(), streaming_compute_method_, &context));
  // A failed Write means the call ended (the server failed it, or the reader
  // cancelled it): the statuses below say why.
  std::thread writer([&] {
    v1::StreamingComputeRequest first;
    *first.mutable_header() = header;
    bool open = stream->Write(v1::wire::SerializedMessage(first));
    for (uint64_t offset = 0; open && offset < operand_bytes; offset += chunk_bytes) {
      const uint64_t length = std::min(chunk_bytes, operand_bytes - offset);
      std::vector<grpc::Slice> payload;
      // gRPC sends from the operands themselves, which outlive the call.
      for (absl::string_view operand : operands) {
        payload.emplace_back(operand.data() + offset, length, grpc::Slice::STATIC_SLICE);
      }
      open = stream->Write(v1::wire::UploadDataMessage(std::move(payload)));
    }
    if (open) stream->WritesDone();
  });

  ResultAssembler::Options options = AssemblerOptions(/*expect_data=*/true, progress);
  options.destination = destination;
  if (header.operation() == v1::STREAMING_HAVERSINE_POINTS) {
    options.result_runs = std::max(1, header.references_size());
  }
  ResultAssembler assembler(std::move(options));
  const absl::Status framing = ReadResultStream(*stream, context, assembler);
  writer.join();
  const grpc::Status status = stream->Finish();
  GC_RETURN_IF_ERROR(framing);
  GC_RETURN_IF_ERROR(ToAbslStatus(status));
  return std::move(assembler).Finish();
}

}  // namespace gpucompute::client
