// gRPC kept initialized until the process exits.
#pragma once

#include <grpc/grpc.h>

namespace gpucompute {

// gRPC 1.51 shuts itself down when its last reference goes. When that reference is a
// transport or channel stack freed on one of gRPC's own threads (as a closed channel's
// are), the shutdown runs on a detached thread and races whatever the process does
// next: its exit, or the next grpc_init of a new server or channel (a segfault in a
// callback-queue thread, or a teardown waiting ~10 s). A reference held for the life of
// the process, taken early in main, means gRPC never shuts down before exit. It starts
// gRPC's threads: take it after blocking any signal they must not receive.
inline void KeepGrpcInitializedUntilExit() {
  static const bool kept = (grpc_init(), true);
  (void)kept;
}

}  // namespace gpucompute
