#include "kernels/cuda/host_copy.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gpucompute::cuda {
namespace {

bool IsPinnedHost(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

// Pinned host memory on either side: one copy, no staging.
cudaError_t DirectCopy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                       cudaStream_t s) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, s);
  const cudaError_t w = cudaStreamSynchronize(s);
  return e != cudaSuccess ? e : w;
}

// The events that tell when each of the two staging slots was drained (or filled) by
// the DMA engine; made only for copies of more chunks than the slots overlap (a small
// copy, a batch of small requests included, waits on its stream instead and creates
// and destroys no event).
cudaError_t InitSlotEvents(Event (&slot_done)[2]) {
  cudaError_t e = slot_done[0].Init(cudaEventDisableTiming);
  if (e == cudaSuccess) e = slot_done[1].Init(cudaEventDisableTiming);
  return e;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostCopies>> HostCopies::Create(uint64_t staging_bytes) {
  GC_ASSIGN_OR_RETURN(std::unique_ptr<StagingPool> staging,
                      StagingPool::Create(std::max<uint64_t>(staging_bytes, 128 << 10)));
  return std::unique_ptr<HostCopies>(new HostCopies(std::move(staging)));
}

template <typename Copy>
absl::Status HostCopies::OnCopyStream(DeviceState& d, size_t bytes, absl::string_view what,
                                      Copy copy) {
  if (bytes == 0) return absl::OkStatus();
  InFlight in_flight(d);
  ScopedDevice on_device(d.ordinal);
  GC_DEV_TRY(d, on_device.error(), "cudaSetDevice");
  GC_ASSIGN_OR_RETURN(const StreamPool::Lease lease, d.copy->Acquire());
  GC_DEV_TRY(d, copy(lease), what);
  return absl::OkStatus();
}

// A small copy goes through the lent stream's own pinned bytes: no staging slots
// (shared by every copy of the server) and no events to create.
absl::Status HostCopies::ToArray(DeviceState& d, const void* src, size_t offset, size_t bytes,
                                 Array& dst) {
  return OnCopyStream(d, bytes, "copy to device", [&](const StreamPool::Lease& lease) {
    void* to = static_cast<char*>(dst.data()) + offset;
    if (bytes > StreamPool::kSmallPinnedBytes) return HostToDevice(to, src, bytes, lease.stream());
    std::memcpy(lease.small(), src, bytes);
    return DirectCopy(to, lease.small(), bytes, cudaMemcpyHostToDevice, lease.stream());
  });
}

absl::Status HostCopies::PiecesToArray(DeviceState& d, std::span<const HostPiece> pieces,
                                       size_t offset, Array& dst) {
  size_t bytes = 0;
  for (const HostPiece& piece : pieces) bytes += piece.bytes;
  return OnCopyStream(d, bytes, "copy to device", [&](const StreamPool::Lease& lease) {
    void* to = static_cast<char*>(dst.data()) + offset;
    if (bytes > StreamPool::kSmallPinnedBytes) return PiecesToDevice(to, pieces, lease.stream());
    // Small (a batch of small requests): gathered into the stream's own pinned bytes,
    // as ToArray does, rather than waiting for staging slots that large copies share.
    char* gathered = static_cast<char*>(lease.small());
    for (const HostPiece& piece : pieces) {
      std::memcpy(gathered, piece.data, piece.bytes);
      gathered += piece.bytes;
    }
    return DirectCopy(to, lease.small(), bytes, cudaMemcpyHostToDevice, lease.stream());
  });
}

absl::Status HostCopies::FromArray(DeviceState& d, const Array& src, size_t offset, size_t bytes,
                                   void* dst) {
  return OnCopyStream(d, bytes, "copy from device", [&](const StreamPool::Lease& lease) {
    const void* from = static_cast<const char*>(src.data()) + offset;
    if (bytes > StreamPool::kSmallPinnedBytes) return DeviceToHost(dst, from, bytes, lease.stream());
    const cudaError_t e =
        DirectCopy(lease.small(), from, bytes, cudaMemcpyDeviceToHost, lease.stream());
    if (e == cudaSuccess) std::memcpy(dst, lease.small(), bytes);
    return e;
  });
}

cudaError_t HostCopies::HostToDevice(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  if (IsPinnedHost(src)) return DirectCopy(dst, src, bytes, cudaMemcpyHostToDevice, s);
  const HostPiece piece{src, bytes};
  return PiecesToDevice(dst, std::span(&piece, 1), s);
}

// Chunks alternate between the two pinned slots; the CPU fills one (gathering
// from the pieces) while the DMA engine drains the other.
cudaError_t HostCopies::PiecesToDevice(void* dst, std::span<const HostPiece> pieces,
                                       cudaStream_t s) {
  size_t bytes = 0;
  for (const HostPiece& piece : pieces) bytes += piece.bytes;
  std::unique_ptr<StagingPool::Pair> pair = staging_->AcquirePair();
  const size_t chunk = staging_->slot_bytes();
  // A slot is reused (and its drain awaited) from the third chunk on.
  const bool reuses_slots = bytes > 2 * chunk;
  Event drained[2];
  cudaError_t e = reuses_slots ? InitSlotEvents(drained) : cudaSuccess;
  size_t piece = 0, piece_offset = 0;  // the gather cursor
  for (size_t off = 0, c = 0; e == cudaSuccess && off < bytes; off += chunk, ++c) {
    const size_t n = std::min(chunk, bytes - off);
    if (c >= 2) e = cudaEventSynchronize(drained[c & 1].get());
    if (e != cudaSuccess) break;
    char* slot = static_cast<char*>(pair->slot(static_cast<int>(c)));
    for (size_t filled = 0; filled < n;) {
      const size_t take = std::min(n - filled, pieces[piece].bytes - piece_offset);
      std::memcpy(slot + filled, static_cast<const char*>(pieces[piece].data) + piece_offset, take);
      filled += take;
      piece_offset += take;
      if (piece_offset == pieces[piece].bytes) ++piece, piece_offset = 0;
    }
    e = cudaMemcpyAsync(static_cast<char*>(dst) + off, slot, n, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && reuses_slots) e = cudaEventRecord(drained[c & 1].get(), s);
  }
  const cudaError_t w = cudaStreamSynchronize(s);  // before the slots go back to the pool
  return e != cudaSuccess ? e : w;
}

// The mirror image: chunk c+1 is in flight while chunk c is copied out.
cudaError_t HostCopies::DeviceToHost(void* dst, const void* src, size_t bytes, cudaStream_t s) {
  if (IsPinnedHost(dst)) return DirectCopy(dst, src, bytes, cudaMemcpyDeviceToHost, s);
  std::unique_ptr<StagingPool::Pair> pair = staging_->AcquirePair();
  const size_t chunk = staging_->slot_bytes();
  const size_t chunks = (bytes + chunk - 1) / chunk;
  // One chunk: the stream's synchronize is the wait for it.
  const bool overlapped = chunks > 1;
  Event filled[2];
  cudaError_t e = overlapped ? InitSlotEvents(filled) : cudaSuccess;
  const auto issue = [&](size_t c) {
    const size_t off = c * chunk;
    const size_t n = std::min(chunk, bytes - off);
    cudaError_t r = cudaMemcpyAsync(pair->slot(static_cast<int>(c)),
                                    static_cast<const char*>(src) + off, n,
                                    cudaMemcpyDeviceToHost, s);
    if (r == cudaSuccess && overlapped) r = cudaEventRecord(filled[c & 1].get(), s);
    return r;
  };
  if (e == cudaSuccess) e = issue(0);
  for (size_t c = 0; e == cudaSuccess && c < chunks; ++c) {
    if (c + 1 < chunks) e = issue(c + 1);  // its slot was emptied in iteration c - 1
    if (e == cudaSuccess) {
      e = overlapped ? cudaEventSynchronize(filled[c & 1].get()) : cudaStreamSynchronize(s);
    }
    if (e != cudaSuccess) break;
    const size_t off = c * chunk;
    std::memcpy(static_cast<char*>(dst) + off, pair->slot(static_cast<int>(c)),
                std::min(chunk, bytes - off));
  }
  const cudaError_t w = cudaStreamSynchronize(s);
  return e != cudaSuccess ? e : w;
}

absl::Status HostCopies::WarmUp(const std::shared_ptr<DeviceState>& d, uint64_t pool_prewarm_bytes) {
  const int64_t prewarm_bytes =
      static_cast<int64_t>(std::min<uint64_t>(pool_prewarm_bytes, d->memory_bytes / 4));
  const int64_t elements = std::max<int64_t>(prewarm_bytes / 8, 1 << 20);
  GC_ASSIGN_OR_RETURN(const std::shared_ptr<Array> array,
                      AllocateArray(d, DType::kFloat64, {elements}));
  std::vector<double> host(1 << 20, 1.5);
  const size_t bytes = host.size() * sizeof(double);
  GC_RETURN_IF_ERROR(ToArray(*d, host.data(), 0, bytes, *array));
  return FromArray(*d, *array, 0, bytes, host.data());
}

}  // namespace gpucompute::cuda
