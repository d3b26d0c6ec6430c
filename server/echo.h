// The one way error messages quote a string the client sent (buffer ids, names):
// escaped and bounded, so that a hostile string can neither break the message nor
// push the status past the client's metadata limit (~8 KiB by default).
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpucompute {

// Bytes of a client string that a message quotes; the rest is counted, not shown.
inline constexpr size_t kMaxQuotedBytes = 64;

// 'text', or 'first 64 bytes'... (N bytes) for a longer string; C-escaped either way.
inline std::string QuoteClientString(absl::string_view text) {
  if (text.size() <= kMaxQuotedBytes) return absl::StrCat("'", absl::CHexEscape(text), "'");
  return absl::StrCat("'", absl::CHexEscape(text.substr(0, kMaxQuotedBytes)), "'... (",
                      text.size(), " bytes)");
}

}  // namespace gpucompute
