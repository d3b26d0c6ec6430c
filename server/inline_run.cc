#include "server/inline_run.h"

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace gpucompute {

bool InlineRunnable(const PreparedOperation& prepared) {
  if (prepared.output_view != nullptr) return false;
  return std::all_of(prepared.operands.begin(), prepared.operands.end(),
                     [](const OperandSpec& operand) {
                       return operand.stored == nullptr && operand.view == nullptr;
                     });
}

absl::StatusOr<std::shared_ptr<Array>> RunInline(PreparedOperation& prepared, Backend& backend,
                                                 int device, Metrics& metrics, OpContext& ctx,
                                                 ExecutionTimes& times) {
  const size_t n = prepared.operands.size();
  std::vector<HostPiece> tensors(n);  // an inline tensor's bytes as one piece
  std::vector<HostInput> inputs;
  inputs.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const OperandSpec& operand = prepared.operands[i];
    std::span<const HostPiece> pieces = operand.pieces;
    if (operand.tensor != nullptr) {
      const std::string& data = operand.tensor->data();
      tensors[i] = {data.data(), data.size()};
      pieces = std::span<const HostPiece>(&tensors[i], 1);
    }
    inputs.push_back({operand.dtype, operand.shape, pieces});
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<Array>> out =
      backend.RunFromHost(inputs, prepared.out_dtype, prepared.out_shape, device, ctx,
                          [&](std::span<const std::shared_ptr<Array>> arrays, Array& result,
                              OpContext& run_ctx) -> absl::Status {
                            if (run_ctx.IsCancelled()) {
                              return absl::CancelledError("request cancelled before it ran");
                            }
                            return prepared.run(backend, arrays, result, run_ctx);
                          });
  const absl::Duration copies = std::max(absl::ZeroDuration(), absl::Now() - start - ctx.compute_time);
  // Inputs copied before a failed operation count as transferred, as in Execute.
  if (ctx.bytes_copied_in > 0) metrics.Transferred(Direction::kHostToDevice, ctx.bytes_copied_in, copies);
  if (!out.ok()) return out.status();
  times.transfer_in += copies;
  times.bytes_in += ctx.bytes_copied_in;
  times.compute = ctx.compute_time;
  times.method = std::string(ctx.method);
  return out;
}

}  // namespace gpucompute
