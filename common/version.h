// What a binary was built from, for --version: the release, the git commit, the
// CUDA architectures with machine code in it, and the gRPC it links.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace gpucompute {

// "PROGRAM 0.1.0\ngit commit ...\nCUDA ...\ngRPC ...\n".
std::string VersionText(absl::string_view program);

}  // namespace gpucompute
