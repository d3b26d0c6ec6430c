#include "kernels/testing/fault_injection.h"

#include <utility>

#include "common/status_macros.h"

namespace gpucompute {

void InjectedFaults::PauseOperations() {
  absl::MutexLock lock(&mu_);
  paused_ = true;
}

void InjectedFaults::ResumeOperations() {
  absl::MutexLock lock(&mu_);
  paused_ = false;
}

int InjectedFaults::PausedOperations() const {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

void InjectedFaults::WaitWhilePaused() {
  absl::MutexLock lock(&mu_);
  ++waiting_;
  mu_.Await(absl::Condition(
      +[](bool* paused) { return !*paused; }, &paused_));
  --waiting_;
}

namespace {

class FaultInjectingBackend final : public Backend {
 public:
  FaultInjectingBackend(std::unique_ptr<Backend> inner, std::shared_ptr<InjectedFaults> faults)
      : inner_(std::move(inner)), faults_(std::move(faults)) {}

  absl::string_view name() const override { return inner_->name(); }
  std::vector<DeviceDescription> Devices() const override {
    std::vector<DeviceDescription> devices = inner_->Devices();
    if (!Healthy()) {
      for (DeviceDescription& d : devices) d.healthy = false;
    }
    return devices;
  }
  bool Healthy() const override { return !faults_->sticky_error.load() && inner_->Healthy(); }
  int PickDevice() override { return inner_->PickDevice(); }
  void PrepareThread() override { inner_->PrepareThread(); }
  uint64_t max_kept_host_bytes() const override { return inner_->max_kept_host_bytes(); }
  bool arrays_on_host() const override { return inner_->arrays_on_host(); }
  BackendStats Stats() const override { return inner_->Stats(); }

  absl::StatusOr<std::shared_ptr<Array>> Allocate(DType dtype, Shape shape, int device) override {
    GC_RETURN_IF_ERROR(Sticky());
    GC_RETURN_IF_ERROR(InjectedAllocation());
    return inner_->Allocate(dtype, std::move(shape), device);
  }
  // Its allocations fail as Allocate's would; the operation comes back through
  // `run`, which calls this backend's (faulty) operations.
  absl::StatusOr<std::shared_ptr<Array>> RunFromHost(std::span<const HostInput> inputs,
                                                     DType out_dtype, const Shape& out_shape,
                                                     int device, OpContext& ctx,
                                                     ArraysRun run) override {
    GC_RETURN_IF_ERROR(Sticky());
    GC_RETURN_IF_ERROR(InjectedAllocation());
    return inner_->RunFromHost(inputs, out_dtype, out_shape, device, ctx, run);
  }
  absl::Status CopyToArray(const void* src, size_t offset, size_t bytes, Array& dst) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner_->CopyToArray(src, offset, bytes, dst);
  }
  absl::Status CopyPiecesToArray(std::span<const HostPiece> pieces, size_t offset,
                                 Array& dst) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner_->CopyPiecesToArray(pieces, offset, dst);
  }
  absl::Status CopyFromArray(const Array& src, size_t offset, size_t bytes, void* dst) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner_->CopyFromArray(src, offset, bytes, dst);
  }
  absl::Status CopyArray(const Array& src, Array& dst) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner_->CopyArray(src, dst);
  }
  absl::StatusOr<std::shared_ptr<void>> PinHostMemory(void* data, size_t bytes) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner_->PinHostMemory(data, bytes);
  }
  absl::StatusOr<IpcMemory> OpenIpcMemory(absl::string_view handle,
                                          absl::string_view pci_bus_id) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner_->OpenIpcMemory(handle, pci_bus_id);
  }
  absl::Status DiscountProduct(const Array& f, const Array& v, Array& out, OpContext& ctx) override {
    GC_RETURN_IF_ERROR(Operation());
    return inner_->DiscountProduct(f, v, out, ctx);
  }
  absl::Status HaversineMesh(const LatLonMesh& mesh, std::span<const GeoPoint> refs, double radius,
                             Array& out, OpContext& ctx) override {
    GC_RETURN_IF_ERROR(Operation());
    return inner_->HaversineMesh(mesh, refs, radius, out, ctx);
  }
  absl::Status HaversinePoints(const Array& lat, const Array& lon, std::span<const GeoPoint> refs,
                               double radius, Array& out, OpContext& ctx) override {
    GC_RETURN_IF_ERROR(Operation());
    return inner_->HaversinePoints(lat, lon, refs, radius, out, ctx);
  }
  absl::Status CheckValues(const Array& array, absl::string_view name,
                           const ValueRule& rule) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner_->CheckValues(array, name, rule);
  }
  absl::Status Normalize(const Array& in, NormKind norm, Array& out, OpContext& ctx) override {
    GC_RETURN_IF_ERROR(Operation());
    return inner_->Normalize(in, norm, out, ctx);
  }
  absl::Status LombScargle(const Array& x, const Array& y, const Array* weights,
                           const Array* freqs, const Linspace& grid,
                           const LombScargleOptions& options, Array& out,
                           OpContext& ctx) override {
    GC_RETURN_IF_ERROR(Operation());
    return inner_->LombScargle(x, y, weights, freqs, grid, options, out, ctx);
  }

 private:
  absl::Status Sticky() const {
    if (faults_->sticky_error.load()) {
      return absl::InternalError("injected: an illegal memory access was encountered (sticky)");
    }
    return absl::OkStatus();
  }

  // RESOURCE_EXHAUSTED while injected allocation failures are left.
  absl::Status InjectedAllocation() {
    if (faults_->failing_allocations.fetch_sub(1) > 0) {
      return absl::ResourceExhaustedError("injected: the device has no room for the array");
    }
    faults_->failing_allocations.store(0);
    return absl::OkStatus();
  }

  // Waits out a pause, counts the operation and turns the error on once the planned
  // count has run.
  absl::Status Operation() {
    faults_->WaitWhilePaused();
    const int64_t after = faults_->sticky_error_after_operations;
    if (after >= 0 && operations_.fetch_add(1) >= after) faults_->sticky_error.store(true);
    return Sticky();
  }

  std::unique_ptr<Backend> inner_;
  std::shared_ptr<InjectedFaults> faults_;
  std::atomic<int64_t> operations_{0};
};

}  // namespace

std::unique_ptr<Backend> WithInjectedFaults(std::unique_ptr<Backend> inner,
                                            std::shared_ptr<InjectedFaults> faults) {
  return std::make_unique<FaultInjectingBackend>(std::move(inner), std::move(faults));
}

}  // namespace gpucompute
