#include "server/shared_memory_region.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "kernels/array_view.h"
#include "kernels/shape_rules.h"
#include "server/echo.h"

namespace gpucompute {
namespace {

// The SIGBUS guard: the address ranges of mapped system regions, read by the
// signal handler without locks (begin 0: a free slot).
struct GuardedRange {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
};
GuardedRange g_guarded[kMaxMappedRegions];
absl::Mutex g_guard_mu;  // taking and freeing slots
struct sigaction g_previous_sigbus;

void RaiseAgain(int signal, siginfo_t* info, void* context) {
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(signal);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);  // returning re-runs the access, which now kills as before
}

// A fault inside a guarded mapping: the object shrank under it. Zero pages in
// its place let the access (and the request) finish; the request then fails.
void OnSigbus(int signal, siginfo_t* info, void* context) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardedRange& range : g_guarded) {
    const uintptr_t begin = range.begin.load(std::memory_order_acquire);
    if (begin == 0 || address < begin || address >= range.end.load(std::memory_order_acquire)) {
      continue;
    }
    void* zeros = mmap(reinterpret_cast<void*>(begin), range.end.load() - begin,
                       PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (zeros != MAP_FAILED) {
      range.faulted.store(true);
      return;
    }
  }
  RaiseAgain(signal, info, context);
}

absl::StatusOr<int> GuardRange(void* begin, size_t bytes) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
  absl::MutexLock lock(&g_guard_mu);
  for (int slot = 0; slot < kMaxMappedRegions; ++slot) {
    GuardedRange& range = g_guarded[slot];
    if (range.begin.load() != 0) continue;
    range.faulted.store(false);
    range.end.store(reinterpret_cast<uintptr_t>(begin) + bytes, std::memory_order_release);
    range.begin.store(reinterpret_cast<uintptr_t>(begin), std::memory_order_release);
    return slot;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "the server has ", kMaxMappedRegions, " shared-memory regions mapped, its limit"));
}

void UnguardRange(int slot) {
  absl::MutexLock lock(&g_guard_mu);
  g_guarded[slot].begin.store(0, std::memory_order_release);
}

std::string Errno(int error) { return std::strerror(error); }

// Where glibc's shm_open keeps POSIX shared-memory objects.
constexpr char kShmDirectory[] = "/dev/shm";

absl::Status CheckKey(const std::string& key) {
  if (key.size() < 2 || key.size() > NAME_MAX || key[0] != '/' ||
      key.find('/', 1) != std::string::npos || key.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", QuoteClientString(key),
        " is not a POSIX shared-memory name: '/' then 1 to 254 characters without '/'"));
  }
  if (key == "/." || key == "/..") {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", QuoteClientString(key),
        " names a directory, not a POSIX shared-memory object; choose another name"));
  }
  return absl::OkStatus();
}

// Closes a descriptor when it goes out of scope.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  const int fd_;
};

absl::Status CheckSize(uint64_t offset, uint64_t byte_size, uint64_t available,
                       absl::string_view what) {
  if (byte_size == 0) return absl::InvalidArgumentError("byte_size is 0; give the region's size");
  if (offset > available || byte_size > available - offset) {
    return absl::InvalidArgumentError(absl::StrCat("offset ", offset, " + byte_size ", byte_size,
                                                   " passes the end of ", what, " (", available,
                                                   " bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegion::MapSystem(
    Backend& backend, const std::string& key, uint64_t offset, uint64_t byte_size,
    uint32_t caller_uid) {
  GC_RETURN_IF_ERROR(CheckKey(key));
  std::shared_ptr<SharedMemoryRegion> region(new SharedMemoryRegion());
  region->key_ = key;
  // O_NOFOLLOW: a symbolic link planted under /dev/shm must not lead elsewhere.
  const ScopedFd fd(shm_open(key.c_str(), O_RDWR | O_NOFOLLOW, 0));
  if (fd.get() < 0) {
    const int error = errno;
    const std::string quoted = QuoteClientString(key);
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat(
          "key: no POSIX shared-memory object ", quoted,
          " on the server's host; the client must create it on the same host (and, in "
          "containers, share /dev/shm and the IPC namespace with the server)"));
    }
    if (error == EACCES) {
      return absl::PermissionDeniedError(absl::StrCat(
          "key: the server's user may not open shared-memory object ", quoted,
          " read-write; create it with a mode that lets the server's user in"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("key: cannot open shared-memory object ", quoted, ": ", Errno(error)));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    return absl::InternalError(absl::StrCat("fstat of shared-memory object: ", Errno(errno)));
  }
  // The server may open what its caller may not: it acts only for the object's
  // owner, checked on the very object opened.
  if (caller_uid != 0 && st.st_uid != caller_uid) {
    return WithReason(absl::PermissionDeniedError(absl::StrCat(
                          "key: shared-memory object ", QuoteClientString(key),
                          " belongs to another user than the caller's (uid ", caller_uid,
                          "); register only objects your own user created")),
                      reason::kSharedMemoryNotOwned, {{"field", "key"}});
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", QuoteClientString(key), " is not a POSIX shared-memory object"));
  }
  region->object_ = absl::StrCat(st.st_dev, ":", st.st_ino);
  GC_RETURN_IF_ERROR(CheckSize(offset, byte_size, static_cast<uint64_t>(st.st_size),
                               absl::StrCat("shared-memory object ", QuoteClientString(key))));
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t map_offset = offset / page * page;
  region->mapping_bytes_ = static_cast<size_t>(offset - map_offset + byte_size);
  void* mapping = mmap(nullptr, region->mapping_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED,
                       fd.get(), static_cast<off_t>(map_offset));
  if (mapping == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot map ", byte_size, " bytes of shared-memory object ", QuoteClientString(key), ": ",
        Errno(errno)));
  }
  region->mapping_ = mapping;
  region->object_end_ = offset + byte_size;
  GC_ASSIGN_OR_RETURN(region->guard_slot_, GuardRange(mapping, region->mapping_bytes_));
  region->data_ = static_cast<char*>(mapping) + (offset - map_offset);
  region->byte_size_ = byte_size;
  // The whole mapping, from its page-aligned start.
  GC_ASSIGN_OR_RETURN(region->pin_, backend.PinHostMemory(mapping, region->mapping_bytes_));
  return region;
}

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegion::OpenCuda(
    Backend& backend, absl::string_view handle, absl::string_view pci_bus_id, uint64_t offset,
    uint64_t byte_size) {
  GC_ASSIGN_OR_RETURN(IpcMemory memory, backend.OpenIpcMemory(handle, pci_bus_id));
  GC_RETURN_IF_ERROR(CheckSize(offset, byte_size, memory.bytes, "the IPC handle's allocation"));
  std::shared_ptr<SharedMemoryRegion> region(new SharedMemoryRegion());
  region->data_ = static_cast<char*>(memory.mapping.get()) + offset;
  region->device_memory_ = std::move(memory.mapping);
  region->byte_size_ = byte_size;
  region->device_ = memory.device;
  return region;
}

SharedMemoryRegion::~SharedMemoryRegion() {
  pin_.reset();
  device_memory_.reset();
  if (guard_slot_ >= 0) UnguardRange(guard_slot_);
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
  std::vector<absl::AnyInvocable<void() &&>> callbacks;
  {
    absl::MutexLock lock(&mu_);
    callbacks.swap(on_release_);
  }
  for (auto& callback : callbacks) std::move(callback)();
}

absl::Status SharedMemoryRegion::CheckUsable(absl::string_view field) const {
  if (Orphaned()) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ": shared-memory object ", QuoteClientString(key_),
        " was unlinked (the process that created it ended or removed it): unregister the "
        "region"));
  }
  return CheckIntact(field);
}

absl::Status SharedMemoryRegion::CheckIntact(absl::string_view field) const {
  if (guard_slot_ >= 0 && g_guarded[guard_slot_].faulted.load()) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ": shared-memory object ", QuoteClientString(key_),
        " was shrunk by its owner while the server used it; its bytes read as zeros from then "
        "on: unregister the region"));
  }
  if (object_.empty()) return absl::OkStatus();
  const std::optional<struct stat> st = StatObject();
  // Unlinked: no one can shrink it by name any more, and the mapping holds the bytes.
  if (!st.has_value()) return absl::OkStatus();
  if (static_cast<uint64_t>(st->st_size) < object_end_) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ": shared-memory object ", QuoteClientString(key_), " shrank to ", st->st_size,
        " bytes, below the ", object_end_, " the region was registered with"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Array>> SharedMemoryRegion::View(DType dtype, const Shape& shape,
                                                                uint64_t offset,
                                                                int64_t max_elements,
                                                                absl::string_view field) {
  GC_RETURN_IF_ERROR(CheckUsable(field));
  GC_ASSIGN_OR_RETURN(const int64_t count, CheckedElementCount(shape, max_elements, field));
  const uint64_t bytes = static_cast<uint64_t>(count) * ElementSize(dtype);
  if (offset > byte_size_ || bytes > byte_size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": shape ", ShapeToString(shape), " of ", DTypeName(dtype), " needs ", bytes,
        " bytes from offset ", offset, ", past the region's end (", byte_size_, " bytes)"));
  }
  if (reinterpret_cast<uintptr_t>(data_ + offset) % ElementSize(dtype) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".offset ", offset, " is not aligned to ",
                                                   DTypeName(dtype), " (", ElementSize(dtype),
                                                   " bytes) in the region"));
  }
  return std::shared_ptr<Array>(std::make_shared<ArrayView>(
      dtype, shape, count, device_, data_ + offset, shared_from_this()));
}

namespace {

// The object now named `key`, when it is `object`.
std::optional<struct stat> StatSystemObject(const std::string& key, absl::string_view object) {
  struct stat st {};
  const std::string path = absl::StrCat(kShmDirectory, key);
  if (lstat(path.c_str(), &st) != 0 || absl::StrCat(st.st_dev, ":", st.st_ino) != object) {
    return std::nullopt;
  }
  return st;
}

}  // namespace

bool SystemObjectExists(const std::string& key, absl::string_view object) {
  return StatSystemObject(key, object).has_value();
}

std::optional<struct stat> SharedMemoryRegion::StatObject() const {
  return StatSystemObject(key_, object_);
}

bool SharedMemoryRegion::Orphaned() const { return !object_.empty() && !StatObject().has_value(); }

void SharedMemoryRegion::WhenReleased(absl::AnyInvocable<void() &&> callback) {
  absl::MutexLock lock(&mu_);
  on_release_.push_back(std::move(callback));
}

}  // namespace gpucompute
