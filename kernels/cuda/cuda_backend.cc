// The CUDA backend (see cuda_backend.h). Host side only: the kernels live in the
// .cu files behind kernels/cuda/launchers.h.
//
// Per device: a stream-ordered memory pool (arrays and scratch), an allocation
// stream, a pool of compute streams (one lent per operation, so concurrent calls
// from many threads run side by side) and a pool of copy streams (separate from
// compute). One pinned staging pool serves every device's host copies.
#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/preconditions.h"
#include "kernels/cuda/launchers.h"
#include "kernels/shape_rules.h"

namespace gpucompute {
namespace {

using cuda::CudaStatus;
using cuda::Event;
using cuda::IsStickyError;
using cuda::StagingPool;
using cuda::StreamPool;

constexpr int kComputeStreams = 8;  // created up front per device; more on demand
constexpr int kCopyStreams = 4;

// ---- per-device state -----------------------------------------------------------------
struct DeviceState {
  int ordinal = 0;
  std::string name;  // "cuda:N"
  std::string description;
  uint64_t memory_bytes = 0;
  int sm_count = 1;
  cudaMemPool_t pool = nullptr;
  cudaStream_t alloc_stream = nullptr;
  std::unique_ptr<StreamPool> compute;
  std::unique_ptr<StreamPool> copy;
  std::atomic<bool> healthy{true};
  std::atomic<uint64_t> in_flight{0};
  mutable std::mutex mu;
  std::string sticky_error;  // why the device is unhealthy

  ~DeviceState() {
    (void)cudaSetDevice(ordinal);
    compute.reset();
    copy.reset();
    if (alloc_stream != nullptr) {
      (void)cudaStreamSynchronize(alloc_stream);
      (void)cudaStreamDestroy(alloc_stream);
    }
    if (pool != nullptr) (void)cudaMemPoolDestroy(pool);
    (void)cudaGetLastError();
  }

  void MarkUnhealthy(cudaError_t e, absl::string_view what) {
    std::lock_guard<std::mutex> lock(mu);
    if (healthy.exchange(false)) {
      sticky_error = absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
      std::fprintf(stderr, "gpucompute: %s marked unhealthy after a sticky CUDA error: %s\n",
                   name.c_str(), sticky_error.c_str());
    }
  }

  absl::Status Unavailable() const {
    std::lock_guard<std::mutex> lock(mu);
    return absl::UnavailableError(absl::StrCat(
        name, " is unhealthy after a sticky CUDA error (", sticky_error,
        "); its work cannot run until the server restarts"));
  }

  // A failed CUDA call: marks the device unhealthy when the error is sticky.
  absl::Status Fail(cudaError_t e, absl::string_view what) {
    if (IsStickyError(e)) MarkUnhealthy(e, what);
    return CudaStatus(e, absl::StrCat(name, " ", what));
  }
};

class InFlight {
 public:
  explicit InFlight(DeviceState& d) : d_(d) { d_.in_flight.fetch_add(1, std::memory_order_relaxed); }
  ~InFlight() { d_.in_flight.fetch_sub(1, std::memory_order_relaxed); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  DeviceState& d_;
};

#define GC_DEV_TRY(dev, expr, what)                     \
  do {                                                  \
    const cudaError_t _gc_e = (expr);                   \
    if (_gc_e != cudaSuccess) return (dev).Fail(_gc_e, what); \
  } while (0)

#define GC_RETURN_IF_ERROR(expr)               \
  do {                                         \
    absl::Status _gc_s = (expr);               \
    if (!_gc_s.ok()) return _gc_s;             \
  } while (0)

// ---- device arrays ----------------------------------------------------------------------
class CudaArray final : public Array {
 public:
  CudaArray(DType dtype, Shape shape, int64_t count, std::shared_ptr<DeviceState> dev, void* ptr)
      : Array(dtype, std::move(shape), count, dev->ordinal), dev_(std::move(dev)), ptr_(ptr) {}
  // Freed in stream order on the device's allocation stream, from whatever thread
  // drops the last reference. Operations are synchronous, so no kernel still uses it.
  ~CudaArray() override {
    if (ptr_ != nullptr) {
      (void)cudaSetDevice(dev_->ordinal);
      (void)cudaFreeAsync(ptr_, dev_->alloc_stream);
      (void)cudaGetLastError();
    }
  }
  void* data() override { return ptr_; }

 private:
  std::shared_ptr<DeviceState> dev_;  // keeps the pool alive while the array lives
  void* ptr_;
};

// ---- operation plumbing -------------------------------------------------------------------
// Scratch device memory of one operation, freed on its stream before the stream is lent again.
class OpScratch {
 public:
  OpScratch(cudaStream_t s, cudaMemPool_t pool) : stream_(s), pool_(pool) {}
  ~OpScratch() {
    for (void* p : ptrs_) (void)cudaFreeAsync(p, stream_);
  }
  cudaError_t Allocate(size_t bytes, void** out) {
    *out = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(out, std::max<size_t>(bytes, 16), pool_, stream_);
    if (e == cudaSuccess) ptrs_.push_back(*out);
    return e;
  }

 private:
  cudaStream_t stream_;
  cudaMemPool_t pool_;
  std::vector<void*> ptrs_;
};

struct OpEnv {
  cuda::LaunchEnv launch;
  void* small = nullptr;  // pinned host bytes of this stream (StreamPool::kSmallPinnedBytes)
  OpScratch* scratch = nullptr;
};

// The steps of one operation on one lent stream.
struct OpSteps {
  std::function<cudaError_t(const OpEnv&)> prepare;   // untimed: scratch, request constants
  std::function<cudaError_t(const OpEnv&)> launch;    // timed with CUDA events
  std::function<cudaError_t(const OpEnv&)> readback;  // small device->pinned copies
  std::function<absl::Status(const OpEnv&)> finish;   // after the stream completed
};

bool IsPinnedHost(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

absl::string_view NormName(NormKind norm) {
  switch (norm) {
    case NormKind::kSum: return "sum";
    case NormKind::kL1: return "L1";
    case NormKind::kL2: return "L2";
    case NormKind::kMaxAbs: return "max-abs";
  }
  return "unknown";
}

// The CPU backend's weights message for a row the device found bad (re-read to the
// host): the first negative weight, else the sum.
template <typename T>
absl::Status WeightsRowError(const T* w, int64_t row, int64_t samples) {
  absl::StatusOr<double> sum = CheckWeightsRow(w, row, samples);
  return sum.ok() ? WeightsSumError(row, *sum) : sum.status();
}

std::vector<cuda::RefPoint> MakeRefs(std::span<const GeoPoint> refs) {
  std::vector<cuda::RefPoint> out(refs.size());
  constexpr double kDegToRad = 0.017453292519943295769236907684886;
  for (size_t i = 0; i < refs.size(); ++i) {
    out[i].lat_deg = refs[i].lat;
    out[i].lon_deg = refs[i].lon;
    out[i].cos_lat = std::cos(refs[i].lat * kDegToRad);
  }
  return out;
}

// ---- the backend ----------------------------------------------------------------------------
class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create(const BackendOptions& options);

  absl::string_view name() const override { return "cuda"; }

  std::vector<DeviceDescription> Devices() const override {
    std::vector<DeviceDescription> out;
    for (const auto& d : devices_) {
      out.push_back(DeviceDescription{d->name, d->description, d->memory_bytes, d->healthy.load()});
    }
    return out;
  }

  bool Healthy() const override {
    for (const auto& d : devices_) {
      if (d->healthy.load()) return true;
    }
    return false;
  }

  int PickDevice() override {
    const size_t n = devices_.size();
    const size_t start = round_robin_.fetch_add(1, std::memory_order_relaxed) % n;
    int best = -1;
    uint64_t best_load = std::numeric_limits<uint64_t>::max();
    for (size_t k = 0; k < n; ++k) {
      const DeviceState& d = *devices_[(start + k) % n];
      if (!d.healthy.load()) continue;
      const uint64_t load = d.in_flight.load(std::memory_order_relaxed);
      if (load < best_load) {
        best_load = load;
        best = d.ordinal;
      }
    }
    // With no healthy device left, requests go to the first one and fail UNAVAILABLE.
    return best >= 0 ? best : devices_.front()->ordinal;
  }

  BackendStats Stats() const override {
    BackendStats stats;
    for (const auto& d : devices_) {
      DeviceMemoryStats m;
      m.device = d->name;
      uint64_t v = 0;
      if (cudaMemPoolGetAttribute(d->pool, cudaMemPoolAttrReservedMemCurrent, &v) == cudaSuccess) {
        m.pool_reserved_bytes = v;
      }
      v = 0;
      if (cudaMemPoolGetAttribute(d->pool, cudaMemPoolAttrUsedMemCurrent, &v) == cudaSuccess) {
        m.pool_used_bytes = v;
      }
      (void)cudaGetLastError();
      m.queued_ops = d->in_flight.load(std::memory_order_relaxed);
      stats.devices.push_back(std::move(m));
    }
    stats.pinned_staging_bytes = staging_->total_bytes();
    stats.kernels_loaded = kernels_loaded_;
    stats.warmup_time = warmup_time_;
    return stats;
  }

  absl::StatusOr<std::shared_ptr<Array>> Allocate(DType dtype, Shape shape, int device) override {
    std::shared_ptr<DeviceState> dev = FindShared(device);
    if (dev == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("device ", device, " does not exist; ",
                                                     DeviceList()));
    }
    if (!dev->healthy.load()) return dev->Unavailable();
    absl::StatusOr<int64_t> count =
        CheckedElementCount(shape, std::numeric_limits<int64_t>::max() / 8, "array");
    if (!count.ok()) return count.status();
    const uint64_t bytes = static_cast<uint64_t>(*count) * ElementSize(dtype);
    if (bytes == 0) return std::make_shared<CudaArray>(dtype, std::move(shape), 0, dev, nullptr);
    const auto no_room = [&](absl::string_view why) {
      return absl::ResourceExhaustedError(absl::StrCat(
          dev->name, " has no room for ", bytes, " bytes (", DTypeName(dtype), " array of shape ",
          ShapeToString(shape), "): ", why));
    };
    if (bytes > dev->memory_bytes) return no_room("larger than the device's memory");
    GC_DEV_TRY(*dev, cudaSetDevice(dev->ordinal), "cudaSetDevice");
    void* ptr = nullptr;
    const cudaError_t e = cudaMallocFromPoolAsync(&ptr, bytes, dev->pool, dev->alloc_stream);
    if (e == cudaErrorMemoryAllocation || e == cudaErrorInvalidValue) {
      (void)cudaGetLastError();
      return no_room(cudaGetErrorString(e));
    }
    GC_DEV_TRY(*dev, e, "cudaMallocFromPoolAsync");
    // Usable from any stream once the allocation stream has passed it.
    const cudaError_t s = cudaStreamSynchronize(dev->alloc_stream);
    if (s != cudaSuccess) {
      (void)cudaFreeAsync(ptr, dev->alloc_stream);
      return dev->Fail(s, "allocation stream");
    }
    return std::make_shared<CudaArray>(dtype, std::move(shape), *count, dev, ptr);
  }

  absl::Status CopyToArray(const void* host_src, size_t offset, size_t bytes, Array& dst) override {
    return HostCopy(dst, offset, bytes, host_src, "copy to device", [&](cudaStream_t stream) {
      return HostToDevice(static_cast<char*>(dst.data()) + offset, host_src, bytes, stream);
    });
  }

  absl::Status CopyArray(const Array& src, Array& dst) override {
    if (src.bytes() != dst.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("copy of a ", src.bytes(), "-byte array into a ",
                                                     dst.bytes(), "-byte array"));
    }
    absl::StatusOr<DeviceState*> from = OperandDevice({{&src, "source"}});
    if (!from.ok()) return from.status();
    absl::StatusOr<DeviceState*> to = OperandDevice({{&dst, "destination"}});
    if (!to.ok()) return to.status();
    if (src.bytes() == 0) return absl::OkStatus();
    DeviceState& d = **to;
    InFlight in_flight(d);
    GC_DEV_TRY(d, cudaSetDevice(d.ordinal), "cudaSetDevice");
    // Synchronous; goes peer to peer where the GPUs allow it, else through the host.
    const cudaError_t e = cudaMemcpyPeer(dst.data(), (*to)->ordinal, src.data(), (*from)->ordinal,
                                         src.bytes());
    if (e != cudaSuccess) return d.Fail(e, "copy between devices");
    return absl::OkStatus();
  }

  absl::Status CopyFromArray(const Array& src, size_t offset, size_t bytes, void* host_dst) override {
    return HostCopy(src, offset, bytes, host_dst, "copy from device", [&](cudaStream_t stream) {
      return DeviceToHost(host_dst, static_cast<const char*>(src.data()) + offset, bytes, stream);
    });
  }

  absl::Status DiscountProduct(const Array& factors, const Array& values, Array& out,
                               OpContext& ctx) override {
    absl::StatusOr<DeviceState*> dev = OperandDevice({{&factors, "factors"}, {&values, "values"}, {&out, "out"}});
    if (!dev.ok()) return dev.status();
    GC_RETURN_IF_ERROR(CheckDType(values, "values", factors.dtype()));
    GC_RETURN_IF_ERROR(CheckDType(out, "out", factors.dtype()));
    absl::StatusOr<Shape> shape = BroadcastShapes(factors.shape(), values.shape(), "factors", "values");
    if (!shape.ok()) return shape.status();
    GC_RETURN_IF_ERROR(CheckShape(out, "out", *shape));
    if (out.size() == 0) return NoWork(ctx);
    cuda::BroadcastArgs args;
    args.rank = static_cast<int>(shape->size());
    const std::vector<int64_t> sa = BroadcastStrides(factors.shape(), *shape);
    const std::vector<int64_t> sb = BroadcastStrides(values.shape(), *shape);
    for (int d = 0; d < args.rank; ++d) {
      args.shape[d] = (*shape)[d];
      args.stride_a[d] = sa[d];
      args.stride_b[d] = sb[d];
    }
    OpSteps steps;
    steps.launch = [&](const OpEnv& env) {
      return cuda::LaunchDiscountProduct(factors.dtype(), factors.data(), values.data(), out.data(),
                                         args, env.launch);
    };
    return RunOp(**dev, "DiscountProduct", ctx, steps);
  }

  absl::Status HaversineMesh(const LatLonMesh& mesh, std::span<const GeoPoint> refs, double radius,
                             Array& out, OpContext& ctx) override {
    absl::StatusOr<DeviceState*> dev = OperandDevice({{&out, "out"}});
    if (!dev.ok()) return dev.status();
    GC_RETURN_IF_ERROR(CheckRadius(radius));
    if (mesh.lat.count < 0 || mesh.lon.count < 0) {
      return absl::InvalidArgumentError(absl::StrCat("mesh has ", mesh.lat.count, " latitudes and ",
                                                     mesh.lon.count, " longitudes; counts must be >= 0"));
    }
    const Shape expected = {static_cast<int64_t>(refs.size()), mesh.lat.count, mesh.lon.count};
    GC_RETURN_IF_ERROR(CheckShape(out, "out", expected));
    if (out.size() == 0) return NoWork(ctx);
    const std::vector<cuda::RefPoint> host_refs = MakeRefs(refs);
    cuda::RefPoint* d_refs = nullptr;
    OpSteps steps;
    steps.prepare = [&](const OpEnv& env) { return StageRefs(host_refs, &d_refs, env); };
    steps.launch = [&](const OpEnv& env) {
      return cuda::LaunchHaversineMesh(
          out.dtype(), cuda::MeshAxis{mesh.lat.start, mesh.lat.stop, mesh.lat.count},
          cuda::MeshAxis{mesh.lon.start, mesh.lon.stop, mesh.lon.count}, d_refs,
          static_cast<int64_t>(refs.size()), radius, out.data(), env.launch);
    };
    return RunOp(**dev, "HaversineMesh", ctx, steps);
  }

  absl::Status HaversinePoints(const Array& lat, const Array& lon, std::span<const GeoPoint> refs,
                               double radius, Array& out, OpContext& ctx) override {
    absl::StatusOr<DeviceState*> dev = OperandDevice({{&lat, "lat"}, {&lon, "lon"}, {&out, "out"}});
    if (!dev.ok()) return dev.status();
    GC_RETURN_IF_ERROR(CheckRadius(radius));
    GC_RETURN_IF_ERROR(CheckDType(lat, "lat", out.dtype()));
    GC_RETURN_IF_ERROR(CheckDType(lon, "lon", out.dtype()));
    GC_RETURN_IF_ERROR(CheckShape(lon, "lon", lat.shape()));
    Shape expected = {static_cast<int64_t>(refs.size())};
    expected.insert(expected.end(), lat.shape().begin(), lat.shape().end());
    GC_RETURN_IF_ERROR(CheckShape(out, "out", expected));
    if (out.size() == 0) return NoWork(ctx);
    const std::vector<cuda::RefPoint> host_refs = MakeRefs(refs);
    cuda::RefPoint* d_refs = nullptr;
    OpSteps steps;
    steps.prepare = [&](const OpEnv& env) { return StageRefs(host_refs, &d_refs, env); };
    steps.launch = [&](const OpEnv& env) {
      return cuda::LaunchHaversinePoints(out.dtype(), lat.data(), lon.data(), lat.size(), d_refs,
                                         static_cast<int64_t>(refs.size()), radius, out.data(),
                                         env.launch);
    };
    return RunOp(**dev, "HaversinePoints", ctx, steps);
  }

  absl::Status Normalize(const Array& in, NormKind norm, Array& out, OpContext& ctx) override {
    absl::StatusOr<DeviceState*> dev = OperandDevice({{&in, "input"}, {&out, "out"}});
    if (!dev.ok()) return dev.status();
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
    const auto code = static_cast<cuda::NormCode>(static_cast<int>(norm));
    DeviceState& d = **dev;
    cuda::NormalizeResult* d_result = nullptr;
    OpSteps steps;
    steps.prepare = [&](const OpEnv& env) {
      return env.scratch->Allocate(sizeof(cuda::NormalizeResult), reinterpret_cast<void**>(&d_result));
    };
    steps.launch = [&](const OpEnv& env) {
      return cuda::LaunchNormalize(in.dtype(), in.data(), out.data(), rows, cols, code, d_result,
                                   env.launch);
    };
    steps.readback = [&](const OpEnv& env) {
      return cudaMemcpyAsync(env.small, d_result, sizeof(cuda::NormalizeResult),
                             cudaMemcpyDeviceToHost, env.launch.stream);
    };
    steps.finish = [&](const OpEnv& env) -> absl::Status {
      auto* r = static_cast<cuda::NormalizeResult*>(env.small);
      if (r->bad_row == cuda::kNoIndex) return absl::OkStatus();
      // Error path: the norm of that row, for the message.
      GC_DEV_TRY(d, cuda::LaunchNormalizeBadRowNorm(in.dtype(), in.data(), rows, cols, code, d_result, env.launch), "Normalize");
      GC_DEV_TRY(d, cudaMemcpyAsync(env.small, d_result, sizeof(cuda::NormalizeResult), cudaMemcpyDeviceToHost, env.launch.stream), "Normalize");
      GC_DEV_TRY(d, cudaStreamSynchronize(env.launch.stream), "Normalize");
      return absl::InvalidArgumentError(absl::StrCat("input row ", r->bad_row, " has ", NormName(norm),
                                                     " norm ", r->bad_norm,
                                                     "; rows must have a finite, non-zero norm"));
    };
    return RunOp(d, "Normalize", ctx, steps);
  }

  absl::Status LombScargle(const Array& x, const Array& y, const Array* weights, const Array* freqs,
                           const Linspace& grid, const LombScargleOptions& options, Array& out,
                           OpContext& ctx) override {
    std::vector<std::pair<const Array*, absl::string_view>> operands = {{&x, "x"}, {&y, "y"}};
    if (weights != nullptr) operands.push_back({weights, "weights"});
    if (freqs != nullptr) operands.push_back({freqs, "freqs"});
    operands.push_back({&out, "out"});
    absl::StatusOr<DeviceState*> dev = OperandDevice(operands);
    if (!dev.ok()) return dev.status();
    absl::StatusOr<LombScargleShape> shape =
        CheckLombScargleArrays(x, y, weights, freqs, grid, out);
    if (!shape.ok()) return shape.status();
    const DType dtype = y.dtype();
    DeviceState& d = **dev;
    cuda::LombScargleArgs args;
    args.batch = shape->batch;
    args.samples = shape->samples;
    args.frequencies = shape->frequencies;
    args.x = x.data();
    args.x_batched = shape->x_batched;
    args.y = y.data();
    args.weights = weights != nullptr ? weights->data() : nullptr;
    args.weights_batched = shape->weights_batched;
    args.freqs = freqs != nullptr ? freqs->data() : nullptr;
    args.grid_start = grid.start;
    args.grid_stop = grid.stop;
    args.precenter = options.precenter;
    args.normalize = options.normalize;
    args.floating_mean = options.floating_mean;
    args.out = out.data();
    cuda::LombScargleResult* d_result = nullptr;
    OpSteps steps;
    steps.prepare = [&](const OpEnv& env) {
      return env.scratch->Allocate(sizeof(cuda::LombScargleResult), reinterpret_cast<void**>(&d_result));
    };
    steps.launch = [&](const OpEnv& env) {
      return cuda::LaunchLombScargle(dtype, args, d_result, env.launch);
    };
    steps.readback = [&](const OpEnv& env) {
      return cudaMemcpyAsync(env.small, d_result, sizeof(cuda::LombScargleResult),
                             cudaMemcpyDeviceToHost, env.launch.stream);
    };
    steps.finish = [&](const OpEnv& env) -> absl::Status {
      const auto* r = static_cast<const cuda::LombScargleResult*>(env.small);
      if (r->bad_batch == cuda::kNoIndex) return absl::OkStatus();
      // Error path: read the offending weights row back for the CPU backend's message.
      const int64_t row = shape->weights_batched ? static_cast<int64_t>(r->bad_batch) : 0;
      const size_t es = ElementSize(dtype);
      std::vector<char> host(static_cast<size_t>(shape->samples) * es);
      GC_DEV_TRY(d, DeviceToHost(host.data(), static_cast<const char*>(weights->data()) + row * shape->samples * es,
                                 host.size(), env.launch.stream), "LombScargle weights");
      if (dtype == DType::kFloat32) {
        return WeightsRowError(reinterpret_cast<const float*>(host.data()), row, shape->samples);
      }
      return WeightsRowError(reinterpret_cast<const double*>(host.data()), row, shape->samples);
    };
    return RunOp(d, "LombScargle", ctx, steps);
  }

 private:
  CudaBackend() = default;

  absl::Status InitDevice(int ordinal, const BackendOptions& options, std::shared_ptr<DeviceState>* out);
  absl::Status Warm(DeviceState& d, const std::vector<cuda::KernelEntry>& kernels);

  DeviceState* Find(int ordinal) const {
    for (const auto& d : devices_) {
      if (d->ordinal == ordinal) return d.get();
    }
    return nullptr;
  }
  std::shared_ptr<DeviceState> FindShared(int ordinal) const {
    for (const auto& d : devices_) {
      if (d->ordinal == ordinal) return d;
    }
    return nullptr;
  }
  std::string DeviceList() const {
    std::vector<std::string> names;
    for (const auto& d : devices_) names.push_back(d->name);
    return absl::StrCat("this CUDA backend uses ", absl::StrJoin(names, ", "));
  }

  // The one device all operands live on; FAILED_PRECONDITION naming them otherwise.
  absl::StatusOr<DeviceState*> OperandDevice(
      const std::vector<std::pair<const Array*, absl::string_view>>& operands) const {
    const auto& [first, first_name] = operands.front();
    for (const auto& [array, name] : operands) {
      if (array->device() < 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            name, " lives in host memory; the CUDA backend needs arrays it allocated on a GPU"));
      }
      if (array->device() != first->device()) {
        return absl::FailedPreconditionError(absl::StrCat(
            first_name, " is on cuda:", first->device(), " but ", name, " is on cuda:",
            array->device(), "; the operands of one operation must be on one device"));
      }
    }
    DeviceState* d = Find(first->device());
    if (d == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(first_name, " is on cuda:", first->device(),
                                                        ", which ", DeviceList()));
    }
    if (!d->healthy.load()) return d->Unavailable();
    return d;
  }

  // A host <-> array copy of `bytes` at byte `offset`: checked, then `copy(stream)` on
  // one of the array's device copy streams.
  template <typename Copy>
  absl::Status HostCopy(const Array& array, size_t offset, size_t bytes, const void* host,
                        absl::string_view what, Copy copy) {
    if (offset > array.bytes() || bytes > array.bytes() - offset) {
      return absl::OutOfRangeError(absl::StrCat("copy of ", bytes, " bytes at offset ", offset,
                                                " runs past the array's ", array.bytes(), " bytes"));
    }
    if (host == nullptr && bytes > 0) {
      return absl::InvalidArgumentError(absl::StrCat("copy of ", bytes, " bytes has a null host pointer"));
    }
    absl::StatusOr<DeviceState*> dev = OperandDevice({{&array, "array"}});
    if (!dev.ok()) return dev.status();
    if (bytes == 0) return absl::OkStatus();
    DeviceState& d = **dev;
    InFlight in_flight(d);
    GC_DEV_TRY(d, cudaSetDevice(d.ordinal), "cudaSetDevice");
    absl::StatusOr<StreamPool::Lease> lease = d.copy->Acquire();
    if (!lease.ok()) return lease.status();
    const cudaError_t e = copy(lease->stream());
    if (e != cudaSuccess) return d.Fail(e, what);
    return absl::OkStatus();
  }

  static absl::Status NoWork(OpContext& ctx) {
    if (ctx.IsCancelled()) return absl::CancelledError("operation cancelled before it was launched");
    ctx.compute_time = absl::ZeroDuration();
    return absl::OkStatus();
  }

  // Host -> device through the pinned staging pool: chunks alternate between two
  // pinned slots; the CPU fills one while the DMA engine drains the other. Host
  // memory that is already pinned is copied directly. Synchronous.
  cudaError_t HostToDevice(void* dst, const void* src, size_t bytes, cudaStream_t s) {
    if (IsPinnedHost(src)) {
      const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s);
      const cudaError_t w = cudaStreamSynchronize(s);
      return e != cudaSuccess ? e : w;
    }
    std::unique_ptr<StagingPool::Pair> pair = staging_->AcquirePair();
    const size_t chunk = staging_->slot_bytes();
    cudaEvent_t ev[2] = {nullptr, nullptr};
    cudaError_t e = cudaEventCreateWithFlags(&ev[0], cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ev[1], cudaEventDisableTiming);
    for (size_t off = 0, c = 0; e == cudaSuccess && off < bytes; off += chunk, ++c) {
      const size_t n = std::min(chunk, bytes - off);
      if (c >= 2) e = cudaEventSynchronize(ev[c & 1]);  // slot drained by the DMA engine
      if (e != cudaSuccess) break;
      std::memcpy(pair->slot(static_cast<int>(c)), static_cast<const char*>(src) + off, n);
      e = cudaMemcpyAsync(static_cast<char*>(dst) + off, pair->slot(static_cast<int>(c)), n,
                          cudaMemcpyHostToDevice, s);
      if (e == cudaSuccess) e = cudaEventRecord(ev[c & 1], s);
    }
    const cudaError_t w = cudaStreamSynchronize(s);  // before the slots go back to the pool
    for (cudaEvent_t x : ev) {
      if (x != nullptr) (void)cudaEventDestroy(x);
    }
    return e != cudaSuccess ? e : w;
  }

  // Device -> host, the mirror image: chunk c+1 is in flight while chunk c is copied out.
  cudaError_t DeviceToHost(void* dst, const void* src, size_t bytes, cudaStream_t s) {
    if (IsPinnedHost(dst)) {
      const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s);
      const cudaError_t w = cudaStreamSynchronize(s);
      return e != cudaSuccess ? e : w;
    }
    std::unique_ptr<StagingPool::Pair> pair = staging_->AcquirePair();
    const size_t chunk = staging_->slot_bytes();
    const size_t chunks = (bytes + chunk - 1) / chunk;
    cudaEvent_t ev[2] = {nullptr, nullptr};
    cudaError_t e = cudaEventCreateWithFlags(&ev[0], cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ev[1], cudaEventDisableTiming);
    const auto issue = [&](size_t c) {
      const size_t off = c * chunk;
      const size_t n = std::min(chunk, bytes - off);
      cudaError_t r = cudaMemcpyAsync(pair->slot(static_cast<int>(c)), static_cast<const char*>(src) + off,
                                      n, cudaMemcpyDeviceToHost, s);
      if (r == cudaSuccess) r = cudaEventRecord(ev[c & 1], s);
      return r;
    };
    if (e == cudaSuccess) e = issue(0);
    for (size_t c = 0; e == cudaSuccess && c < chunks; ++c) {
      if (c + 1 < chunks) e = issue(c + 1);  // its slot was emptied in iteration c - 1
      if (e == cudaSuccess) e = cudaEventSynchronize(ev[c & 1]);
      if (e != cudaSuccess) break;
      const size_t off = c * chunk;
      std::memcpy(static_cast<char*>(dst) + off, pair->slot(static_cast<int>(c)), std::min(chunk, bytes - off));
    }
    const cudaError_t w = cudaStreamSynchronize(s);
    for (cudaEvent_t x : ev) {
      if (x != nullptr) (void)cudaEventDestroy(x);
    }
    return e != cudaSuccess ? e : w;
  }

  // Reference points to device scratch: through the stream's own pinned bytes when
  // they fit, else through the staging pool.
  cudaError_t StageRefs(const std::vector<cuda::RefPoint>& refs, cuda::RefPoint** d_refs, const OpEnv& env) {
    const size_t bytes = refs.size() * sizeof(cuda::RefPoint);
    cudaError_t e = env.scratch->Allocate(bytes, reinterpret_cast<void**>(d_refs));
    if (e != cudaSuccess) return e;
    if (bytes <= StreamPool::kSmallPinnedBytes) {
      std::memcpy(env.small, refs.data(), bytes);
      return cudaMemcpyAsync(*d_refs, env.small, bytes, cudaMemcpyHostToDevice, env.launch.stream);
    }
    return HostToDevice(*d_refs, refs.data(), bytes, env.launch.stream);
  }

  absl::Status RunOp(DeviceState& d, absl::string_view op, OpContext& ctx, const OpSteps& steps) {
    if (ctx.IsCancelled()) {
      return absl::CancelledError(absl::StrCat(op, " was cancelled before it was launched"));
    }
    if (!d.healthy.load()) return d.Unavailable();
    InFlight in_flight(d);
    GC_DEV_TRY(d, cudaSetDevice(d.ordinal), "cudaSetDevice");
    absl::StatusOr<StreamPool::Lease> lease = d.compute->Acquire();
    if (!lease.ok()) return lease.status();
    absl::StatusOr<Event> start = Event::Create(cudaEventDefault);
    if (!start.ok()) return start.status();
    absl::StatusOr<Event> stop = Event::Create(cudaEventDefault);
    if (!stop.ok()) return stop.status();
    const cudaStream_t stream = lease->stream();
    absl::Status status;
    {
      OpScratch scratch(stream, d.pool);
      OpEnv env{cuda::LaunchEnv{stream, d.pool, d.sm_count}, lease->small(), &scratch};
      status = [&]() -> absl::Status {
        if (steps.prepare) GC_DEV_TRY(d, steps.prepare(env), absl::StrCat(op, " (staging)"));
        if (ctx.IsCancelled()) {
          return absl::CancelledError(absl::StrCat(op, " was cancelled before it was launched"));
        }
        GC_DEV_TRY(d, cudaEventRecord(start->get(), stream), "cudaEventRecord");
        GC_DEV_TRY(d, steps.launch(env), op);
        GC_DEV_TRY(d, cudaEventRecord(stop->get(), stream), "cudaEventRecord");
        if (steps.readback) GC_DEV_TRY(d, steps.readback(env), op);
        GC_DEV_TRY(d, cudaStreamSynchronize(stream), op);
        float ms = 0;
        GC_DEV_TRY(d, cudaEventElapsedTime(&ms, start->get(), stop->get()), "cudaEventElapsedTime");
        ctx.compute_time = absl::Nanoseconds(static_cast<int64_t>(static_cast<double>(ms) * 1e6));
        if (steps.finish) return steps.finish(env);
        return absl::OkStatus();
      }();
    }  // scratch freed in stream order
    // Leave nothing running on the stream before it is lent again.
    const cudaError_t drained = cudaStreamSynchronize(stream);
    if (drained != cudaSuccess) {
      (void)cudaGetLastError();
      if (IsStickyError(drained)) {
        d.MarkUnhealthy(drained, op);
        lease->Discard();
      }
      if (status.ok()) status = CudaStatus(drained, absl::StrCat(d.name, " ", op));
    }
    return status;
  }

  std::vector<std::shared_ptr<DeviceState>> devices_;
  std::unique_ptr<StagingPool> staging_;
  int kernels_loaded_ = 0;
  absl::Duration warmup_time_;
  uint64_t prewarm_bytes_ = 0;
  std::atomic<uint64_t> round_robin_{0};
};

absl::Status CudaBackend::InitDevice(int ordinal, const BackendOptions& options,
                                     std::shared_ptr<DeviceState>* out) {
  auto d = std::make_shared<DeviceState>();
  d->ordinal = ordinal;
  d->name = absl::StrCat("cuda:", ordinal);
  cudaDeviceProp prop{};
  GC_DEV_TRY(*d, cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  if (prop.major < 8) {
    return absl::FailedPreconditionError(absl::StrCat(
        d->name, " (", prop.name, ") has compute capability ", prop.major, ".", prop.minor,
        "; this build carries machine code for 8.0 and newer only"));
  }
  d->sm_count = prop.multiProcessorCount;
  d->memory_bytes = prop.totalGlobalMem;
  d->description = absl::StrCat(prop.name, " (compute capability ", prop.major, ".", prop.minor,
                                ", ", prop.multiProcessorCount, " SMs, ",
                                prop.totalGlobalMem >> 20, " MiB)");
  GC_DEV_TRY(*d, cudaSetDevice(ordinal), "cudaSetDevice");
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal;
  GC_DEV_TRY(*d, cudaMemPoolCreate(&d->pool, &props), "cudaMemPoolCreate");
  // Freed memory stays cached in the pool (warm) up to the threshold.
  uint64_t threshold = options.pool_release_threshold_bytes == 0
                           ? std::numeric_limits<uint64_t>::max()
                           : options.pool_release_threshold_bytes;
  GC_DEV_TRY(*d, cudaMemPoolSetAttribute(d->pool, cudaMemPoolAttrReleaseThreshold, &threshold),
             "cudaMemPoolSetAttribute");
  GC_DEV_TRY(*d, cudaStreamCreateWithFlags(&d->alloc_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  d->compute = std::make_unique<StreamPool>(ordinal);
  d->copy = std::make_unique<StreamPool>(ordinal);
  GC_RETURN_IF_ERROR(d->compute->Reserve(kComputeStreams));
  GC_RETURN_IF_ERROR(d->copy->Reserve(kCopyStreams));
  *out = std::move(d);
  return absl::OkStatus();
}

// Loads every kernel, runs each once on tiny inputs, and does one small round trip
// through the staging copies, so that the first request pays none of it.
absl::Status CudaBackend::Warm(DeviceState& d, const std::vector<cuda::KernelEntry>& kernels) {
  GC_DEV_TRY(d, cudaSetDevice(d.ordinal), "cudaSetDevice");
  for (const cuda::KernelEntry& k : kernels) {
    cudaFuncAttributes attr{};
    GC_DEV_TRY(d, cudaFuncGetAttributes(&attr, k.func), absl::StrCat("loading kernel ", k.name));
  }
  {
    absl::StatusOr<StreamPool::Lease> lease = d.compute->Acquire();
    if (!lease.ok()) return lease.status();
    GC_DEV_TRY(d, cuda::WarmupKernels(cuda::LaunchEnv{lease->stream(), d.pool, d.sm_count}), "warm-up");
    GC_DEV_TRY(d, cudaStreamSynchronize(lease->stream()), "warm-up");
  }
  // A staging-chunk-sized round trip warms every copy path; the pre-warm array
  // leaves its memory cached in the pool when it is dropped.
  const int64_t prewarm_bytes = static_cast<int64_t>(
      std::min<uint64_t>(prewarm_bytes_, d.memory_bytes / 4));
  const int64_t elements = std::max<int64_t>(prewarm_bytes / 8, 1 << 20);
  absl::StatusOr<std::shared_ptr<Array>> a = Allocate(DType::kFloat64, {elements}, d.ordinal);
  if (!a.ok()) return a.status();
  std::vector<double> host(1 << 20, 1.5);
  GC_RETURN_IF_ERROR(CopyToArray(host.data(), 0, host.size() * sizeof(double), **a));
  GC_RETURN_IF_ERROR(CopyFromArray(**a, 0, host.size() * sizeof(double), host.data()));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> CudaBackend::Create(const BackendOptions& options) {
  const absl::Time t0 = absl::Now();
  int count = 0;
  const cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: cudaGetDeviceCount: ",
                                               cudaGetErrorString(ce)));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device is visible");
  std::vector<int> wanted = options.cuda_devices;
  if (wanted.empty()) {
    for (int i = 0; i < count; ++i) wanted.push_back(i);
  }
  for (size_t i = 0; i < wanted.size(); ++i) {
    if (wanted[i] < 0 || wanted[i] >= count) {
      return absl::InvalidArgumentError(absl::StrCat("CUDA device ", wanted[i], " does not exist; ",
                                                     count, " are visible (0..", count - 1, ")"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (wanted[j] == wanted[i]) {
        return absl::InvalidArgumentError(absl::StrCat("CUDA device ", wanted[i], " is listed twice"));
      }
    }
  }
  auto backend = std::unique_ptr<CudaBackend>(new CudaBackend);
  backend->prewarm_bytes_ = options.pool_prewarm_bytes;
  if (cudaError_t e = cudaSetDevice(wanted.front()); e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: ",
                                               CudaStatus(e, "cudaSetDevice").message()));
  }
  absl::StatusOr<std::unique_ptr<StagingPool>> staging =
      StagingPool::Create(std::max<uint64_t>(options.pinned_staging_bytes, 128 << 10));
  if (!staging.ok()) {
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: pinned staging pool: ",
                                               staging.status().message()));
  }
  backend->staging_ = *std::move(staging);

  std::vector<std::string> skipped;
  for (int ordinal : wanted) {
    std::shared_ptr<DeviceState> d;
    if (absl::Status s = backend->InitDevice(ordinal, options, &d); !s.ok()) {
      skipped.push_back(std::string(s.message()));
      continue;
    }
    backend->devices_.push_back(std::move(d));
  }
  std::vector<cuda::KernelEntry> kernels;
  cuda::ListKernels(kernels);
  // Warm each device; one that fails (no kernel image, sticky error) is dropped.
  std::vector<std::shared_ptr<DeviceState>> usable;
  for (auto& d : backend->devices_) {
    absl::Status s = backend->Warm(*d, kernels);
    if (s.ok() && d->healthy.load()) {
      usable.push_back(d);
    } else {
      skipped.push_back(absl::StrCat(d->name, ": warm-up failed: ", s.message()));
    }
  }
  backend->devices_ = std::move(usable);
  if (backend->devices_.empty()) {
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: ", absl::StrJoin(skipped, "; ")));
  }
  for (const std::string& s : skipped) {
    std::fprintf(stderr, "gpucompute: CUDA device skipped: %s\n", s.c_str());
  }
  backend->kernels_loaded_ = static_cast<int>(kernels.size());
  backend->warmup_time_ = absl::Now() - t0;
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const BackendOptions& options) {
  return CudaBackend::Create(options);
}

}  // namespace gpucompute
