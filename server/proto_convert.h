// How domain values appear in the API (gpucompute.v1 messages) and back: the one
// place that translates between proto enums and messages and kernels/ and
// server/ types. Values a request may get wrong come back as INVALID_ARGUMENT
// naming the request field.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "kernels/norm.h"
#include "server/buffer_store.h"

namespace gpucompute {

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype, absl::string_view field);
v1::DType DTypeToProto(DType dtype);

// NORM_SUM, ... as the backends' NormKind.
absl::StatusOr<NormKind> NormFromProto(v1::Norm norm, absl::string_view field);

// LOMB_SCARGLE_METHOD_AUTO, ... as the backends' LombScargleMethod.
absl::StatusOr<LombScargleMethod> LombScargleMethodFromProto(v1::LombScargleMethod method,
                                                             absl::string_view field);

// A request's normalization and its older bool normalize as options.normalize and
// options.amplitude: INVALID_ARGUMENT for an unknown value, or normalize true beside
// a normalization other than NORMALIZE.
absl::Status LombScargleNormalizationFromProto(const v1::LombScargleRequest& request,
                                               LombScargleOptions& options);

// Where an array lives, as the API names it: "cpu" for host arrays, "cuda:N" otherwise.
std::string DeviceLabel(int device);

// Fills the API's BufferInfo from a stored buffer.
void ToBufferInfo(const StoredBuffer& buffer, v1::BufferInfo* info);

}  // namespace gpucompute
