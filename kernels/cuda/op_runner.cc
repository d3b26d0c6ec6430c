#include "kernels/cuda/op_runner.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/cuda_status.h"

namespace gpucompute::cuda {
namespace {

absl::Status CancelledBeforeLaunch(absl::string_view op) {
  return absl::CancelledError(absl::StrCat(op, " was cancelled before it was launched"));
}

// The steps on the lent stream, the launch between the two events.
absl::Status RunSteps(DeviceState& d, absl::string_view op, OpContext& ctx, const OpSteps& steps,
                      const OpEnv& env, const Event& start, const Event& stop) {
  const cudaStream_t stream = env.launch.stream;
  if (steps.prepare) GC_DEV_TRY(d, steps.prepare(env), absl::StrCat(op, " (staging)"));
  if (ctx.IsCancelled()) return CancelledBeforeLaunch(op);
  GC_DEV_TRY(d, cudaEventRecord(start.get(), stream), "cudaEventRecord");
  GC_DEV_TRY(d, steps.launch(env), op);
  GC_DEV_TRY(d, cudaEventRecord(stop.get(), stream), "cudaEventRecord");
  if (steps.readback) GC_DEV_TRY(d, steps.readback(env), op);
  GC_DEV_TRY(d, cudaStreamSynchronize(stream), op);
  float ms = 0;
  GC_DEV_TRY(d, cudaEventElapsedTime(&ms, start.get(), stop.get()), "cudaEventElapsedTime");
  ctx.compute_time = absl::Nanoseconds(static_cast<int64_t>(static_cast<double>(ms) * 1e6));
  if (steps.finish) return steps.finish(env);
  return absl::OkStatus();
}

}  // namespace

OpScratch::~OpScratch() {
  for (void* p : ptrs_) (void)cudaFreeAsync(p, stream_);
}

cudaError_t OpScratch::Allocate(size_t bytes, void** out) {
  *out = nullptr;
  const cudaError_t e = cudaMallocFromPoolAsync(out, std::max<size_t>(bytes, 16), pool_, stream_);
  if (e == cudaSuccess) ptrs_.push_back(*out);
  return e;
}

absl::Status RunOp(DeviceState& d, HostCopies& copies, absl::string_view op, OpContext& ctx,
                   const OpSteps& steps) {
  if (ctx.IsCancelled()) return CancelledBeforeLaunch(op);
  if (!d.healthy.load()) return d.Unavailable();
  InFlight in_flight(d);
  ScopedDevice on_device(d.ordinal);
  GC_DEV_TRY(d, on_device.error(), "cudaSetDevice");
  GC_ASSIGN_OR_RETURN(StreamPool::Lease lease, d.compute->Acquire());
  const cudaStream_t stream = lease.stream();
  absl::Status status;
  {
    OpScratch scratch(stream, d.pool);
    const OpEnv env{LaunchEnv{stream, d.pool, d.sm_count}, lease.small(), &scratch, &copies};
    status = RunSteps(d, op, ctx, steps, env, lease.start(), lease.stop());
  }  // scratch freed in stream order
  // A clean run synchronized the stream after its last kernel: only the scratch
  // frees follow, in stream order. After a failure, leave nothing running on the
  // stream before it is lent again.
  if (status.ok()) return status;
  const cudaError_t drained = cudaStreamSynchronize(stream);
  if (drained != cudaSuccess) {
    (void)cudaGetLastError();
    if (IsStickyError(drained)) {
      d.MarkUnhealthy(drained, op);
      lease.Discard();
    }
    if (status.ok()) status = CudaStatus(drained, absl::StrCat(d.name, " ", op));
  }
  return status;
}

absl::Status NoWork(OpContext& ctx) {
  if (ctx.IsCancelled()) return absl::CancelledError("operation cancelled before it was launched");
  ctx.compute_time = absl::ZeroDuration();
  return absl::OkStatus();
}

cudaError_t StageToScratch(const void* host, size_t bytes, void** device, const OpEnv& env) {
  const cudaError_t e = env.scratch->Allocate(bytes, device);
  if (e != cudaSuccess) return e;
  if (bytes <= StreamPool::kSmallPinnedBytes) {
    std::memcpy(env.small, host, bytes);
    return cudaMemcpyAsync(*device, env.small, bytes, cudaMemcpyHostToDevice, env.launch.stream);
  }
  return env.copies->HostToDevice(*device, host, bytes, env.launch.stream);
}

}  // namespace gpucompute::cuda
