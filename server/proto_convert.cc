#include "server/proto_convert.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "kernels/array.h"

namespace gpucompute {

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype, absl::string_view field) {
  switch (dtype) {
    case v1::FLOAT32: return DType::kFloat32;
    case v1::FLOAT64: return DType::kFloat64;
    case v1::DTYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is DTYPE_UNSPECIFIED; use FLOAT32 or FLOAT64"));
    default:
      return absl::InvalidArgumentError(absl::StrCat(field, " has unknown value ",
                                                     static_cast<int>(dtype),
                                                     "; use FLOAT32 (1) or FLOAT64 (2)"));
  }
}

v1::DType DTypeToProto(DType dtype) {
  return dtype == DType::kFloat32 ? v1::FLOAT32 : v1::FLOAT64;
}

absl::StatusOr<NormKind> NormFromProto(v1::Norm norm, absl::string_view field) {
  switch (norm) {
    case v1::NORM_SUM: return NormKind::kSum;
    case v1::NORM_L1: return NormKind::kL1;
    case v1::NORM_L2: return NormKind::kL2;
    case v1::NORM_MAX_ABS: return NormKind::kMaxAbs;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, " has unknown value ", static_cast<int>(norm),
                       "; use NORM_SUM, NORM_L1, NORM_L2 or NORM_MAX_ABS"));
  }
}

absl::StatusOr<LombScargleMethod> LombScargleMethodFromProto(v1::LombScargleMethod method,
                                                             absl::string_view field) {
  switch (method) {
    case v1::LOMB_SCARGLE_METHOD_AUTO: return LombScargleMethod::kAuto;
    case v1::LOMB_SCARGLE_METHOD_DIRECT: return LombScargleMethod::kDirect;
    case v1::LOMB_SCARGLE_METHOD_NUFFT: return LombScargleMethod::kNufft;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, " has unknown value ", static_cast<int>(method),
          "; use LOMB_SCARGLE_METHOD_AUTO, LOMB_SCARGLE_METHOD_DIRECT or LOMB_SCARGLE_METHOD_NUFFT"));
  }
}

absl::Status LombScargleNormalizationFromProto(const v1::LombScargleRequest& request,
                                               LombScargleOptions& options) {
  const v1::LombScargleNormalization normalization = request.normalization();
  switch (normalization) {
    case v1::LOMB_SCARGLE_NORMALIZATION_UNSPECIFIED:
    case v1::LOMB_SCARGLE_NORMALIZATION_NORMALIZE:
      options.normalize = request.normalize() ||
                          normalization == v1::LOMB_SCARGLE_NORMALIZATION_NORMALIZE;
      return absl::OkStatus();
    case v1::LOMB_SCARGLE_NORMALIZATION_POWER:
    case v1::LOMB_SCARGLE_NORMALIZATION_AMPLITUDE:
      if (request.normalize()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "normalize is true but normalization is ",
            v1::LombScargleNormalization_Name(normalization),
            "; leave normalize false, or ask for LOMB_SCARGLE_NORMALIZATION_NORMALIZE"));
      }
      options.normalize = false;
      options.amplitude = normalization == v1::LOMB_SCARGLE_NORMALIZATION_AMPLITUDE;
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "normalization has unknown value ", static_cast<int>(normalization),
          "; use LOMB_SCARGLE_NORMALIZATION_POWER, LOMB_SCARGLE_NORMALIZATION_NORMALIZE or "
          "LOMB_SCARGLE_NORMALIZATION_AMPLITUDE"));
  }
}

std::string DeviceLabel(int device) {
  return device == kHostDevice ? "cpu" : absl::StrCat("cuda:", device);
}

void ToBufferInfo(const StoredBuffer& buffer, v1::BufferInfo* info) {
  info->set_id(buffer.id);
  info->set_name(buffer.name);
  info->set_dtype(DTypeToProto(buffer.array->dtype()));
  info->clear_shape();
  for (int64_t extent : buffer.array->shape()) info->add_shape(extent);
  info->set_bytes(buffer.array->bytes());
  info->set_location(DeviceLabel(buffer.array->device()));
  info->set_created_unix_ms(absl::ToUnixMillis(buffer.created));
}

}  // namespace gpucompute
