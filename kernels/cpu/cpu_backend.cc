#include "kernels/cpu/cpu_backend.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/memory/host_block_pool.h"
#include "kernels/memory/memory_budget.h"
#include "kernels/preconditions.h"

namespace gpucompute {
namespace {

// Host memory owned by one array; its bytes count as live until it is freed.
// The counter is shared so arrays may outlive the backend.
class HostArray final : public Array {
 public:
  HostArray(DType dtype, Shape shape, int64_t count, HostBlockPool::Block data,
            std::shared_ptr<std::atomic<uint64_t>> live_bytes)
      : Array(dtype, std::move(shape), count, kHostDevice),
        data_(std::move(data)),
        live_bytes_(std::move(live_bytes)) {
    live_bytes_->fetch_add(bytes(), std::memory_order_relaxed);
  }
  ~HostArray() override { live_bytes_->fetch_sub(bytes(), std::memory_order_relaxed); }

  void* data() override { return data_.data(); }

 private:
  HostBlockPool::Block data_;
  std::shared_ptr<std::atomic<uint64_t>> live_bytes_;
};

// Bytes of an array of `shape`; RESOURCE_EXHAUSTED beyond `limit` (checked
// without overflowing), INVALID_ARGUMENT for a malformed shape.
absl::StatusOr<uint64_t> AllocationBytes(DType dtype, const Shape& shape, uint64_t limit) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape has rank ", shape.size(), "; the limit is ", kMaxRank));
  }
  bool empty = false;
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (shape[axis] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape[", axis, "] is ", shape[axis], "; extents must be >= 0"));
    }
    empty = empty || shape[axis] == 0;
  }
  if (empty) return 0;
  uint64_t bytes = ElementSize(dtype);
  for (int64_t extent : shape) {
    const uint64_t factor = static_cast<uint64_t>(extent);
    if (bytes > limit / factor) {
      return absl::ResourceExhaustedError(
          absl::StrCat("array of shape ", ShapeToString(shape), " and dtype ", DTypeName(dtype),
                       " needs more than ", limit, " bytes, the host's physical memory"));
    }
    bytes *= factor;
  }
  return bytes;
}

absl::Status CheckHost(const Array& array, absl::string_view name) {
  if (array.device() != kHostDevice) {
    return absl::InvalidArgumentError(absl::StrCat(name, " lives on device ", array.device(),
                                                   "; the CPU backend needs host arrays"));
  }
  return absl::OkStatus();
}

absl::Status CheckCopyRange(const Array& array, size_t offset, size_t bytes, const void* host) {
  GC_RETURN_IF_ERROR(CheckCopyBounds(array, offset, bytes, host));
  return CheckHost(array, "array");
}

// Counts an operation as running for the Stats() figures while in scope.
class RunningOp {
 public:
  explicit RunningOp(std::atomic<uint64_t>& running) : running_(running) {
    running_.fetch_add(1, std::memory_order_relaxed);
  }
  ~RunningOp() { running_.fetch_sub(1, std::memory_order_relaxed); }
  RunningOp(const RunningOp&) = delete;
  RunningOp& operator=(const RunningOp&) = delete;

 private:
  std::atomic<uint64_t>& running_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads)
      : pool_(threads > 0 ? threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))),
        physical_memory_bytes_(PhysicalMemoryBytes()) {}  // the cap on one allocation

  absl::string_view name() const override { return "cpu"; }
  uint64_t max_kept_host_bytes() const override { return kCpuCachedArrayBytes; }
  bool arrays_on_host() const override { return true; }

  std::vector<DeviceDescription> Devices() const override {
    DeviceDescription device;
    device.name = "cpu";
    device.description = absl::StrCat(pool_.threads(), " threads");
    device.memory_bytes = physical_memory_bytes_;
    return {device};
  }

  bool Healthy() const override { return true; }
  int PickDevice() override { return kHostDevice; }

  BackendStats Stats() const override {
    const uint64_t live = live_bytes_->load(std::memory_order_relaxed);
    BackendStats stats;
    stats.devices.push_back(
        DeviceMemoryStats{.device = "cpu",
                          .pool_reserved_bytes = live + blocks_->cached_bytes(),
                          .pool_used_bytes = live,
                          .queued_ops = running_ops_.load(std::memory_order_relaxed)});
    return stats;
  }

  // Host memory needs no registration: copies to and from it are memcpy.
  absl::StatusOr<std::shared_ptr<void>> PinHostMemory(void*, size_t) override {
    return std::shared_ptr<void>();
  }
  absl::StatusOr<IpcMemory> OpenIpcMemory(absl::string_view, absl::string_view) override {
    return absl::FailedPreconditionError(
        "this server runs the cpu backend, which has no GPU memory: CUDA IPC regions need the "
        "CUDA backend");
  }

  absl::StatusOr<std::shared_ptr<Array>> Allocate(DType dtype, Shape shape, int device) override {
    if (device != kHostDevice && device != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", device, " does not exist; the CPU backend has one device (",
                       kHostDevice, " or 0)"));
    }
    GC_ASSIGN_OR_RETURN(const uint64_t bytes,
                        AllocationBytes(dtype, shape, physical_memory_bytes_));
    HostBlockPool::Block data = blocks_->TakeForArray(bytes);
    if (data.data() == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("could not allocate ", bytes, " bytes of host memory"));
    }
    const int64_t count = static_cast<int64_t>(bytes / ElementSize(dtype));
    return std::make_shared<HostArray>(dtype, std::move(shape), count, std::move(data),
                                       live_bytes_);
  }

  absl::Status CopyToArray(const void* host_src, size_t offset, size_t bytes, Array& dst) override {
    GC_RETURN_IF_ERROR(CheckCopyRange(dst, offset, bytes, host_src));
    if (bytes > 0) std::memcpy(static_cast<std::byte*>(dst.data()) + offset, host_src, bytes);
    return absl::OkStatus();
  }

  absl::Status CopyFromArray(const Array& src, size_t offset, size_t bytes,
                             void* host_dst) override {
    GC_RETURN_IF_ERROR(CheckCopyRange(src, offset, bytes, host_dst));
    if (bytes > 0) std::memcpy(host_dst, static_cast<const std::byte*>(src.data()) + offset, bytes);
    return absl::OkStatus();
  }

  absl::Status CopyArray(const Array& src, Array& dst) override {
    if (src.bytes() != dst.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("copy of a ", src.bytes(), "-byte array into a ",
                                                     dst.bytes(), "-byte array"));
    }
    if (src.bytes() > 0) std::memcpy(dst.data(), src.data(), src.bytes());
    return absl::OkStatus();
  }

  absl::Status DiscountProduct(const Array& factors, const Array& values, Array& out,
                               OpContext& ctx) override {
    return Timed(ctx, {&factors, &values, &out},
                 [&] { return cpu::DiscountProduct(pool_, factors, values, out, ctx); });
  }

  absl::Status HaversineMesh(const LatLonMesh& mesh, std::span<const GeoPoint> refs, double radius,
                             Array& out, OpContext& ctx) override {
    return Timed(ctx, {&out},
                 [&] { return cpu::HaversineMesh(pool_, mesh, refs, radius, out, ctx); });
  }

  absl::Status HaversinePoints(const Array& lat, const Array& lon, std::span<const GeoPoint> refs,
                               double radius, Array& out, OpContext& ctx) override {
    return Timed(ctx, {&lat, &lon, &out},
                 [&] { return cpu::HaversinePoints(pool_, lat, lon, refs, radius, out, ctx); });
  }

  absl::Status CheckValues(const Array& array, absl::string_view name,
                           const ValueRule& rule) override {
    GC_RETURN_IF_ERROR(CheckHost(array, name));
    if (array.dtype() == DType::kFloat32) {
      const float* values = static_cast<const float*>(array.data());
      return CheckElements(array.size(), [values](int64_t i) { return values[i]; }, name, rule);
    }
    const double* values = static_cast<const double*>(array.data());
    return CheckElements(array.size(), [values](int64_t i) { return values[i]; }, name, rule);
  }

  absl::Status Normalize(const Array& in, NormKind norm, Array& out, OpContext& ctx) override {
    return Timed(ctx, {&in, &out}, [&] { return cpu::Normalize(pool_, in, norm, out, ctx); });
  }

  absl::Status LombScargle(const Array& x, const Array& y, const Array* weights, const Array* freqs,
                           const Linspace& grid, const LombScargleOptions& options, Array& out,
                           OpContext& ctx) override {
    return Timed(ctx, {&x, &y, weights, freqs, &out}, [&] {
      return cpu::LombScargle(pool_, x, y, weights, freqs, grid, options, out, ctx);
    });
  }

 private:
  // Checks that every operand (null ones are absent options) is host memory,
  // then runs `op`, counting it as running and measuring its wall time.
  template <typename Op>
  absl::Status Timed(OpContext& ctx, std::initializer_list<const Array*> operands, Op op) {
    for (const Array* operand : operands) {
      if (operand == nullptr) continue;
      GC_RETURN_IF_ERROR(CheckHost(*operand, "operand"));
    }
    RunningOp running(running_ops_);
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = op();
    ctx.compute_time = absl::FromChrono(std::chrono::steady_clock::now() - start);
    return status;
  }

  ThreadPool pool_;
  const uint64_t physical_memory_bytes_;
  std::shared_ptr<std::atomic<uint64_t>> live_bytes_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::shared_ptr<HostBlockPool> blocks_ = std::make_shared<HostBlockPool>(kCpuCachedArrayBytes);
  std::atomic<uint64_t> running_ops_{0};
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace gpucompute
