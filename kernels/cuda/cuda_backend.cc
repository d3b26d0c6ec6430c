// The CUDA backend (see cuda_backend.h): the Backend interface over the devices
// (device.h), the host copies (host_copy.h) and the operation runner (op_runner.h).
// Each operation checks its operands, fills its launcher's arguments and hands its
// steps to RunOp (Lomb-Scargle in lombscargle_op.cc); the kernels live in the .cu
// files behind launchers.h.
#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "kernels/cuda/cufft_plans.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/host_copy.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/lombscargle_op.h"
#include "kernels/cuda/op_runner.h"
#include "kernels/cuda/shared_memory.h"
#include "kernels/memory/host_block_pool.h"
#include "kernels/norm.h"
#include "kernels/preconditions.h"
#include "kernels/shape_rules.h"

namespace gpucompute {
namespace {

using cuda::DeviceState;
using cuda::NoWork;
using cuda::OpEnv;
using cuda::OpSteps;

// The CPU backend's message for the first stored point the device found outside its
// rule (a latitude before any longitude), the value re-read to the host.
absl::Status BadPointError(DeviceState& d, const OpEnv& env, const cuda::PointsResult& result,
                           const Array& lat, const Array& lon) {
  const bool bad_lat = result.bad_lat != cuda::kNoIndex;
  const Array& array = bad_lat ? lat : lon;
  const unsigned long long index = bad_lat ? result.bad_lat : result.bad_lon;
  const size_t es = ElementSize(array.dtype());
  char value[sizeof(double)];
  GC_DEV_TRY(d, env.copies->DeviceToHost(value, static_cast<const char*>(array.data()) + index * es,
                                         es, env.launch.stream), "HaversinePoints");
  const double v = array.dtype() == DType::kFloat32 ? double{*reinterpret_cast<float*>(value)}
                                                    : *reinterpret_cast<double*>(value);
  return CheckValue(v, absl::StrCat(bad_lat ? "lat[" : "lon[", index, "]"),
                    bad_lat ? kLatitudeRule : kLongitudeRule);
}

// Runs a haversine kernel after staging the reference points (with cos(lat)) into the
// operation's scratch memory; `launch(d_refs, env)` starts the kernel. `steps` may add
// a prepare step (run after the staging), a readback and a finish.
template <typename Launch>
absl::Status RunWithRefs(DeviceState& d, cuda::HostCopies& copies, const char* name,
                         std::span<const GeoPoint> refs, OpContext& ctx, Launch launch,
                         OpSteps steps = {}) {
  constexpr double kDegToRad = 0.017453292519943295769236907684886;
  std::vector<cuda::RefPoint> host_refs(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    host_refs[i].lat_deg = refs[i].lat;
    host_refs[i].lon_deg = refs[i].lon;
    host_refs[i].cos_lat = std::cos(refs[i].lat * kDegToRad);
  }
  cuda::RefPoint* d_refs = nullptr;
  steps.prepare = [&, then = std::move(steps.prepare)](const OpEnv& env) {
    const cudaError_t staged =
        cuda::StageToScratch(host_refs.data(), host_refs.size() * sizeof(cuda::RefPoint),
                             reinterpret_cast<void**>(&d_refs), env);
    return staged != cudaSuccess || !then ? staged : then(env);
  };
  steps.launch = [&](const OpEnv& env) { return launch(d_refs, env); };
  return cuda::RunOp(d, copies, name, ctx, steps);
}

// The host copies, their pinned staging pool made with the first device current.
absl::StatusOr<std::unique_ptr<cuda::HostCopies>> CreateHostCopies(int device,
                                                                   uint64_t staging_bytes) {
  cuda::ScopedDevice on_device(device);
  if (on_device.error() != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat(
        "no usable CUDA device: ", cuda::CudaStatus(on_device.error(), "cudaSetDevice").message()));
  }
  absl::StatusOr<std::unique_ptr<cuda::HostCopies>> copies = cuda::HostCopies::Create(staging_bytes);
  if (!copies.ok()) {
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: pinned staging pool: ",
                                               copies.status().message()));
  }
  return copies;
}

// Before any context exists on the devices (a device already in use in this
// process, as in tests that make a second backend, keeps its mode).
void SetSyncMode(const std::vector<int>& devices, CudaSync sync) {
  const unsigned flags = sync == CudaSync::kSpin    ? cudaDeviceScheduleSpin
                         : sync == CudaSync::kYield ? cudaDeviceScheduleYield
                                                    : cudaDeviceScheduleBlockingSync;
  for (int ordinal : devices) {
    cuda::ScopedDevice on_device(ordinal);
    if (on_device.error() == cudaSuccess) (void)cudaSetDeviceFlags(flags);
    (void)cudaGetLastError();
  }
}

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create(const BackendOptions& options);

  absl::string_view name() const override { return "cuda"; }
  std::vector<DeviceDescription> Devices() const override { return devices_.Descriptions(); }
  bool Healthy() const override { return devices_.AnyHealthy(); }
  int PickDevice() override { return devices_.Pick(); }
  void PrepareThread() override { devices_.PrepareThread(); }
  uint64_t max_kept_host_bytes() const override { return cuda::kCachedResultBytes; }

  BackendStats Stats() const override {
    BackendStats stats;
    stats.devices = devices_.MemoryStats();
    stats.pinned_staging_bytes = copies_->staging_bytes();
    stats.kernels_loaded = kernels_loaded_;
    stats.warmup_time = warmup_time_;
    return stats;
  }

  absl::StatusOr<std::shared_ptr<Array>> Allocate(DType dtype, Shape shape, int device) override {
    std::shared_ptr<DeviceState> dev = devices_.Find(device);
    if (dev == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", device, " does not exist; ", devices_.Describe()));
    }
    return cuda::AllocateArray(dev, dtype, std::move(shape));
  }

  absl::StatusOr<std::shared_ptr<Array>> RunFromHost(std::span<const HostInput> inputs,
                                                     DType out_dtype, const Shape& out_shape,
                                                     int device, OpContext& ctx,
                                                     ArraysRun run) override {
    std::shared_ptr<DeviceState> dev = devices_.Find(device);
    if (dev == nullptr || !cuda::FitsOneSubmission(inputs, out_dtype, out_shape)) {
      return Backend::RunFromHost(inputs, out_dtype, out_shape, device, ctx, run);
    }
    return cuda::RunFromHostOnStream(dev, inputs, out_dtype, out_shape, ctx, run, *result_blocks_);
  }

  absl::Status CopyToArray(const void* host_src, size_t offset, size_t bytes, Array& dst) override {
    GC_RETURN_IF_ERROR(CheckCopyBounds(dst, offset, bytes, host_src));
    GC_ASSIGN_OR_RETURN(DeviceState* const d, devices_.OperandDevice({{&dst, "array"}}));
    return copies_->ToArray(*d, host_src, offset, bytes, dst);
  }

  absl::Status CopyPiecesToArray(std::span<const HostPiece> pieces, size_t offset,
                                 Array& dst) override {
    size_t bytes = 0;
    for (const HostPiece& piece : pieces) bytes += piece.bytes;
    GC_RETURN_IF_ERROR(CheckCopyBounds(dst, offset, bytes, pieces.empty() ? nullptr : pieces[0].data));
    GC_ASSIGN_OR_RETURN(DeviceState* const d, devices_.OperandDevice({{&dst, "array"}}));
    return copies_->PiecesToArray(*d, pieces, offset, dst);
  }

  absl::Status CopyFromArray(const Array& src, size_t offset, size_t bytes, void* host_dst) override {
    GC_RETURN_IF_ERROR(CheckCopyBounds(src, offset, bytes, host_dst));
    GC_ASSIGN_OR_RETURN(DeviceState* const d, devices_.OperandDevice({{&src, "array"}}));
    return copies_->FromArray(*d, src, offset, bytes, host_dst);
  }

  absl::Status CopyArray(const Array& src, Array& dst) override {
    if (src.bytes() != dst.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("copy of a ", src.bytes(), "-byte array into a ",
                                                     dst.bytes(), "-byte array"));
    }
    GC_ASSIGN_OR_RETURN(DeviceState* const from, devices_.OperandDevice({{&src, "source"}}));
    GC_ASSIGN_OR_RETURN(DeviceState* const to, devices_.OperandDevice({{&dst, "destination"}}));
    if (src.bytes() == 0) return absl::OkStatus();
    return cuda::CopyBetweenDevices(*from, *to, src, dst);
  }

  absl::StatusOr<std::shared_ptr<void>> PinHostMemory(void* data, size_t bytes) override {
    return cuda::PinHostRange(devices_.Pick(), data, bytes);
  }

  absl::StatusOr<IpcMemory> OpenIpcMemory(absl::string_view handle,
                                          absl::string_view pci_bus_id) override {
    return cuda::OpenIpcHandle(devices_, handle, pci_bus_id);
  }

  absl::Status CheckValues(const Array& array, absl::string_view name,
                           const ValueRule& rule) override {
    GC_ASSIGN_OR_RETURN(DeviceState* const d, devices_.OperandDevice({{&array, name}}));
    if (array.size() == 0) return absl::OkStatus();
    unsigned long long* d_first = nullptr;
    unsigned long long first = cuda::kNoIndex;
    double value = 0;
    OpSteps steps;
    steps.prepare = [&](const OpEnv& env) {
      return env.scratch->Allocate(sizeof(*d_first), reinterpret_cast<void**>(&d_first));
    };
    steps.launch = [&](const OpEnv& env) {
      return cuda::LaunchFirstBreakingValue(array.dtype(), array.data(), array.size(),
                                            {rule.lowest, rule.highest, rule.nonzero}, d_first,
                                            env.launch);
    };
    steps.readback = [&](const OpEnv& env) {
      return cudaMemcpyAsync(env.small, d_first, sizeof(*d_first), cudaMemcpyDeviceToHost,
                             env.launch.stream);
    };
    steps.finish = [&](const OpEnv& env) -> absl::Status {
      first = *static_cast<const unsigned long long*>(env.small);
      return absl::OkStatus();
    };
    OpContext ctx;
    GC_RETURN_IF_ERROR(cuda::RunOp(*d, *copies_, "CheckValues", ctx, steps));
    if (first == cuda::kNoIndex) return absl::OkStatus();
    // Error path: the breaking element itself, for the message.
    const size_t element = ElementSize(array.dtype());
    if (array.dtype() == DType::kFloat32) {
      float f = 0;
      GC_RETURN_IF_ERROR(CopyFromArray(array, first * element, element, &f));
      value = f;
    } else {
      GC_RETURN_IF_ERROR(CopyFromArray(array, first * element, element, &value));
    }
    return CheckValue(value, absl::StrCat(name, "[", first, "]"), rule);
  }

  absl::Status DiscountProduct(const Array& factors, const Array& values, Array& out,
                               OpContext& ctx) override {
    GC_ASSIGN_OR_RETURN(DeviceState* const d, devices_.OperandDevice({{&factors, "factors"},
                                                                      {&values, "values"},
                                                                      {&out, "out"}}));
    GC_RETURN_IF_ERROR(CheckDType(values, "values", factors.dtype()));
    GC_RETURN_IF_ERROR(CheckDType(out, "out", factors.dtype()));
    GC_ASSIGN_OR_RETURN(const Shape shape,
                        BroadcastShapes(factors.shape(), values.shape(), "factors", "values"));
    GC_RETURN_IF_ERROR(CheckShape(out, "out", shape));
    if (out.size() == 0) return NoWork(ctx);
    cuda::BroadcastArgs args;
    args.rank = static_cast<int>(shape.size());
    const std::vector<int64_t> sa = BroadcastStrides(factors.shape(), shape);
    const std::vector<int64_t> sb = BroadcastStrides(values.shape(), shape);
    for (int axis = 0; axis < args.rank; ++axis) {
      args.shape[axis] = shape[axis];
      args.stride_a[axis] = sa[axis];
      args.stride_b[axis] = sb[axis];
    }
    OpSteps steps;
    steps.launch = [&](const OpEnv& env) {
      return cuda::LaunchDiscountProduct(factors.dtype(), factors.data(), values.data(), out.data(),
                                         args, env.launch);
    };
    return cuda::RunOp(*d, *copies_, "DiscountProduct", ctx, steps);
  }

  absl::Status HaversineMesh(const LatLonMesh& mesh, std::span<const GeoPoint> refs, double radius,
                             Array& out, OpContext& ctx) override {
    GC_ASSIGN_OR_RETURN(DeviceState* const d, devices_.OperandDevice({{&out, "out"}}));
    GC_RETURN_IF_ERROR(CheckHaversineMesh(mesh, refs, radius, out));
    if (out.size() == 0) return NoWork(ctx);
    return RunWithRefs(*d, *copies_, "HaversineMesh", refs, ctx,
                       [&](const cuda::RefPoint* d_refs, const OpEnv& env) {
                         return cuda::LaunchHaversineMesh(
                             out.dtype(), cuda::MeshAxis{mesh.lat.start, mesh.lat.stop, mesh.lat.count},
                             cuda::MeshAxis{mesh.lon.start, mesh.lon.stop, mesh.lon.count}, d_refs,
                             static_cast<int64_t>(refs.size()), radius, out.data(), env.launch);
                       });
  }

  absl::Status HaversinePoints(const Array& lat, const Array& lon, std::span<const GeoPoint> refs,
                               double radius, Array& out, OpContext& ctx) override {
    GC_ASSIGN_OR_RETURN(DeviceState* const d,
                        devices_.OperandDevice({{&lat, "lat"}, {&lon, "lon"}, {&out, "out"}}));
    GC_RETURN_IF_ERROR(CheckHaversinePoints(lat, lon, refs, radius, out));
    if (out.size() == 0) return NoWork(ctx);
    // The point values are checked by the kernel as it goes (stored points reach no
    // other check).
    cuda::PointsResult* d_result = nullptr;
    OpSteps steps;
    steps.prepare = [&](const OpEnv& env) {
      return env.scratch->Allocate(sizeof(cuda::PointsResult), reinterpret_cast<void**>(&d_result));
    };
    steps.readback = [&](const OpEnv& env) {
      return cudaMemcpyAsync(env.small, d_result, sizeof(cuda::PointsResult),
                             cudaMemcpyDeviceToHost, env.launch.stream);
    };
    steps.finish = [&](const OpEnv& env) -> absl::Status {
      const auto& r = *static_cast<const cuda::PointsResult*>(env.small);
      if (r.bad_lat == cuda::kNoIndex && r.bad_lon == cuda::kNoIndex) return absl::OkStatus();
      return BadPointError(*d, env, r, lat, lon);
    };
    return RunWithRefs(*d, *copies_, "HaversinePoints", refs, ctx,
                       [&](const cuda::RefPoint* d_refs, const OpEnv& env) {
                         return cuda::LaunchHaversinePoints(out.dtype(), lat.data(), lon.data(),
                                                            lat.size(), d_refs,
                                                            static_cast<int64_t>(refs.size()),
                                                            radius, out.data(), d_result,
                                                            env.launch);
                       },
                       std::move(steps));
  }

  absl::Status Normalize(const Array& in, NormKind norm, Array& out, OpContext& ctx) override {
    GC_ASSIGN_OR_RETURN(DeviceState* const d,
                        devices_.OperandDevice({{&in, "input"}, {&out, "out"}}));
    GC_RETURN_IF_ERROR(CheckNormalizeShape(in.shape(), "input"));
    GC_RETURN_IF_ERROR(CheckDType(out, "out", in.dtype()));
    GC_RETURN_IF_ERROR(CheckShape(out, "out", in.shape()));
    if (static_cast<int>(norm) < 0 || static_cast<int>(norm) > 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("norm kind ", static_cast<int>(norm), " is not one of SUM, L1, L2, MAX_ABS"));
    }
    if (in.size() == 0) return NoWork(ctx);
    const int64_t cols = in.shape().back();
    const int64_t rows = in.size() / cols;
    cuda::NormalizeResult* d_result = nullptr;
    OpSteps steps;
    steps.prepare = [&](const OpEnv& env) {
      return env.scratch->Allocate(sizeof(cuda::NormalizeResult), reinterpret_cast<void**>(&d_result));
    };
    steps.launch = [&](const OpEnv& env) {
      return cuda::LaunchNormalize(in.dtype(), in.data(), out.data(), rows, cols, norm, d_result,
                                   env.launch);
    };
    steps.readback = [&](const OpEnv& env) {
      return cudaMemcpyAsync(env.small, d_result, sizeof(cuda::NormalizeResult),
                             cudaMemcpyDeviceToHost, env.launch.stream);
    };
    steps.finish = [&](const OpEnv& env) -> absl::Status {
      auto* r = static_cast<cuda::NormalizeResult*>(env.small);
      if (r->bad_row == cuda::kNoIndex) return absl::OkStatus();
      const auto read_result = [&]() -> absl::Status {
        GC_DEV_TRY(*d, cudaMemcpyAsync(env.small, d_result, sizeof(cuda::NormalizeResult), cudaMemcpyDeviceToHost, env.launch.stream), "Normalize");
        GC_DEV_TRY(*d, cudaStreamSynchronize(env.launch.stream), "Normalize");
        return absl::OkStatus();
      };
      // Rare path: float64 L2 rows whose squares overflow or underflow, redone scaled.
      GC_DEV_TRY(*d, cuda::LaunchNormalizeRescue(in.dtype(), in.data(), out.data(), rows, cols, norm, r->bad_row, d_result, env.launch), "Normalize");
      if (env.submission != nullptr) env.submission->output_queued = false;  // out rewritten
      GC_RETURN_IF_ERROR(read_result());
      if (r->bad_row == cuda::kNoIndex) return absl::OkStatus();
      // Error path: the norm of that row, for the message.
      GC_DEV_TRY(*d, cuda::LaunchNormalizeBadRowNorm(in.dtype(), in.data(), rows, cols, norm, d_result, env.launch), "Normalize");
      GC_RETURN_IF_ERROR(read_result());
      return BadRowError(static_cast<int64_t>(r->bad_row), norm, r->bad_norm, in.dtype());
    };
    return cuda::RunOp(*d, *copies_, "Normalize", ctx, steps);
  }

  absl::Status LombScargle(const Array& x, const Array& y, const Array* weights, const Array* freqs,
                           const Linspace& grid, const LombScargleOptions& options, Array& out,
                           OpContext& ctx) override {
    std::vector<cuda::Operand> operands = {{&x, "x"}, {&y, "y"}};
    if (weights != nullptr) operands.push_back({weights, "weights"});
    if (freqs != nullptr) operands.push_back({freqs, "freqs"});
    operands.push_back({&out, "out"});
    GC_ASSIGN_OR_RETURN(DeviceState* const d, devices_.OperandDevice(operands));
    return cuda::RunLombScargle(*d, *copies_, fft_plans_, x, y, weights, freqs, grid, options,
                                out, ctx);
  }

 private:
  CudaBackend(std::vector<std::shared_ptr<DeviceState>> devices,
              std::unique_ptr<cuda::HostCopies> copies, int kernels_loaded, absl::Duration warmup_time)
      : devices_(std::move(devices)),
        copies_(std::move(copies)),
        kernels_loaded_(kernels_loaded),
        warmup_time_(warmup_time) {}

  cuda::DeviceSet devices_;
  std::unique_ptr<cuda::HostCopies> copies_;
  // RunFromHost's results' host memory, kept for the next ones; shared with the
  // results, which may outlive the backend.
  std::shared_ptr<HostBlockPool> result_blocks_ = std::make_shared<HostBlockPool>(cuda::kCachedResultBytes);
  cuda::CufftPlans fft_plans_;
  const int kernels_loaded_;
  const absl::Duration warmup_time_;
};

absl::StatusOr<std::unique_ptr<Backend>> CudaBackend::Create(const BackendOptions& options) {
  const absl::Time t0 = absl::Now();
  GC_ASSIGN_OR_RETURN(const std::vector<int> wanted, cuda::ChooseDevices(options.cuda_devices));
  SetSyncMode(wanted, options.cuda_sync);
  GC_ASSIGN_OR_RETURN(std::unique_ptr<cuda::HostCopies> copies,
                      CreateHostCopies(wanted.front(), options.pinned_staging_bytes));
  std::vector<std::string> skipped;
  std::vector<std::shared_ptr<DeviceState>> opened;
  for (int ordinal : wanted) {
    absl::StatusOr<std::shared_ptr<DeviceState>> d =
        cuda::OpenDevice(ordinal, options.pool_release_threshold_bytes);
    if (!d.ok()) {
      skipped.push_back(std::string(d.status().message()));
      continue;
    }
    opened.push_back(*std::move(d));
  }
  std::vector<cuda::KernelEntry> kernels;
  cuda::ListKernels(kernels);
  // Warm each device, so that the first request pays for none of it; one that fails
  // (no kernel image, sticky error) is dropped.
  std::vector<std::shared_ptr<DeviceState>> usable;
  for (const std::shared_ptr<DeviceState>& d : opened) {
    absl::Status s = cuda::WarmKernels(*d, kernels);
    if (s.ok()) s = copies->WarmUp(d, options.pool_prewarm_bytes);
    if (s.ok() && d->healthy.load()) {
      usable.push_back(d);
    } else {
      skipped.push_back(absl::StrCat(d->name, ": warm-up failed: ", s.message()));
    }
  }
  if (usable.empty()) {
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: ", absl::StrJoin(skipped, "; ")));
  }
  for (const std::string& s : skipped) {
    std::fprintf(stderr, "gpucompute: CUDA device skipped: %s\n", s.c_str());
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend(usable, std::move(copies),
                                                       static_cast<int>(kernels.size()), absl::Now() - t0));
  for (const std::shared_ptr<DeviceState>& d : usable) {
    // Not fatal: the operation plans for itself (and reports a real failure) then.
    const absl::Status warm = cuda::WarmFftPlans(*d, backend->fft_plans_);
    if (!warm.ok()) std::fprintf(stderr, "gpucompute: %s: %s\n", d->name.c_str(), std::string(warm.message()).c_str());
  }
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const BackendOptions& options) {
  return CudaBackend::Create(options);
}

}  // namespace gpucompute
