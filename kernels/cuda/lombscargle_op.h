// Backend::LombScargle on one device of the CUDA backend: the operands (on `d`)
// checked, the method chosen (ChooseLombScargleMethod: direct or NUFFT, whose cuFFT
// plan comes from `fft_plans`), the kernels run through RunOp.
#pragma once

#include "absl/status/status.h"
#include "kernels/array.h"
#include "kernels/backend.h"
#include "kernels/cuda/cufft_plans.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/host_copy.h"

namespace gpucompute::cuda {

absl::Status RunLombScargle(DeviceState& d, HostCopies& copies, CufftPlans& fft_plans,
                            const Array& x, const Array& y, const Array* weights,
                            const Array* freqs, const Linspace& grid,
                            const LombScargleOptions& options, Array& out, OpContext& ctx);

}  // namespace gpucompute::cuda
