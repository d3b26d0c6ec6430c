// sm_90, long rows read once from memory, each piece held in shared memory until its
// row's norm is out (normalize_plan.cuh: sm_90 rows past the TMA clusters).
// One persistent launch takes items of 37 KiB in order from an atomic counter. Each
// block keeps a ring of kSlots items in shared memory, every free slot loading by one
// TMA bulk copy: it reduces its items in the order taken and posts each item's partial
// (RowPartials::Post: the partial, then the row's count raised, waiting for no answer),
// and scales the oldest from shared memory once its row's norm is out, which frees its
// slot for the next load. A block sums a row's norm itself from the row's partials once
// all are posted, in a fixed order, so the norms do not depend on timing. Its
// bookkeeping (loads, posts, norms, waits) runs on a warp of its own, the keeper, which
// sums the oldest item's norm while the other warps reduce. Nothing is re-read: the
// chunked path reads every row twice from memory, the pipeline once from memory and
// once from L2, and the TMA clusters hold a row only up to 16 blocks' shared memory.
// Waiting must never depend on a block that cannot run. A block reduces every item it
// has taken before it waits for any norm, and waits without limit only once every item
// of the row has been taken. Before that it waits a bounded time, and only where the
// row's untaken items are fewer than the grid's slots; otherwise it defers the item:
// frees the slot, goes on, and scales the item from memory (L2 where it is still
// there) once its norm is out, the oldest first, at most one between two of its own; at
// the end every deferred item, whose rows are then all taken. So the launch makes
// progress with any number of resident blocks, beside any other kernel. Rows of more
// items than the grid holds (float32 past ~6.5e6 elements on 132 SMs) defer their first
// items; the policy takes only rows of up to half the grid's slots.
#pragma once

#include <cuda/ptx>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/normalize_ops.cuh"
#include "kernels/cuda/normalize_tile.cuh"  // HasClusters

namespace gpucompute::cuda {
namespace {

// Two slots a block, three blocks an SM, each block's bookkeeping on a warp of its own
// (the keeper stores no data, so its release of a partial waits for that one store, not
// for all of a scaling's stores), 256 threads beside it, and items of 37 KiB, the most
// that leaves three blocks an SM: a block's rounds are serial and slow (~16k cycles, 40%
// of them its stores draining), so each should carry as much as fits, and a block
// scales at most one item a round, so blocks, not bytes held, set the rate.
// H200, f64 L2 rows of 1e6: 37 KiB items 0.234-0.238 ms vs 32 KiB's 0.245-0.250; the keeper warp took 9-12% off f32 1e6.
struct HeldPolicy {
  static constexpr int kThreads = 256;                   // reduce and scale the slots
  static constexpr int kBlockThreads = kThreads + 32;    // and the keeper warp
  static constexpr int kSlots = 2;
  static constexpr int kBlocksPerSm = 3;
  static constexpr int64_t kItemBytes = 37 << 10;
  // The policy takes rows of at most half the grid's slots: longer rows keep more slots
  // waiting for their norms.
  // H200, f32 SUM rows of 4e6 (489 items, 792 slots): 0.351-0.353 ms vs the chunks' 0.312-0.317.
  static constexpr int64_t kRowShareOfSlots = 2;
  static constexpr long long kBoundedWaitCycles = 1 << 15;  // ~16 us: then defer
};

template <typename T>
constexpr int64_t kHeldItem = HeldPolicy::kItemBytes / static_cast<int64_t>(sizeof(T));

constexpr int64_t kNoItem = -1;

template <typename T, NormKind kNorm>
struct HeldAgent {
  using Op = NormOp<kNorm>;
  using Acc = typename Op::Acc;
  using VT = typename Vec16<T>::type;
  static constexpr int V = Vec16<T>::kCount;
  static constexpr int64_t kItem = kHeldItem<T>;
  static constexpr int kSlots = HeldPolicy::kSlots;
  static constexpr int kThreads = HeldPolicy::kThreads;
  static constexpr int kWarps = kThreads / 32;

  struct Shared {
    Acc warp_part[kWarps];    // the item just reduced, a partial a warp
    uint64_t loaded[kSlots];  // mbarrier of each slot: its item has landed
    int64_t slot_item[kSlots];
    int64_t issued;           // items taken (slot = index % kSlots)
    int64_t deferred;         // the deferred item to scale now, or kNoItem
    int action;               // for the oldest item: kScale, kDefer, kKeep
    int64_t norm_row;         // the row of the norm fetched last (the one scaled by)
    double norm;
    int64_t head, tail;       // the lead's deferred list, here rather than in every thread's registers
  };
  enum Action { kKeep, kScale, kDefer };

  const T* in;
  T* out;
  int64_t cols;
  int64_t items_per_row;  // n
  int64_t total;          // rows * n
  RowPartials<T, kNorm> row_partials;  // posted: each block sums a row's norm itself
  unsigned long long* next_item;       // the counter, zeroed by the launcher
  int64_t* deferred_next;              // total: each block's deferred items, linked oldest first
  NormalizeResult* result;

  __device__ void Run(Shared& sh, T* ring) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace ptx = ::cuda::ptx;
    // Threads below kThreads reduce and scale; the keeper warp above them posts,
    // decides and sums norms, its first lane (the lead) alone taking items, issuing
    // loads and keeping the deferred list. Every thread keeps the counts.
    const bool keeper = threadIdx.x >= kThreads;
    const bool lead = threadIdx.x == kThreads;
    int64_t issued = 0, reduced = 0, done = 0;
    bool exhausted = false;
    int64_t pending = kNoItem;  // in a register: the atomic's answer is awaited only at its use
    int64_t &head = sh.head, &tail = sh.tail;
    if (lead) {
      head = tail = sh.norm_row = kNoItem;
      for (int k = 0; k < kSlots; ++k) ptx::mbarrier_init(&sh.loaded[k], 1);
      ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
    }
    __syncthreads();
    for (;;) {
      if (lead) {
        // Fill the free slots: the item already taken, then the next ones in one batch.
        int64_t taken = issued;
        if (pending != kNoItem && pending < total) IssueLoad(sh, ring, static_cast<int>(taken++ % kSlots), pending);
        const int64_t free = kSlots - (taken - done);
        if (!exhausted && free > 0 && (pending == kNoItem || pending < total)) {
          const int64_t first = static_cast<int64_t>(atomicAdd(next_item, static_cast<unsigned long long>(free)));
          for (int64_t j = 0; j < free && first + j < total; ++j) {
            IssueLoad(sh, ring, static_cast<int>(taken++ % kSlots), first + j);
          }
        }
        pending = kNoItem;
        sh.issued = taken;
      }
      __syncthreads();
      exhausted = exhausted || sh.issued < done + kSlots;  // the batch ran past the last item
      issued = sh.issued;
      if (done == issued) break;  // every item taken and done
      int64_t posting = kNoItem;  // the item reduced in this round
      if (reduced < issued) {
        const int slot = static_cast<int>(reduced % kSlots);
        posting = sh.slot_item[slot];
        if (!keeper) {
          while (!ptx::mbarrier_try_wait_parity(&sh.loaded[slot], static_cast<uint32_t>((reduced / kSlots) & 1))) {
          }
          Acc part = SlotReduce(ring + slot * kItem, ItemVectors(posting, posting / items_per_row));
          part = ButterflyCombine<Op, 32>(part, ~0u);
          if (threadIdx.x % 32 == 0) sh.warp_part[threadIdx.x / 32] = part;
        }
        ++reduced;
      }
      const int oldest = static_cast<int>(done % kSlots);
      if (keeper) FetchNorm(sh, sh.slot_item[oldest] / items_per_row);  // meanwhile, where it is out already
      __syncthreads();  // the warps' partials are in
      if (keeper) Keep(sh, oldest, posting, reduced == issued, exhausted, issued - done, pending);
      __syncthreads();
      const int action = sh.action;
      if (action == kScale && !keeper) {
        const int64_t item = sh.slot_item[oldest];
        const int64_t row = item / items_per_row;
        const T* slot = ring + oldest * kItem;
        const int nvec = ItemVectors(item, row);
        const double norm = sh.norm;
        if (FastNorm<T, kNorm>(norm)) {  // else never divided by: the row stays unwritten
          VT* dst = reinterpret_cast<VT*>(out + ItemBegin(item, row));
          bool overflow = false;
          WithRowScale<T>(norm, [&](auto scale) {
            overflow = SharedVectorsScale<T, kNorm, kThreads, /*kStreaming=*/true>(
                reinterpret_cast<const VT*>(slot), dst, nvec, scale);
          });
          if (overflow) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
        }
      }
      if (action != kKeep) ++done;
      if (sh.deferred != kNoItem) ScaleDeferred(sh.deferred, sh);
      __syncthreads();  // the freed slot is read by every thread before its next load
    }
    // Every item is taken: each deferred row's norm comes.
    for (;;) {
      if (lead) {
        sh.deferred = head;
        if (head != kNoItem) {
          while (!row_partials.AllPosted(head / items_per_row, items_per_row)) __nanosleep(128);
          PopDeferred(head, tail);
        }
      }
      __syncthreads();
      if (sh.deferred == kNoItem) break;
      ScaleDeferred(sh.deferred, sh);
    }
#endif
  }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __device__ void IssueLoad(Shared& sh, T* ring, int slot, int64_t item) const {
    namespace ptx = ::cuda::ptx;
    const int64_t row = item / items_per_row;
    const uint32_t bytes = static_cast<uint32_t>(ItemVectors(item, row) * 16);
    sh.slot_item[slot] = item;
    (void)ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &sh.loaded[slot], bytes);
    ptx::cp_async_bulk(ptx::space_cluster, ptx::space_global, ring + slot * kItem, in + ItemBegin(item, row), bytes,
                       &sh.loaded[slot]);
  }
#endif

  __device__ int64_t ItemBegin(int64_t item, int64_t row) const {
    return row * cols + (item - row * items_per_row) * kItem;
  }
  __device__ int ItemVectors(int64_t item, int64_t row) const {
    return static_cast<int>(min(kItem, row * cols + cols - ItemBegin(item, row)) / V);
  }

  __device__ Acc SlotReduce(const T* slot, int nvec) const {
    const VT* v = reinterpret_cast<const VT*>(slot);
    Acc a[2] = {Op::Identity(), Op::Identity()};
    int k = threadIdx.x;
    for (; k + kThreads < nvec; k += 2 * kThreads) {
      a[0] = AccumulateVec<T, Op>(a[0], v[k]);
      a[1] = AccumulateVec<T, Op>(a[1], v[k + kThreads]);
    }
    if (k < nvec) a[0] = AccumulateVec<T, Op>(a[0], v[k]);
    return Op::Combine(a[0], a[1]);
  }

  // The keeper warp, once a round: the lead posts the item just reduced, then decides
  // for the oldest item: scaled once its row's norm is out; while nothing else can move
  // (`all_reduced` and no free slot, or no items left), waited for or deferred.
  __device__ void Keep(Shared& sh, int oldest, int64_t posting, bool all_reduced, bool exhausted, int64_t held,
                       int64_t& pending) const {
    int64_t &head = sh.head, &tail = sh.tail;
    const int64_t row = sh.slot_item[oldest] / items_per_row;
    const Acc part = posting != kNoItem ? ItemPartial(sh) : Op::Identity();
    if (threadIdx.x == kThreads && posting != kNoItem) {
      const int64_t posting_row = posting / items_per_row;
      row_partials.Post(posting_row, posting - posting_row * items_per_row, items_per_row, part);
    }
    const bool out = FetchNorm(sh, row);
    int action = kKeep;
    if (threadIdx.x == kThreads) {
      const bool stuck = all_reduced && (exhausted || held == kSlots);
      action = out ? kScale : !stuck ? kKeep : AwaitNorm(row) ? kScale : kDefer;
      if (action == kDefer) Defer(sh.slot_item[oldest], head, tail);
      // The freed slot's next item, taken now: its latency hides behind the scaling, and
      // no wait for a norm comes before its load is issued and it is reduced.
      if (action != kKeep && !exhausted) pending = static_cast<int64_t>(atomicAdd(next_item, 1ull));
      sh.deferred = kNoItem;
      if (head != kNoItem && row_partials.AllPosted(head / items_per_row, items_per_row)) {
        sh.deferred = PopDeferred(head, tail);
      }
      sh.action = action;
    }
    action = __shfl_sync(~0u, action, 0);
    if (action == kScale && !out) FetchNorm(sh, row);  // came while awaited
  }

  // The keeper warp: the item's partial from its warps' by a fixed tree (the same bits in
  // every run), three steps where a serial sum of the warps' took seven.
  __device__ Acc ItemPartial(const Shared& sh) const {
    static_assert(kWarps <= 8);
    const int lane = static_cast<int>(threadIdx.x % 32);
    return ButterflyCombine<Op, 32, /*kFirst=*/4>(lane < kWarps ? sh.warp_part[lane] : Op::Identity(), ~0u);
  }

  // The keeper warp: row's norm into sh.norm where every partial of it is in, summed
  // in a fixed order (the same bits in every block).
  __device__ bool FetchNorm(Shared& sh, int64_t row) const {
    if (row == sh.norm_row) return true;
    bool out = false;
    if (threadIdx.x == kThreads) out = row_partials.AllPosted(row, items_per_row);
    if (!__shfl_sync(~0u, out, 0)) return false;
    const double norm = row_partials.WarpNorm(row, items_per_row);
    __syncwarp();  // every lane compared sh.norm_row
    if (threadIdx.x == kThreads) {
      sh.norm = norm;
      sh.norm_row = row;
    }
    __syncwarp();
    return true;
  }

  // The lead, every item it took reduced: whether the row's norm came (else defer).
  __device__ bool AwaitNorm(int64_t row) const {
    const unsigned long long row_end = static_cast<unsigned long long>((row + 1) * items_per_row);
    const unsigned long long grid_slots = static_cast<unsigned long long>(gridDim.x) * kSlots;
    const long long start = clock64();
    bool bounded = true;
    while (!row_partials.AllPosted(row, items_per_row)) {
      if (bounded) {
        const unsigned long long taken = *reinterpret_cast<const volatile unsigned long long*>(next_item);
        if (taken >= row_end) {
          bounded = false;  // every item of the row is with a running block, which reduces it first
        } else if (row_end - taken > grid_slots || clock64() - start > HeldPolicy::kBoundedWaitCycles) {
          return false;
        }
      }
      __nanosleep(64);
    }
    return true;
  }

  // The lead's list of deferred items: appended, and its oldest unlinked.
  __device__ void Defer(int64_t item, int64_t& head, int64_t& tail) const {
    deferred_next[item] = kNoItem;
    if (tail == kNoItem) head = item;
    else deferred_next[tail] = item;
    tail = item;
  }
  __device__ int64_t PopDeferred(int64_t& head, int64_t& tail) const {
    const int64_t item = head;
    head = item == tail ? kNoItem : deferred_next[item];
    if (head == kNoItem) tail = kNoItem;
    return item;
  }

  // A deferred item, re-read and scaled by every thread (its norm is out).
  __device__ void ScaleDeferred(int64_t item, Shared& sh) const {
    const int64_t row = item / items_per_row;
    __syncthreads();  // sh.norm was read
    if (threadIdx.x >= kThreads) FetchNorm(sh, row);
    __syncthreads();
    const double norm = sh.norm;
    if (!FastNorm<T, kNorm>(norm)) return;
    const int64_t begin = ItemBegin(item, row);
    const int64_t end = begin + int64_t{ItemVectors(item, row)} * V;
    bool overflow = false;
    WithRowScale<T>(norm, [&](auto scale) { overflow = BlockScaleRange<T, true, true>(in, out, begin, end, scale); });
    if (overflow) atomicMin(&result->bad_row, static_cast<unsigned long long>(row));
  }
};

template <typename T, NormKind kNorm>
__global__ void __launch_bounds__(HeldPolicy::kBlockThreads, HeldPolicy::kBlocksPerSm)
    HeldKernel(const T* in, T* out, int64_t cols, int64_t items_per_row, int64_t total,
               RowPartials<T, kNorm> row_partials, unsigned long long* next_item, int64_t* deferred_next,
               NormalizeResult* result) {
  using Agent = HeldAgent<T, kNorm>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ typename Agent::Shared sh;
  Agent{in, out, cols, items_per_row, total, row_partials, next_item, deferred_next, result}.Run(
      sh, reinterpret_cast<T*>(smem));
}

// Whether the path takes these rows: whole 16-byte vectors (every row starts aligned).
template <typename T>
constexpr bool HeldFits(int64_t cols) {
  return cols * static_cast<int64_t>(sizeof(T)) % 16 == 0;
}

// Whether the policy takes these rows on this device (HeldPolicy::kRowShareOfSlots).
template <typename T>
cudaError_t HeldByDefault(int64_t cols, bool* yes) {
  int device = 0, sms = 0;
  GC_TRY(cudaGetDevice(&device));
  GC_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t slots = int64_t{sms} * HeldPolicy::kBlocksPerSm * HeldPolicy::kSlots;
  *yes = HeldFits<T>(cols) && CeilDiv(cols, kHeldItem<T>) * HeldPolicy::kRowShareOfSlots <= slots;
  return cudaSuccess;
}

// Launches the path; *launched false (nothing run) where the rows or pointers are not
// 16-byte aligned or the device has no TMA (before sm_90): the caller runs the default.
template <typename T, NormKind kNorm>
cudaError_t LaunchHeld(const T* in, T* out, int64_t rows, int64_t cols, NormalizeResult* result,
                       const LaunchEnv& env, bool* launched) {
  *launched = false;
  bool tma = false;
  GC_TRY(HasClusters(&tma));
  if (!tma || !HeldFits<T>(cols) || !Aligned16(in) || !Aligned16(out)) return cudaSuccess;
  const int64_t n = CeilDiv(cols, kHeldItem<T>);
  const int64_t total = rows * n;
  RowPartialsScratch<T, kNorm> s;
  GC_TRY(s.Allocate(rows, n, /*with_counter=*/true, static_cast<size_t>(total) * sizeof(int64_t), result, env));
  const unsigned grid = GridFor(CeilDiv(total, HeldPolicy::kSlots), env.sm_count, HeldPolicy::kBlocksPerSm);
  constexpr int64_t smem = HeldPolicy::kSlots * HeldPolicy::kItemBytes;
  GC_TRY(AllowSharedLimit(HeldKernel<T, kNorm>, smem));
  HeldKernel<T, kNorm><<<grid, HeldPolicy::kBlockThreads, smem, env.stream>>>(
      in, out, cols, n, total, s.parts, s.counter, static_cast<int64_t*>(s.extra), result);
  GC_CHECK_LAUNCH();
  *launched = true;
  return cudaSuccess;
}

}  // namespace
}  // namespace gpucompute::cuda
