// Integer gRPC channel arguments given as text, "name=value" (the server's
// --grpc_channel_args, the bulk benchmark's --channel_args): how the transport is
// tuned without a rebuild (bench/NOTES.md says which settings mattered).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpucompute {

using IntChannelArgs = std::vector<std::pair<std::string, int>>;

// The largest HTTP/2 DATA frame a peer may send us (SETTINGS_MAX_FRAME_SIZE; HTTP/2's
// ceiling is 2^24 - 1, gRPC's default 16 KiB). Server and clients advertise it: a
// 4 MiB message then crosses as a few frames rather than 256, which sped one-stream
// uploads by about a tenth; of the transport settings tried, only this one helped.
inline constexpr int kMaxHttp2FrameBytes = (1 << 24) - 1;

// The server's largest socket read (GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE): larger read
// buffers sit above the server's mmap threshold (main.cc ConfigureMalloc), so each one
// is mapped and page-faulted afresh, which slowed uploads.
inline constexpr int kMaxSocketReadBytes = 128 << 10;

// Each entry "grpc.NAME=INTEGER"; INVALID_ARGUMENT naming `what` and the entry otherwise.
inline absl::StatusOr<IntChannelArgs> ParseIntChannelArgs(const std::vector<std::string>& entries,
                                                          absl::string_view what) {
  IntChannelArgs args;
  for (const std::string& entry : entries) {
    const size_t equals = entry.find('=');
    int value = 0;
    if (equals == std::string::npos || entry.rfind("grpc.", 0) != 0 ||
        !absl::SimpleAtoi(absl::string_view(entry).substr(equals + 1), &value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": \"", entry, "\" is not grpc.NAME=INTEGER (an integer gRPC channel argument)"));
    }
    args.emplace_back(entry.substr(0, equals), value);
  }
  return args;
}

}  // namespace gpucompute
