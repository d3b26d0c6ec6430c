#include "kernels/cuda/device.h"

#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/lombscargle_nufft.h"

namespace gpucompute::cuda {
namespace {

constexpr int kComputeStreams = 8;  // created up front per device; more on demand
constexpr int kCopyStreams = 4;
constexpr int kAllocStreams = 4;

class CudaArray final : public Array {
 public:
  CudaArray(DType dtype, Shape shape, int64_t count, std::shared_ptr<DeviceState> dev, void* ptr)
      : Array(dtype, std::move(shape), count, dev->ordinal), dev_(std::move(dev)), ptr_(ptr) {}
  // Freed in stream order on an allocation stream, from whatever thread drops the
  // last reference. Operations are synchronous, so no kernel still uses it.
  ~CudaArray() override {
    if (ptr_ != nullptr) {
      ScopedDevice on_device(dev_->ordinal);
      absl::StatusOr<StreamPool::Lease> lease = dev_->alloc->Acquire();
      if (lease.ok()) (void)cudaFreeAsync(ptr_, lease->stream());
      (void)cudaGetLastError();
    }
  }
  void* data() override { return ptr_; }

 private:
  std::shared_ptr<DeviceState> dev_;  // keeps the pool alive while the array lives
  void* ptr_;
};

}  // namespace

DeviceState::~DeviceState() {
  ScopedDevice on_device(ordinal);
  compute.reset();
  copy.reset();
  if (alloc != nullptr) (void)cudaDeviceSynchronize();  // every free done
  alloc.reset();
  if (pool != nullptr) (void)cudaMemPoolDestroy(pool);
  (void)cudaGetLastError();
}

void DeviceState::MarkUnhealthy(cudaError_t e, absl::string_view what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (healthy.exchange(false)) {
    sticky_error_ = absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
    std::fprintf(stderr, "gpucompute: %s marked unhealthy after a sticky CUDA error: %s\n",
                 name.c_str(), sticky_error_.c_str());
  }
}

absl::Status DeviceState::Unavailable() const {
  std::lock_guard<std::mutex> lock(mu_);
  return absl::UnavailableError(absl::StrCat(name, " is unhealthy after a sticky CUDA error (",
                                             sticky_error_,
                                             "); its work cannot run until the server restarts"));
}

absl::Status DeviceState::Fail(cudaError_t e, absl::string_view what) {
  if (IsStickyError(e)) MarkUnhealthy(e, what);
  return CudaStatus(e, absl::StrCat(name, " ", what));
}

absl::StatusOr<std::vector<int>> ChooseDevices(const std::vector<int>& requested) {
  int count = 0;
  const cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: cudaGetDeviceCount: ",
                                               cudaGetErrorString(ce)));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device is visible");
  std::vector<int> wanted = requested;
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
  return wanted;
}

absl::StatusOr<std::shared_ptr<DeviceState>> OpenDevice(int ordinal,
                                                        uint64_t pool_release_threshold_bytes) {
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
  ScopedDevice on_device(ordinal);
  GC_DEV_TRY(*d, on_device.error(), "cudaSetDevice");
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal;
  GC_DEV_TRY(*d, cudaMemPoolCreate(&d->pool, &props), "cudaMemPoolCreate");
  uint64_t threshold = pool_release_threshold_bytes == 0 ? std::numeric_limits<uint64_t>::max()
                                                         : pool_release_threshold_bytes;
  GC_DEV_TRY(*d, cudaMemPoolSetAttribute(d->pool, cudaMemPoolAttrReleaseThreshold, &threshold),
             "cudaMemPoolSetAttribute");
  d->alloc = std::make_unique<StreamPool>(ordinal);
  d->compute = std::make_unique<StreamPool>(ordinal, kHostIoBytes);
  d->copy = std::make_unique<StreamPool>(ordinal);
  GC_RETURN_IF_ERROR(d->compute->Reserve(kComputeStreams));
  GC_RETURN_IF_ERROR(d->copy->Reserve(kCopyStreams));
  GC_RETURN_IF_ERROR(d->alloc->Reserve(kAllocStreams));
  return d;
}

absl::Status WarmKernels(DeviceState& d, const std::vector<KernelEntry>& kernels) {
  ScopedDevice on_device(d.ordinal);
  GC_DEV_TRY(d, on_device.error(), "cudaSetDevice");
  for (const KernelEntry& k : kernels) {
    cudaFuncAttributes attr{};
    GC_DEV_TRY(d, cudaFuncGetAttributes(&attr, k.func), absl::StrCat("loading kernel ", k.name));
  }
  GC_ASSIGN_OR_RETURN(const StreamPool::Lease lease, d.compute->Acquire());
  GC_DEV_TRY(d, WarmupKernels(LaunchEnv{lease.stream(), d.pool, d.sm_count}), "warm-up");
  GC_DEV_TRY(d, cudaStreamSynchronize(lease.stream()), "warm-up");
  return absl::OkStatus();
}

absl::Status WarmFftPlans(DeviceState& d, CufftPlans& plans) {
  ScopedDevice on_device(d.ordinal);
  GC_DEV_TRY(d, on_device.error(), "cudaSetDevice");
  GC_ASSIGN_OR_RETURN(const StreamPool::Lease lease, d.compute->Acquire());
  for (const int64_t frequencies : kWarmFftFrequencies) {
    const int64_t grid = PlanNufft(frequencies, kDefaultNufftAccuracy).grid;
    GC_RETURN_IF_ERROR(plans.WarmUp({d.ordinal, grid, 3}, lease.stream(), d.pool));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Array>> AllocateArrayOn(const std::shared_ptr<DeviceState>& dev,
                                                       DType dtype, Shape shape,
                                                       cudaStream_t stream) {
  if (!dev->healthy.load()) return dev->Unavailable();
  GC_ASSIGN_OR_RETURN(const int64_t count,
                      CheckedElementCount(shape, std::numeric_limits<int64_t>::max() / 8, "array"));
  const uint64_t bytes = static_cast<uint64_t>(count) * ElementSize(dtype);
  if (bytes == 0) return std::make_shared<CudaArray>(dtype, std::move(shape), 0, dev, nullptr);
  const auto no_room = [&](absl::string_view why) {
    return absl::ResourceExhaustedError(absl::StrCat(
        dev->name, " has no room for ", bytes, " bytes (", DTypeName(dtype), " array of shape ",
        ShapeToString(shape), "): ", why));
  };
  if (bytes > dev->memory_bytes) return no_room("larger than the device's memory");
  ScopedDevice on_device(dev->ordinal);
  GC_DEV_TRY(*dev, on_device.error(), "cudaSetDevice");
  void* ptr = nullptr;
  const cudaError_t e = cudaMallocFromPoolAsync(&ptr, bytes, dev->pool, stream);
  if (e == cudaErrorMemoryAllocation || e == cudaErrorInvalidValue) {
    (void)cudaGetLastError();
    return no_room(cudaGetErrorString(e));
  }
  GC_DEV_TRY(*dev, e, "cudaMallocFromPoolAsync");
  return std::make_shared<CudaArray>(dtype, std::move(shape), count, dev, ptr);
}

absl::StatusOr<std::shared_ptr<Array>> AllocateArray(const std::shared_ptr<DeviceState>& dev,
                                                     DType dtype, Shape shape) {
  if (!dev->healthy.load()) return dev->Unavailable();
  ScopedDevice on_device(dev->ordinal);
  GC_DEV_TRY(*dev, on_device.error(), "cudaSetDevice");
  GC_ASSIGN_OR_RETURN(const StreamPool::Lease lease, dev->alloc->Acquire());
  GC_ASSIGN_OR_RETURN(std::shared_ptr<Array> array,
                      AllocateArrayOn(dev, dtype, std::move(shape), lease.stream()));
  // Usable from any stream once the allocation stream has passed it. On failure
  // the array is dropped: freed in stream order after what the stream holds.
  GC_DEV_TRY(*dev, cudaStreamSynchronize(lease.stream()), "allocation stream");
  return array;
}

absl::Status CopyBetweenDevices(const DeviceState& from, DeviceState& to, const Array& src,
                                Array& dst) {
  InFlight in_flight(to);
  ScopedDevice on_device(to.ordinal);
  GC_DEV_TRY(to, on_device.error(), "cudaSetDevice");
  GC_DEV_TRY(to, cudaMemcpyPeer(dst.data(), to.ordinal, src.data(), from.ordinal, src.bytes()),
             "copy between devices");
  return absl::OkStatus();
}

void DeviceSet::PrepareThread() const {
  for (const auto& d : devices_) {
    ScopedDevice on_device(d->ordinal);
    if (on_device.error() == cudaSuccess) (void)cudaFree(nullptr);  // no-op that binds the context
  }
}

std::vector<DeviceDescription> DeviceSet::Descriptions() const {
  std::vector<DeviceDescription> out;
  for (const auto& d : devices_) {
    out.push_back(DeviceDescription{d->name, d->description, d->memory_bytes, d->healthy.load()});
  }
  return out;
}

bool DeviceSet::AnyHealthy() const {
  for (const auto& d : devices_) {
    if (d->healthy.load()) return true;
  }
  return false;
}

int DeviceSet::Pick() {
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
  return best >= 0 ? best : devices_.front()->ordinal;
}

std::vector<DeviceMemoryStats> DeviceSet::MemoryStats() const {
  std::vector<DeviceMemoryStats> out;
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
    out.push_back(std::move(m));
  }
  return out;
}

std::shared_ptr<DeviceState> DeviceSet::Find(int ordinal) const {
  for (const auto& d : devices_) {
    if (d->ordinal == ordinal) return d;
  }
  return nullptr;
}

std::string DeviceSet::Describe() const {
  std::vector<std::string> names;
  for (const auto& d : devices_) names.push_back(d->name);
  return absl::StrCat("this CUDA backend uses ", absl::StrJoin(names, ", "));
}

absl::StatusOr<DeviceState*> DeviceSet::OperandDevice(const std::vector<Operand>& operands) const {
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
  DeviceState* d = Find(first->device()).get();
  if (d == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(first_name, " is on cuda:", first->device(),
                                                      ", which ", Describe()));
  }
  if (!d->healthy.load()) return d->Unavailable();
  return d;
}

}  // namespace gpucompute::cuda
