// Same-host zero copy from C++: a POSIX shared-memory region this process creates,
// maps and registers with the server (which must run with --allow_shared_memory, on
// this host). Operands and results name slices of it (SharedMemoryOperand,
// SharedMemoryOutput) instead of carrying bytes; the server writes a result there
// when the request's output.shared_memory names it.
//
//   auto region = SharedRegion::Create(client, bytes, "inputs");
//   std::memcpy((*region)->data(), values.data(), bytes);
//   *request.mutable_input() = (*region)->Operand(0, v1::FLOAT64, shape);
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/tensor.h"
#include "gpucompute/v1/gpucompute.pb.h"

namespace gpucompute::client {

// `shape` elements of `dtype` from byte `offset` of region `region_id`, as an operand.
v1::Operand SharedMemoryOperand(const std::string& region_id, uint64_t offset, v1::DType dtype,
                                const Shape& shape);

class SharedRegion {
 public:
  // A new object of `bytes` bytes (an unguessable "/gpucompute-..." key, mode
  // 0600), mapped and registered under `name`.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(Client& client, uint64_t bytes,
                                                              const std::string& name);
  // Unregisters (waiting for the requests that use it), unmaps and unlinks it.
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  char* data() { return static_cast<char*>(data_); }
  uint64_t bytes() const { return bytes_; }
  const std::string& id() const { return id_; }
  const std::string& key() const { return key_; }

  // `shape` elements of `dtype` from byte `offset`, as an operand.
  v1::Operand Operand(uint64_t offset, v1::DType dtype, const Shape& shape) const;
  // The request's result written from byte `offset` (set into output.shared_memory).
  v1::SharedMemorySlice Output(uint64_t offset) const;

 private:
  SharedRegion(Client& client, std::string key, void* data, uint64_t bytes)
      : client_(client), key_(std::move(key)), data_(data), bytes_(bytes) {}

  Client& client_;
  std::string key_;
  std::string id_;
  void* data_;
  uint64_t bytes_;
};

}  // namespace gpucompute::client
