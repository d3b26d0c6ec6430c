#include "client/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace gpucompute::client {
namespace {

std::string NewKey() {
  std::random_device entropy;
  return absl::StrFormat("/gpucompute-%d-%08x%08x", getpid(), entropy(), entropy());
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(Client& client, uint64_t bytes,
                                                                   const std::string& name) {
  if (bytes == 0) return absl::InvalidArgumentError("a shared-memory region needs >= 1 byte");
  const std::string key = NewKey();
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("shm_open ", key, ": ", std::strerror(errno)));
  }
  void* data = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int error = errno;
  close(fd);
  if (data == MAP_FAILED) {
    shm_unlink(key.c_str());
    return absl::ResourceExhaustedError(
        absl::StrCat("shared memory of ", bytes, " bytes: ", std::strerror(error)));
  }
  std::unique_ptr<SharedRegion> region(new SharedRegion(client, key, data, bytes));
  GC_ASSIGN_OR_RETURN(const v1::SharedMemoryRegionInfo info,
                      client.RegisterSystemSharedMemory(name, key, 0, bytes));
  region->id_ = info.id();
  return region;
}

SharedRegion::~SharedRegion() {
  if (!id_.empty()) client_.UnregisterSharedMemory(id_).IgnoreError();
  munmap(data_, bytes_);
  shm_unlink(key_.c_str());
}

v1::Operand SharedMemoryOperand(const std::string& region_id, uint64_t offset, v1::DType dtype,
                                const Shape& shape) {
  v1::Operand operand;
  v1::SharedMemorySlice* slice = operand.mutable_shared_memory();
  slice->set_region_id(region_id);
  slice->set_offset(offset);
  slice->set_dtype(dtype);
  for (int64_t extent : shape) slice->add_shape(extent);
  return operand;
}

v1::Operand SharedRegion::Operand(uint64_t offset, v1::DType dtype, const Shape& shape) const {
  return SharedMemoryOperand(id_, offset, dtype, shape);
}

v1::SharedMemorySlice SharedRegion::Output(uint64_t offset) const {
  v1::SharedMemorySlice slice;
  slice.set_region_id(id_);
  slice.set_offset(offset);
  return slice;
}

}  // namespace gpucompute::client
