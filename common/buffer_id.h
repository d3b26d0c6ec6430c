// The form of a buffer id, shared by the server that issues ids and the clients
// that route calls by them: the issuing replica's instance id, then random digits.
#pragma once

#include <cstddef>

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"

namespace gpucompute {

// Every buffer id has this many lowercase hex digits.
inline constexpr size_t kBufferIdLength = 32;
// A replica's instance id: 32 random bits in hex, new at every start, so that the
// ids a replica issued are never taken for another's, nor for its successor's.
inline constexpr size_t kInstanceIdLength = 8;

// The instance that issued `id`: its first kInstanceIdLength digits when `id` has
// the form of a buffer id (kBufferIdLength lowercase hex digits), else "".
inline absl::string_view IssuingInstance(absl::string_view id) {
  if (id.size() != kBufferIdLength) return "";
  for (char c : id) {
    if (!absl::ascii_isdigit(c) && (c < 'a' || c > 'f')) return "";
  }
  return id.substr(0, kInstanceIdLength);
}

}  // namespace gpucompute
