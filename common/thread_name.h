// Names the calling thread (at most 15 characters show), so that per-thread CPU
// time (/proc/PID/task/*/stat, top -H, perf) tells the server's own threads
// apart from gRPC's and CUDA's: bench/run_gpu_small.sh splits CPU per request by it.
#pragma once

#include <pthread.h>

namespace gpucompute {

inline void NameThisThread(const char* name) { (void)pthread_setname_np(pthread_self(), name); }

}  // namespace gpucompute
