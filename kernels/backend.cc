// BackendArrays' step-by-step defaults.
#include "kernels/backend.h"

#include <utility>
#include <vector>

#include "common/status_macros.h"

namespace gpucompute {

absl::Status BackendArrays::CopyPiecesToArray(std::span<const HostPiece> pieces, size_t offset,
                                              Array& dst) {
  for (const HostPiece& piece : pieces) {
    GC_RETURN_IF_ERROR(CopyToArray(piece.data, offset, piece.bytes, dst));
    offset += piece.bytes;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Array>> BackendArrays::RunFromHost(
    std::span<const HostInput> inputs, DType out_dtype, const Shape& out_shape, int device,
    OpContext& ctx, ArraysRun run) {
  std::vector<std::shared_ptr<Array>> arrays;
  arrays.reserve(inputs.size());
  for (const HostInput& input : inputs) {
    GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> array, Allocate(input.dtype, input.shape, device));
    GC_RETURN_IF_ERROR(CopyPiecesToArray(input.pieces, 0, *array));
    for (const HostPiece& piece : input.pieces) ctx.bytes_copied_in += piece.bytes;
    arrays.push_back(std::move(array));
  }
  GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> out, Allocate(out_dtype, out_shape, device));
  GC_RETURN_IF_ERROR(run(arrays, *out, ctx));
  return out;
}

}  // namespace gpucompute
