#include "server/grpc_log_watch.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "grpc/support/log.h"

namespace gpucompute {
namespace {

std::atomic<bool> g_listener_failed{false};

void LogAndWatch(gpr_log_func_args* args) {
  if (std::strstr(args->message, "Failed accept4") != nullptr) g_listener_failed.store(true);
  std::fprintf(stderr, "%s %s:%d] %s\n", gpr_log_severity_string(args->severity), args->file,
               args->line, args->message);
}

}  // namespace

void WatchGrpcLog() {
  static std::once_flag installed;
  std::call_once(installed, [] { gpr_set_log_function(LogAndWatch); });
}

bool GrpcListenerFailed() { return g_listener_failed.load(); }

}  // namespace gpucompute
