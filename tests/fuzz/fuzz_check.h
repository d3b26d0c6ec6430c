// FUZZ_CHECK: the fuzzer's invariant assertion. A violation prints what failed and
// aborts, which libFuzzer reports as a crash (and fuzz.sh greps for the banner).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpucompute::fuzz {

[[noreturn]] inline void Fail(absl::string_view what, absl::string_view detail) {
  std::fprintf(stderr, "\n*** gpucompute fuzz invariant violated: %.*s\n    %.*s\n",
               static_cast<int>(what.size()), what.data(), static_cast<int>(detail.size()),
               detail.data());
  std::fflush(stderr);
  std::abort();
}

inline std::string StatusText(const absl::Status& s) { return s.ToString(); }

}  // namespace gpucompute::fuzz

#define FUZZ_CHECK(cond, detail)                            \
  do {                                                      \
    if (!(cond)) ::gpucompute::fuzz::Fail(#cond, (detail)); \
  } while (0)
