// RAII owners of CUDA resources used by the backend: current-device guard, streams,
// events, pinned host buffers, device bytes, a pool of streams and the pinned staging
// pool.
// Host-only; every function returns absl::Status rather than aborting.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace gpucompute::cuda {

// Makes `device` current for this thread while in scope (cub::SwitchDevice's shape);
// cudaSetDevice is per thread and cheap, and nothing is switched when `device` is
// current already. On destruction it restores the device of the enclosing guard on this
// thread, if any. Outside every guard the thread keeps `device`: a thread's default
// device 0 has no context until it is used, and restoring it would create one on a GPU
// that --devices leaves out. Check error() before using the device.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) : device_(device), enclosing_(GuardedDevice()) {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device) error_ = cudaSetDevice(device);
    if (error_ == cudaSuccess) GuardedDevice() = device;
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice() {
    if (error_ != cudaSuccess) return;
    GuardedDevice() = enclosing_;
    if (enclosing_ >= 0 && enclosing_ != device_) (void)cudaSetDevice(enclosing_);
  }
  cudaError_t error() const { return error_; }

 private:
  // The device of the innermost live guard on this thread; -1 outside every guard.
  static int& GuardedDevice() {
    static thread_local int device = -1;
    return device;
  }

  const int device_;
  const int enclosing_;
  cudaError_t error_ = cudaSuccess;
};

class Event {
 public:
  Event() = default;
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      Reset();
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  ~Event() { Reset(); }
  static absl::StatusOr<Event> Create(unsigned flags) {
    Event e;
    GC_CUDA_RETURN_IF_ERROR(e.Init(flags), "cudaEventCreate");
    return e;
  }
  // Replaces the event with a new one (empty when that fails); the form for the copy
  // paths, which report a cudaError_t.
  cudaError_t Init(unsigned flags) {
    Reset();
    cudaEvent_t e = nullptr;
    const cudaError_t err = cudaEventCreateWithFlags(&e, flags);
    if (err == cudaSuccess) e_ = e;
    return err;
  }
  cudaEvent_t get() const { return e_; }

 private:
  void Reset() {
    if (e_ != nullptr) (void)cudaEventDestroy(e_);
    e_ = nullptr;
  }
  cudaEvent_t e_ = nullptr;
};

// Memory from the CUDA runtime, released with its owner: pinned (page-locked) host
// memory, portable across devices, or device memory from cudaMalloc, outside the
// stream-ordered pool.
enum class CudaMemoryKind { kPinnedHost, kDevice };

template <CudaMemoryKind kKind>
class CudaBytes {
 public:
  CudaBytes() = default;
  CudaBytes(CudaBytes&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  CudaBytes& operator=(CudaBytes&& o) noexcept {
    if (this != &o) {
      Reset();
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~CudaBytes() { Reset(); }
  // Device memory on the calling thread's device.
  static absl::StatusOr<CudaBytes> Create(size_t bytes) {
    CudaBytes b;
    if constexpr (kKind == CudaMemoryKind::kPinnedHost) {
      GC_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&b.p_, bytes, cudaHostAllocPortable),
                              absl::StrCat("cudaHostAlloc(", bytes, ")"));
    } else {
      GC_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.p_, bytes), absl::StrCat("cudaMalloc(", bytes, ")"));
    }
    b.bytes_ = bytes;
    return b;
  }
  void* data() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void Reset() {
    if (p_ == nullptr) return;
    if constexpr (kKind == CudaMemoryKind::kPinnedHost) {
      (void)cudaFreeHost(p_);
    } else {
      (void)cudaFree(p_);
    }
    p_ = nullptr;
    bytes_ = 0;
  }
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

using PinnedBuffer = CudaBytes<CudaMemoryKind::kPinnedHost>;
using DeviceBytes = CudaBytes<CudaMemoryKind::kDevice>;

// A stream with a small pinned host buffer of its own (for staging request
// constants and small copies in, and reading result flags back, on that stream),
// on compute streams pinned bytes and as many device bytes for a whole small
// request's inputs, result and scratch (Backend::RunFromHost), and the two events
// that time an operation on it, made once with the stream. The device bytes are
// the stream's own, not the pool's: a pool shared by every stream serializes
// their allocations (a 4 KiB normalize from host bytes, H100: 29k calls/s from
// one thread, 12k from 16 with the pool; without it the streams overlap).
struct PooledStream {
  cudaStream_t stream = nullptr;
  PinnedBuffer small;     // kSmallPinnedBytes
  PinnedBuffer io;        // the pool's io_bytes; empty for copy and allocation streams
  DeviceBytes device_io;  // as many as io
  Event start, stop;
};

// Streams of one device, lent one per call; grows on demand. Thread-safe.
class StreamPool {
 public:
  static constexpr size_t kSmallPinnedBytes = 64 << 10;

  // Each stream has `io_bytes` of pinned memory for whole requests (0: none).
  explicit StreamPool(int device, size_t io_bytes = 0) : device_(device), io_bytes_(io_bytes) {}
  StreamPool(const StreamPool&) = delete;
  StreamPool& operator=(const StreamPool&) = delete;
  ~StreamPool() {
    ScopedDevice on_device(device_);
    for (PooledStream* s : all_) {
      (void)cudaStreamDestroy(s->stream);
      delete s;
    }
  }

  // Creates `n` streams up front (warm state). The calling thread's device must be device_.
  absl::Status Reserve(int n) {
    std::vector<PooledStream*> made;
    for (int i = 0; i < n; ++i) {
      GC_ASSIGN_OR_RETURN(PooledStream* const s, Make());
      made.push_back(s);
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (PooledStream* s : made) free_.push_back(s);
    return absl::OkStatus();
  }

  class Lease {
   public:
    Lease(StreamPool* pool, PooledStream* s) : pool_(pool), s_(s) {}
    Lease(Lease&& o) noexcept : pool_(o.pool_), s_(std::exchange(o.s_, nullptr)) {}
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (s_ != nullptr) pool_->Return(s_);
    }
    cudaStream_t stream() const { return s_->stream; }
    void* small() const { return s_->small.data(); }
    const PinnedBuffer& io() const { return s_->io; }
    const DeviceBytes& device_io() const { return s_->device_io; }
    const Event& start() const { return s_->start; }
    const Event& stop() const { return s_->stop; }
    // After a sticky error the stream is not handed to anyone again.
    void Discard() { s_ = nullptr; }

   private:
    StreamPool* pool_;
    PooledStream* s_;
  };

  // The calling thread's device must be device_.
  absl::StatusOr<Lease> Acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        PooledStream* s = free_.back();
        free_.pop_back();
        return Lease(this, s);
      }
    }
    GC_ASSIGN_OR_RETURN(PooledStream* const s, Make());
    return Lease(this, s);
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return all_.size();
  }

 private:
  absl::StatusOr<PooledStream*> Make() {
    auto* s = new PooledStream;
    cudaError_t e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      delete s;
      return CudaStatus(e, absl::StrCat("cuda:", device_, " cudaStreamCreate"));
    }
    // Undoes the stream when a later part cannot be made.
    const auto fail = [s](absl::Status status) {
      (void)cudaStreamDestroy(s->stream);
      delete s;
      return status;
    };
    absl::StatusOr<PinnedBuffer> small = PinnedBuffer::Create(kSmallPinnedBytes);
    if (!small.ok()) return fail(small.status());
    s->small = *std::move(small);
    if (io_bytes_ > 0) {
      absl::StatusOr<PinnedBuffer> io = PinnedBuffer::Create(io_bytes_);
      if (!io.ok()) return fail(io.status());
      s->io = *std::move(io);
      absl::StatusOr<DeviceBytes> device_io = DeviceBytes::Create(io_bytes_);
      if (!device_io.ok()) return fail(device_io.status());
      s->device_io = *std::move(device_io);
    }
    cudaError_t timing = s->start.Init(cudaEventDefault);
    if (timing == cudaSuccess) timing = s->stop.Init(cudaEventDefault);
    if (timing != cudaSuccess) {
      return fail(CudaStatus(timing, absl::StrCat("cuda:", device_, " cudaEventCreate")));
    }
    std::lock_guard<std::mutex> lock(mu_);
    all_.push_back(s);
    return s;
  }
  void Return(PooledStream* s) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(s);
  }

  const int device_;
  const size_t io_bytes_;
  mutable std::mutex mu_;
  std::vector<PooledStream*> all_;
  std::vector<PooledStream*> free_;
};

// The pinned staging pool: `total` bytes of pinned host memory cut into equal slots.
// Host <-> device copies take two slots (double buffering). Blocks while none are
// free; thread-safe.
class StagingPool {
 public:
  static absl::StatusOr<std::unique_ptr<StagingPool>> Create(uint64_t total_bytes) {
    // Slots of up to 8 MiB, at least 2 of them, at least 64 KiB each.
    constexpr uint64_t kMaxSlot = 8ull << 20, kMinSlot = 64ull << 10;
    uint64_t slot = std::min<uint64_t>(kMaxSlot, std::max<uint64_t>(kMinSlot, total_bytes / 2));
    slot = (slot + 4095) / 4096 * 4096;
    const uint64_t count = std::max<uint64_t>(2, total_bytes / slot);
    GC_ASSIGN_OR_RETURN(PinnedBuffer buffer, PinnedBuffer::Create(slot * count));
    auto pool = std::unique_ptr<StagingPool>(new StagingPool);
    pool->slot_bytes_ = slot;
    pool->buffer_ = std::move(buffer);
    for (uint64_t i = 0; i < count; ++i) {
      pool->free_.push_back(static_cast<char*>(pool->buffer_.data()) + i * slot);
    }
    return pool;
  }

  // Two slots, returned on destruction.
  class Pair {
   public:
    Pair(StagingPool* pool, char* a, char* b) : pool_(pool), slot_{a, b} {}
    Pair(const Pair&) = delete;
    Pair& operator=(const Pair&) = delete;
    ~Pair() { pool_->Release(slot_[0], slot_[1]); }
    char* slot(int i) const { return slot_[i & 1]; }

   private:
    StagingPool* pool_;
    char* slot_[2];
  };

  std::unique_ptr<Pair> AcquirePair() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return free_.size() >= 2; });
    char* a = free_.back();
    free_.pop_back();
    char* b = free_.back();
    free_.pop_back();
    return std::make_unique<Pair>(this, a, b);
  }

  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t total_bytes() const { return buffer_.bytes(); }

 private:
  StagingPool() = default;
  void Release(char* a, char* b) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(a);
      free_.push_back(b);
    }
    // Waiters find fewer than two slots free; the two given back make one pair:
    // one waiter can take it, so waking the others would only put them back to sleep.
    cv_.notify_one();
  }

  uint64_t slot_bytes_ = 0;
  PinnedBuffer buffer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char*> free_;
};

}  // namespace gpucompute::cuda
