#include "client/npy_mapped.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/status_macros.h"

namespace gpucompute::client {
namespace {

absl::Status ErrnoError(const std::string& path, absl::string_view action) {
  const int error = errno;
  const std::string message = absl::StrCat("cannot ", action, " ", path, ": ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(message);
  return absl::UnavailableError(message);
}

// Closes a descriptor when it goes out of scope (the mapping outlives it).
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) close(fd);
  }
};

// An empty file has nothing to map: one readable page of no file stands in.
absl::StatusOr<void*> Map(int fd, uint64_t bytes, bool writable, const std::string& path) {
  const int protection = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* address = bytes == 0 ? mmap(nullptr, 1, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                             : mmap(nullptr, bytes, protection, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) return ErrnoError(path, "map");
  // Sequential use, once: read ahead and drop behind.
  if (bytes > 0) (void)madvise(address, bytes, MADV_SEQUENTIAL);
  return address;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileMapping>> FileMapping::Open(const std::string& path) {
  const Descriptor file{open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) return ErrnoError(path, "open");
  struct stat info {};
  if (fstat(file.fd, &info) != 0) return ErrnoError(path, "stat");
  if (S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not a .npy file"));
  }
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  GC_ASSIGN_OR_RETURN(void* address, Map(file.fd, size, /*writable=*/false, path));
  return std::unique_ptr<FileMapping>(new FileMapping(address, size));
}

absl::StatusOr<std::unique_ptr<FileMapping>> FileMapping::Create(const std::string& path,
                                                                 uint64_t bytes) {
  const Descriptor file{open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (file.fd < 0) return ErrnoError(path, "create");
  if (ftruncate(file.fd, static_cast<off_t>(bytes)) != 0) return ErrnoError(path, "size");
  GC_ASSIGN_OR_RETURN(void* address, Map(file.fd, bytes, /*writable=*/true, path));
  return std::unique_ptr<FileMapping>(new FileMapping(address, bytes));
}

FileMapping::~FileMapping() { munmap(address_, size_ == 0 ? 1 : size_); }

absl::StatusOr<MappedNpy> MapNpyFile(const std::string& path) {
  MappedNpy npy;
  GC_ASSIGN_OR_RETURN(npy.mapping, FileMapping::Open(path));
  const absl::string_view file = npy.mapping->bytes();
  absl::StatusOr<NpyLayout> layout = ParseNpyLayout(file);
  if (!layout.ok()) {
    return WithContext(layout.status(), path);
  }
  npy.dtype = layout->dtype;
  npy.shape = layout->shape;
  if (layout->in_place) {
    npy.data = file.substr(layout->data_offset);
    return npy;
  }
  // Big-endian or Fortran order: converted, as ReadNpyFile does.
  GC_ASSIGN_OR_RETURN(NpyArray converted, ParseNpy(file));
  npy.converted = std::make_unique<NpyArray>(std::move(converted));
  npy.data = npy.converted->data;
  npy.mapping.reset();
  return npy;
}

absl::StatusOr<NpyOutputFile> NpyOutputFile::Create(const std::string& path, v1::DType dtype,
                                                    std::span<const int64_t> shape) {
  GC_ASSIGN_OR_RETURN(const std::string header, NpyHeader(dtype, shape));
  GC_ASSIGN_OR_RETURN(const uint64_t data_bytes, ByteCount(dtype, shape));
  GC_ASSIGN_OR_RETURN(std::unique_ptr<FileMapping> mapping,
                      FileMapping::Create(path, header.size() + data_bytes));
  std::memcpy(mapping->data(), header.data(), header.size());
  return NpyOutputFile(std::move(mapping), header.size());
}

}  // namespace gpucompute::client
