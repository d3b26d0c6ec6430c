// Turns command-line operand arguments into Operands: "buffer:ID" refers to a
// stored buffer; a .npy file is sent inline, or uploaded first when it is larger
// than the inline limit (requests have a size cap; streams do not), or, with
// `shared_memory` (same host), read into a shared-memory region the server maps.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/client.h"
#include "client/shared_memory.h"
#include "gpucompute/v1/gpucompute.pb.h"

namespace gpucompute::client {

class OperandResolver {
 public:
  OperandResolver(Client& client, uint64_t inline_limit_bytes, bool show_progress,
                  bool shared_memory = false);
  // Deletes the buffers it uploaded and unregisters its regions, ignoring failures;
  // call Release() first to see them.
  ~OperandResolver();
  OperandResolver(const OperandResolver&) = delete;
  OperandResolver& operator=(const OperandResolver&) = delete;

  // `flag` names the argument in error messages.
  absl::StatusOr<v1::Operand> Resolve(absl::string_view spec, absl::string_view flag);

  // Deletes the buffers uploaded so far and unregisters the regions; the first
  // failure is returned, the remaining deletions are still attempted.
  absl::Status Release();

 private:
  Client& client_;
  uint64_t inline_limit_bytes_;
  bool show_progress_;
  bool shared_memory_;
  std::vector<std::string> uploaded_ids_;
  std::vector<std::unique_ptr<SharedRegion>> regions_;
};

}  // namespace gpucompute::client
