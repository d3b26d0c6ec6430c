#include "kernels/cuda/op_runner.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/cuda_status.h"

namespace gpucompute {

cudaError_t StreamSubmission::QueueOutput() {
  output_queued = true;
  if (out->bytes() == 0) return cudaSuccess;
  return cudaMemcpyAsync(out_host, out->data(), out->bytes(), cudaMemcpyDeviceToHost,
                         lease->stream());
}

}  // namespace gpucompute

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
  if (env.submission != nullptr) GC_DEV_TRY(d, env.submission->QueueOutput(), op);
  GC_DEV_TRY(d, cudaStreamSynchronize(stream), op);
  float ms = 0;
  GC_DEV_TRY(d, cudaEventElapsedTime(&ms, start.get(), stop.get()), "cudaEventElapsedTime");
  ctx.compute_time = absl::Nanoseconds(static_cast<int64_t>(static_cast<double>(ms) * 1e6));
  if (steps.finish) return steps.finish(env);
  return absl::OkStatus();
}

// An array in a lent stream's device bytes: the stream's next lessee reuses them,
// after this submission's work in stream order.
class SubmissionArray final : public Array {
 public:
  SubmissionArray(DType dtype, Shape shape, int64_t count, int device, void* data)
      : Array(dtype, std::move(shape), count, device), data_(data) {}
  void* data() override { return data_; }

 private:
  void* data_;
};

// A result copied off the device into host memory (RunFromHostOnStream).
class HostResultArray final : public Array {
 public:
  HostResultArray(DType dtype, Shape shape, int64_t count, HostBlockPool::Block data)
      : Array(dtype, std::move(shape), count, kHostDevice), data_(std::move(data)) {}
  void* data() override { return data_.data(); }

 private:
  HostBlockPool::Block data_;
};

// Lays the submission's arrays out in the stream's device bytes at the offsets
// of their bytes in its pinned io bytes, copies the inputs in with one copy, runs
// the operation and queues the result's copy back there (unless the operation
// did), then waits once. `arrays` and `out` must outlive the stream's work.
absl::Status QueueAndRun(const std::shared_ptr<DeviceState>& d, std::span<const HostInput> inputs,
                         DType out_dtype, const Shape& out_shape, OpContext& ctx, ArraysRun run,
                         StreamSubmission& submission,
                         std::vector<std::shared_ptr<Array>>& arrays,
                         std::shared_ptr<Array>& out) {
  const cudaStream_t stream = submission.lease->stream();
  char* const io = static_cast<char*>(submission.lease->io().data());
  char* const device_io = static_cast<char*>(submission.lease->device_io().data());
  const auto make_array = [&](DType dtype, const Shape& shape, size_t at) -> absl::StatusOr<std::shared_ptr<Array>> {
    GC_ASSIGN_OR_RETURN(const int64_t count,
                        CheckedElementCount(shape, static_cast<int64_t>(kHostIoBytes), "array"));
    return std::make_shared<SubmissionArray>(dtype, shape, count, d->ordinal, device_io + at);
  };
  size_t at = 0;
  for (const HostInput& input : inputs) {
    GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> array, make_array(input.dtype, input.shape, at));
    size_t bytes = 0;
    for (const HostPiece& piece : input.pieces) bytes += piece.bytes;
    if (bytes != array->bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("input pieces hold ", bytes,
                                                     " bytes for an array of ", array->bytes()));
    }
    for (const HostPiece& piece : input.pieces) {
      if (piece.bytes > 0) std::memcpy(io + at, piece.data, piece.bytes);
      at += piece.bytes;
    }
    at = ScratchArena::Aligned(at);
    arrays.push_back(std::move(array));
  }
  if (at > 0) {
    GC_DEV_TRY(*d, cudaMemcpyAsync(device_io, io, at, cudaMemcpyHostToDevice, stream),
               "copy to the device");
    for (const std::shared_ptr<Array>& array : arrays) ctx.bytes_copied_in += array->bytes();
  }
  GC_ASSIGN_OR_RETURN(out, make_array(out_dtype, out_shape, at));
  submission.out = out.get();
  submission.out_host = io + at;
  submission.arena = {device_io + ScratchArena::Aligned(at + out->bytes()),
                      device_io + submission.lease->device_io().bytes()};
  ctx.submission = &submission;
  const absl::Status ran = run(arrays, *out, ctx);
  ctx.submission = nullptr;
  GC_RETURN_IF_ERROR(ran);
  if (!submission.output_queued) {  // no RunOp, or work after its copy
    GC_DEV_TRY(*d, submission.QueueOutput(), "copy to the host");
    GC_DEV_TRY(*d, cudaStreamSynchronize(stream), "copy to the host");
  }
  return absl::OkStatus();
}

}  // namespace

bool FitsOneSubmission(std::span<const HostInput> inputs, DType out_dtype, const Shape& out_shape) {
  const absl::StatusOr<int64_t> count =
      CheckedElementCount(out_shape, static_cast<int64_t>(kHostIoBytes), "result");
  if (!count.ok()) return false;
  size_t total = ScratchArena::Aligned(static_cast<size_t>(*count) * ElementSize(out_dtype));
  for (const HostInput& input : inputs) {
    for (const HostPiece& piece : input.pieces) {
      if (piece.bytes > kHostIoBytes) return false;
      total += piece.bytes;
    }
    total = ScratchArena::Aligned(total);
    if (total > kHostIoBytes) return false;
  }
  return true;
}

absl::StatusOr<std::shared_ptr<Array>> RunFromHostOnStream(const std::shared_ptr<DeviceState>& d,
                                                           std::span<const HostInput> inputs,
                                                           DType out_dtype, const Shape& out_shape,
                                                           OpContext& ctx, ArraysRun run,
                                                           HostBlockPool& results) {
  if (ctx.IsCancelled()) return absl::CancelledError("operation cancelled before it was launched");
  if (!d->healthy.load()) return d->Unavailable();
  InFlight in_flight(*d);
  ScopedDevice on_device(d->ordinal);
  GC_DEV_TRY(*d, on_device.error(), "cudaSetDevice");
  GC_ASSIGN_OR_RETURN(StreamPool::Lease lease, d->compute->Acquire());
  StreamSubmission submission{.device = d.get(), .lease = &lease};
  // Declared after the lease: gone before the stream is lent again, and only once
  // its work is done.
  std::vector<std::shared_ptr<Array>> arrays;
  std::shared_ptr<Array> out;
  const absl::Status status =
      QueueAndRun(d, inputs, out_dtype, out_shape, ctx, run, submission, arrays, out);
  if (!status.ok()) {
    // Leave nothing running on the stream, nor using the arrays, before they go.
    const cudaError_t drained = cudaStreamSynchronize(lease.stream());
    if (drained != cudaSuccess) {
      (void)cudaGetLastError();
      if (IsStickyError(drained)) {
        d->MarkUnhealthy(drained, "RunFromHost");
        lease.Discard();
      }
    }
    return status;
  }
  HostBlockPool::Block block = results.TakeForArray(out->bytes());
  if (block.data() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("could not allocate ", out->bytes(), " bytes of host memory for the result"));
  }
  if (out->bytes() > 0) std::memcpy(block.data(), submission.out_host, out->bytes());
  return std::make_shared<HostResultArray>(out_dtype, out_shape, out->size(), std::move(block));
}

OpScratch::~OpScratch() {
  for (void* p : ptrs_) (void)cudaFreeAsync(p, env_.stream);
}

cudaError_t OpScratch::Allocate(size_t bytes, void** out) {
  bool pooled = false;
  const cudaError_t e = AllocateScratch(std::max<size_t>(bytes, 16), env_, out, &pooled);
  if (e == cudaSuccess && pooled) ptrs_.push_back(*out);
  return e;
}

absl::Status RunOp(DeviceState& d, HostCopies& copies, absl::string_view op, OpContext& ctx,
                   const OpSteps& steps) {
  if (ctx.IsCancelled()) return CancelledBeforeLaunch(op);
  if (!d.healthy.load()) return d.Unavailable();
  if (StreamSubmission* const submission = ctx.submission; submission != nullptr) {
    // Joins the submission: its stream (counted in flight, its device current,
    // drained after a failure by RunFromHostOnStream).
    if (submission->device != &d) {
      return absl::FailedPreconditionError(absl::StrCat(
          op, " runs on ", d.name, " but its submission is on ", submission->device->name));
    }
    const StreamPool::Lease& lease = *submission->lease;
    OpScratch scratch(lease.stream(), d.pool, &submission->arena);
    const OpEnv env{LaunchEnv{lease.stream(), d.pool, d.sm_count, &submission->arena},
                    lease.small(), &scratch, &copies, submission};
    return RunSteps(d, op, ctx, steps, env, lease.start(), lease.stop());
  }
  InFlight in_flight(d);
  ScopedDevice on_device(d.ordinal);
  GC_DEV_TRY(d, on_device.error(), "cudaSetDevice");
  GC_ASSIGN_OR_RETURN(StreamPool::Lease lease, d.compute->Acquire());
  const cudaStream_t stream = lease.stream();
  absl::Status status;
  {
    OpScratch scratch(stream, d.pool);
    const OpEnv env{LaunchEnv{stream, d.pool, d.sm_count}, lease.small(), &scratch, &copies,
                    nullptr};
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
