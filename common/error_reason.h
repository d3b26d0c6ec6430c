// Machine-readable error reasons. A failing absl::Status carries a stable reason and
// metadata (the field at fault, the limit, the owning instance) as payloads; the RPC
// edge (server/status_convert.cc) turns them into a google.rpc.ErrorInfo in the
// status details, so that clients decide by reason, never by message text.
//
//   return WithReason(absl::ResourceExhaustedError(...), reason::kQuotaExceeded,
//                     {{"field", "buffer_quota_bytes"}, {"limit", absl::StrCat(quota)}});
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpucompute {

// google.rpc.ErrorInfo.domain of every reason below.
inline constexpr absl::string_view kErrorDomain = "gpucompute.dev";

// The reasons, stable across releases: clients and other languages match them.
namespace reason {
inline constexpr absl::string_view kBufferNotFound = "BUFFER_NOT_FOUND";
// Metadata: owner_instance (the instance that issued the id), instance (this one).
// Metadata of the others, where they apply: field (the request field at fault),
// limit and limit_name (the number and the flag or setting that sets it).
inline constexpr absl::string_view kBufferOnOtherReplica = "BUFFER_ON_OTHER_REPLICA";
inline constexpr absl::string_view kQuotaExceeded = "QUOTA_EXCEEDED";
inline constexpr absl::string_view kMemoryBudget = "MEMORY_BUDGET";
inline constexpr absl::string_view kResultTooLargeForOneMessage =
    "RESULT_TOO_LARGE_FOR_ONE_MESSAGE";
inline constexpr absl::string_view kSharedMemoryRegionNotFound = "SHARED_MEMORY_REGION_NOT_FOUND";
inline constexpr absl::string_view kUploadSessionNotFound = "UPLOAD_SESSION_NOT_FOUND";
// A resumable upload's other stream wrote or ended after it was stored.
inline constexpr absl::string_view kUploadAlreadyStored = "UPLOAD_ALREADY_STORED";
// The shared-memory object belongs to another local user, or another principal
// registered it. Metadata: field.
inline constexpr absl::string_view kSharedMemoryNotOwned = "SHARED_MEMORY_NOT_OWNED";
// The server cannot tell which local user the connection is (docs/security.md).
inline constexpr absl::string_view kSharedMemoryCallerUnknown = "SHARED_MEMORY_CALLER_UNKNOWN";
// A status without a reason of its own gets its code's name ("INVALID_ARGUMENT", ...)
// at the edge, with the field its message names.
}  // namespace reason

// Payload keys: the reason, and one key per metadata entry.
inline constexpr absl::string_view kReasonPayload = "gpucompute.dev/reason";
inline constexpr absl::string_view kMetadataPayloadPrefix = "gpucompute.dev/metadata/";

using ErrorMetadata = std::initializer_list<std::pair<absl::string_view, std::string>>;

// Adds one metadata entry to a status's reason.
inline void AddReasonMetadata(absl::Status& status, absl::string_view key,
                              absl::string_view value) {
  status.SetPayload(absl::StrCat(kMetadataPayloadPrefix, key), absl::Cord(value));
}

// `status` (not OK) with `reason` and `metadata` attached; code and message unchanged.
inline absl::Status WithReason(absl::Status status, absl::string_view reason,
                               ErrorMetadata metadata = {}) {
  status.SetPayload(kReasonPayload, absl::Cord(reason));
  for (const auto& [key, value] : metadata) AddReasonMetadata(status, key, value);
  return status;
}

// `status` with `context` before its message ("context: message"), its code, reason and
// metadata kept: wrapping an error never loses what clients decide by.
inline absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  absl::Status wrapped(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload([&](absl::string_view key, const absl::Cord& value) {
    wrapped.SetPayload(key, value);
  });
  return wrapped;
}

// The reason attached by WithReason, or "".
inline std::string ReasonOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kReasonPayload);
  return payload.has_value() ? std::string(*payload) : std::string();
}

// The metadata value attached under `key`, or "".
inline std::string ReasonMetadata(const absl::Status& status, absl::string_view key) {
  const auto payload = status.GetPayload(absl::StrCat(kMetadataPayloadPrefix, key));
  return payload.has_value() ? std::string(*payload) : std::string();
}

}  // namespace gpucompute
