// gRPC's listener (1.51) stops accepting for good once accept4 fails, as when
// the process runs out of file descriptors; it only logs "Failed accept4". This
// watches gRPC's log for that line, so that health can turn NOT_SERVING and an
// orchestrator restart the server, instead of it looking healthy to the
// connections it already has while new clients time out.
#pragma once

namespace gpucompute {

// Routes gRPC's log through a function that notes a failed accept and writes
// every line to stderr as gRPC would; once per process.
void WatchGrpcLog();
// Whether gRPC logged a failed accept since WatchGrpcLog.
bool GrpcListenerFailed();

}  // namespace gpucompute
