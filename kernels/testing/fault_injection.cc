#include "kernels/testing/fault_injection.h"

#include <utility>

#include "absl/strings/str_cat.h"

#include "common/status_macros.h"
#include "kernels/forwarding_backend.h"

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

// Every call checks the sticky error; allocations may fail; operations wait out
// a pause and count towards the planned sticky error.
class FaultInjectingBackend final : public ForwardingBackend {
 public:
  FaultInjectingBackend(std::unique_ptr<Backend> inner, std::shared_ptr<InjectedFaults> faults)
      : ForwardingBackend(std::move(inner)), faults_(std::move(faults)) {}

  std::vector<DeviceDescription> Devices() const override {
    std::vector<DeviceDescription> devices = inner().Devices();
    if (!Healthy()) {
      for (DeviceDescription& d : devices) d.healthy = false;
    }
    return devices;
  }
  bool Healthy() const override { return !faults_->sticky_error.load() && inner().Healthy(); }

  absl::StatusOr<std::shared_ptr<Array>> Allocate(DType dtype, Shape shape, int device) override {
    GC_RETURN_IF_ERROR(Sticky());
    GC_RETURN_IF_ERROR(InjectedAllocation());
    return inner().Allocate(dtype, std::move(shape), device);
  }
  // Its allocations fail as Allocate's would; the operation comes back through
  // `run`, which calls this backend's (faulty) operations.
  absl::StatusOr<std::shared_ptr<Array>> RunFromHost(std::span<const HostInput> inputs,
                                                     DType out_dtype, const Shape& out_shape,
                                                     int device, OpContext& ctx,
                                                     ArraysRun run) override {
    GC_RETURN_IF_ERROR(Sticky());
    GC_RETURN_IF_ERROR(InjectedAllocation());
    return inner().RunFromHost(inputs, out_dtype, out_shape, device, ctx, run);
  }
  absl::Status CopyToArray(const void* src, size_t offset, size_t bytes, Array& dst) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner().CopyToArray(src, offset, bytes, dst);
  }
  absl::Status CopyPiecesToArray(std::span<const HostPiece> pieces, size_t offset,
                                 Array& dst) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner().CopyPiecesToArray(pieces, offset, dst);
  }
  absl::Status CopyFromArray(const Array& src, size_t offset, size_t bytes, void* dst) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner().CopyFromArray(src, offset, bytes, dst);
  }
  absl::Status CopyArray(const Array& src, Array& dst) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner().CopyArray(src, dst);
  }
  absl::Status CheckValues(const Array& array, absl::string_view name,
                           const ValueRule& rule) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner().CheckValues(array, name, rule);
  }
  absl::StatusOr<std::shared_ptr<void>> PinHostMemory(void* data, size_t bytes) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner().PinHostMemory(data, bytes);
  }
  absl::StatusOr<IpcMemory> OpenIpcMemory(absl::string_view handle,
                                          absl::string_view pci_bus_id) override {
    GC_RETURN_IF_ERROR(Sticky());
    return inner().OpenIpcMemory(handle, pci_bus_id);
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
  absl::Status BeforeOperation() override {
    faults_->WaitWhilePaused();
    const int64_t after = faults_->sticky_error_after_operations;
    if (after >= 0 && operations_.fetch_add(1) >= after) faults_->sticky_error.store(true);
    return Sticky();
  }

  std::shared_ptr<InjectedFaults> faults_;
  std::atomic<int64_t> operations_{0};
};

}  // namespace

std::unique_ptr<Backend> WithInjectedFaults(std::unique_ptr<Backend> inner,
                                            std::shared_ptr<InjectedFaults> faults) {
  return std::make_unique<FaultInjectingBackend>(std::move(inner), std::move(faults));
}

BackendSelection WithStickyErrorAfter(BackendSelection selection, int64_t operations) {
  auto faults = std::make_shared<InjectedFaults>();
  faults->sticky_error_after_operations = operations;
  selection.backend = WithInjectedFaults(std::move(selection.backend), std::move(faults));
  selection.note = absl::StrCat(selection.note, "; FAULT INJECTION: sticky device error after ",
                                operations, " operations");
  return selection;
}

}  // namespace gpucompute
