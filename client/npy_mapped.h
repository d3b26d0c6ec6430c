// .npy files mapped into memory rather than read or written through a buffer:
// an upload sends straight from the page cache, and a download lands straight in
// it (the C++ client copies each received chunk once, into the mapping).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/npy.h"

namespace gpucompute::client {

// A read-only mapping of a whole file; unmapped on destruction.
class FileMapping {
 public:
  static absl::StatusOr<std::unique_ptr<FileMapping>> Open(const std::string& path);
  // A fresh file of `bytes` bytes (truncating any existing one), mapped writable.
  static absl::StatusOr<std::unique_ptr<FileMapping>> Create(const std::string& path,
                                                             uint64_t bytes);
  ~FileMapping();
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  char* data() { return static_cast<char*>(address_); }
  absl::string_view bytes() const { return {static_cast<const char*>(address_), size_}; }

 private:
  FileMapping(void* address, uint64_t size) : address_(address), size_(size) {}
  void* address_;
  uint64_t size_;
};

// A .npy file for reading: `data` views the mapping when the file is
// little-endian C order, else a converted copy (as ReadNpyFile would make).
struct MappedNpy {
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  Shape shape;
  absl::string_view data;  // valid while this lives

  std::unique_ptr<FileMapping> mapping;
  std::unique_ptr<NpyArray> converted;
};
absl::StatusOr<MappedNpy> MapNpyFile(const std::string& path);

// A new .npy file for an array of dtype and shape, its header written and its
// data region mapped writable: fill data(), then the mapping is flushed by the
// kernel as for any write (munmap on destruction).
class NpyOutputFile {
 public:
  static absl::StatusOr<NpyOutputFile> Create(const std::string& path, v1::DType dtype,
                                              std::span<const int64_t> shape);
  char* data() { return mapping_->data() + data_offset_; }

 private:
  NpyOutputFile(std::unique_ptr<FileMapping> mapping, uint64_t data_offset)
      : mapping_(std::move(mapping)), data_offset_(data_offset) {}
  std::unique_ptr<FileMapping> mapping_;
  uint64_t data_offset_;
};

}  // namespace gpucompute::client
