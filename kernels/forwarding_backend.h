// A backend that wraps another and passes every call on to it: the base of the
// wrappers that change one role (kernels/memory/memory_budget.h charges
// allocations to budgets; kernels/testing/fault_injection.h fails calls), which
// override only what they change. Every operation first asks BeforeOperation,
// so that a wrapper of operations need not list them.
#pragma once

#include <memory>
#include <utility>

#include "kernels/backend.h"

namespace gpucompute {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  // Devices.
  absl::string_view name() const override { return inner_->name(); }
  std::vector<DeviceDescription> Devices() const override { return inner_->Devices(); }
  bool Healthy() const override { return inner_->Healthy(); }
  int PickDevice() override { return inner_->PickDevice(); }
  BackendStats Stats() const override { return inner_->Stats(); }
  void PrepareThread() override { inner_->PrepareThread(); }
  uint64_t max_kept_host_bytes() const override { return inner_->max_kept_host_bytes(); }
  bool arrays_on_host() const override { return inner_->arrays_on_host(); }

  // Arrays.
  absl::StatusOr<std::shared_ptr<Array>> Allocate(DType dtype, Shape shape, int device) override {
    return inner_->Allocate(dtype, std::move(shape), device);
  }
  absl::Status CopyToArray(const void* src, size_t offset, size_t bytes, Array& dst) override {
    return inner_->CopyToArray(src, offset, bytes, dst);
  }
  absl::Status CopyFromArray(const Array& src, size_t offset, size_t bytes, void* dst) override {
    return inner_->CopyFromArray(src, offset, bytes, dst);
  }
  // Passed on, not the default's copy per piece: the CUDA backend gathers the
  // pieces through its staging in one copy (one synchronize, not one per piece).
  absl::Status CopyPiecesToArray(std::span<const HostPiece> pieces, size_t offset,
                                 Array& dst) override {
    return inner_->CopyPiecesToArray(pieces, offset, dst);
  }
  // Passed on whole; `run` calls back into this backend's operations.
  absl::StatusOr<std::shared_ptr<Array>> RunFromHost(std::span<const HostInput> inputs,
                                                     DType out_dtype, const Shape& out_shape,
                                                     int device, OpContext& ctx,
                                                     ArraysRun run) override {
    return inner_->RunFromHost(inputs, out_dtype, out_shape, device, ctx, run);
  }
  absl::Status CopyArray(const Array& src, Array& dst) override {
    return inner_->CopyArray(src, dst);
  }
  absl::Status CheckValues(const Array& array, absl::string_view name,
                           const ValueRule& rule) override {
    return inner_->CheckValues(array, name, rule);
  }

  // Shared memory.
  absl::StatusOr<std::shared_ptr<void>> PinHostMemory(void* data, size_t bytes) override {
    return inner_->PinHostMemory(data, bytes);
  }
  absl::StatusOr<IpcMemory> OpenIpcMemory(absl::string_view handle,
                                          absl::string_view pci_bus_id) override {
    return inner_->OpenIpcMemory(handle, pci_bus_id);
  }

  // Operations.
  absl::Status DiscountProduct(const Array& factors, const Array& values, Array& out,
                               OpContext& ctx) override {
    if (absl::Status before = BeforeOperation(); !before.ok()) return before;
    return inner_->DiscountProduct(factors, values, out, ctx);
  }
  absl::Status HaversineMesh(const LatLonMesh& mesh, std::span<const GeoPoint> refs, double radius,
                             Array& out, OpContext& ctx) override {
    if (absl::Status before = BeforeOperation(); !before.ok()) return before;
    return inner_->HaversineMesh(mesh, refs, radius, out, ctx);
  }
  absl::Status HaversinePoints(const Array& lat, const Array& lon, std::span<const GeoPoint> refs,
                               double radius, Array& out, OpContext& ctx) override {
    if (absl::Status before = BeforeOperation(); !before.ok()) return before;
    return inner_->HaversinePoints(lat, lon, refs, radius, out, ctx);
  }
  absl::Status Normalize(const Array& in, NormKind norm, Array& out, OpContext& ctx) override {
    if (absl::Status before = BeforeOperation(); !before.ok()) return before;
    return inner_->Normalize(in, norm, out, ctx);
  }
  absl::Status LombScargle(const Array& x, const Array& y, const Array* weights,
                           const Array* freqs, const Linspace& grid,
                           const LombScargleOptions& options, Array& out,
                           OpContext& ctx) override {
    if (absl::Status before = BeforeOperation(); !before.ok()) return before;
    return inner_->LombScargle(x, y, weights, freqs, grid, options, out, ctx);
  }

 protected:
  // Runs before each operation is passed on; an error fails the operation.
  virtual absl::Status BeforeOperation() { return absl::OkStatus(); }

  Backend& inner() const { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace gpucompute
