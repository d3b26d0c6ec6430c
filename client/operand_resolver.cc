#include "client/operand_resolver.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/cli_parse.h"
#include "client/npy.h"
#include "client/npy_mapped.h"
#include "client/progress_bar.h"
#include "common/error_reason.h"
#include "common/status_macros.h"

namespace gpucompute::client {

OperandResolver::OperandResolver(Client& client, uint64_t inline_limit_bytes, bool show_progress,
                                 bool shared_memory)
    : client_(client),
      inline_limit_bytes_(inline_limit_bytes),
      show_progress_(show_progress),
      shared_memory_(shared_memory) {}

OperandResolver::~OperandResolver() { Release().IgnoreError(); }

absl::StatusOr<v1::Operand> OperandResolver::Resolve(absl::string_view spec,
                                                     absl::string_view flag) {
  GC_ASSIGN_OR_RETURN(OperandSpec parsed, ParseOperandSpec(spec, flag));
  if (parsed.kind == OperandSpec::Kind::kBuffer) return BufferOperand(std::move(parsed.value));

  // Mapped, not read: a large operand is uploaded from the page cache.
  GC_ASSIGN_OR_RETURN(const MappedNpy array, MapNpyFile(parsed.value));
  if (shared_memory_) {
    absl::StatusOr<std::unique_ptr<SharedRegion>> region = SharedRegion::Create(
        client_, std::max<uint64_t>(array.data.size(), 1), parsed.value);
    if (!region.ok()) {
      return WithContext(region.status(),
                         absl::StrCat("--", flag, "=", parsed.value, " into shared memory"));
    }
    std::memcpy((*region)->data(), array.data.data(), array.data.size());
    regions_.push_back(*std::move(region));
    return regions_.back()->Operand(0, array.dtype, array.shape);
  }
  if (array.data.size() <= inline_limit_bytes_) {
    GC_ASSIGN_OR_RETURN(v1::Tensor tensor,
                        MakeTensor(array.dtype, array.shape, std::string(array.data)));
    return TensorOperand(std::move(tensor));
  }
  const std::string name = std::filesystem::path(parsed.value).filename().string();
  absl::StatusOr<v1::BufferInfo> buffer = WithProgressBar(
      absl::StrCat("upload ", name), show_progress_, [&](const ProgressCallback& progress) {
        return client_.Upload(name, array.dtype, array.shape, array.data, progress);
      });
  if (!buffer.ok()) {
    return absl::Status(
        buffer.status().code(),
        absl::StrCat("uploading --", flag, "=", parsed.value, ": ", buffer.status().message()));
  }
  uploaded_ids_.push_back(buffer->id());
  return BufferOperand(buffer->id());
}

absl::Status OperandResolver::Release() {
  absl::Status first_error;
  for (const std::string& id : uploaded_ids_) {
    absl::StatusOr<uint64_t> freed = client_.Delete(id);
    if (!freed.ok() && first_error.ok()) {
      first_error = absl::Status(
          freed.status().code(),
          absl::StrCat("deleting temporary buffer ", id, ": ", freed.status().message()));
    }
  }
  uploaded_ids_.clear();
  regions_.clear();
  return first_error;
}

}  // namespace gpucompute::client
