// Lomb-Scargle by type-1 NUFFTs on the GPU (kernels/lombscargle_nufft.h has the
// algorithm), everything after the inputs in float64, the normalized weights too:
//
//   LaunchLombScargleNufft
//     -> LaunchLombScarglePrep (lombscargle.cu): normalized w, w y (float64), Y and YY per row
//     -> SpreadKernel<T>: one thread per (sample, transform); each adds its value times
//        the kernel at the w grid points around it (atomicAdd on the transform's grid),
//        and sums |w y| per row for the error bound
//     -> DeconvolveKernel: 1 / p(|m|) by the kernel's quadrature
//     -> cuFFT: batch x 3 inverse double-complex transforms in place
//     -> PowerKernel<T>: per (row, frequency) the modes, the power (or amplitude), its
//        error bound, and the row's largest |value| (atomicMax on the bits of
//        non-negative doubles, one per thread and row, one per warp where the warp
//        shares the row)
//     -> FlagKernel: frequencies whose bound passes the accuracy, into a list
//     -> RedoKernel<T>: one warp per listed frequency, the direct sums in float64
#include <cuda_runtime.h>
#include <cufft.h>

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/lombscargle_power.h"

namespace gpucompute::cuda {
namespace {

struct NufftPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kBlocksPerSm = 8;
};
constexpr int kTransforms = 3;  // w at f, w y at f, w at 2 f
constexpr int kWarp = 32;

struct NufftScratch {
  double2* grids;               // (B * 3, n)
  double* inverse_p;            // largest_mode + 1
  double* bound;                // (B, M)
  unsigned long long* largest;  // (B): bits of the row's largest |power| or |amplitude|
  double* wy_abs_sum;           // (B)
  LombScargleRowStats* stats;   // (B)
  double* wn;                   // (B, N)
  double* wy;                   // (B, N)
  int64_t* redo;                // (B * M)
  unsigned long long* redo_count;
  LombScargleResult* chunk_result;
};

size_t AlignUp(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

// Carves `base` into the arrays above; returns the bytes used (base null: just count).
size_t Layout(const LombScargleArgs& a, const LombScargleNufftArgs& u, char* base,
              NufftScratch* s) {
  const int64_t b = u.chunk_rows, bm = u.chunk_rows * a.frequencies;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    char* p = base == nullptr ? nullptr : base + at;
    at += AlignUp(bytes);
    return p;
  };
  s->grids = reinterpret_cast<double2*>(take(sizeof(double2) * kTransforms * b * u.grid));
  s->inverse_p = reinterpret_cast<double*>(take(sizeof(double) * (u.largest_mode + 1)));
  s->bound = reinterpret_cast<double*>(take(sizeof(double) * bm));
  s->largest = reinterpret_cast<unsigned long long*>(take(sizeof(unsigned long long) * b));
  s->wy_abs_sum = reinterpret_cast<double*>(take(sizeof(double) * b));
  s->stats = reinterpret_cast<LombScargleRowStats*>(take(sizeof(LombScargleRowStats) * b));
  s->wn = reinterpret_cast<double*>(take(sizeof(double) * b * a.samples));
  s->wy = reinterpret_cast<double*>(take(sizeof(double) * b * a.samples));
  s->redo = reinterpret_cast<int64_t*>(take(sizeof(int64_t) * bm));
  s->redo_count = reinterpret_cast<unsigned long long*>(take(sizeof(unsigned long long)));
  s->chunk_result = reinterpret_cast<LombScargleResult*>(take(sizeof(LombScargleResult)));
  return at;
}

template <typename T>
struct NufftParams {
  const T* x;
  int64_t x_batch_stride;  // 0 when the rows share x
  const double* wn;
  const double* wy;
  int64_t batch, n, m;
  LombScargleNufftArgs u;
};

__device__ __forceinline__ double KernelAt(double z, double beta) {
  return exp(beta * (sqrt(1 - z * z) - 1));
}

template <typename T>
__global__ void __launch_bounds__(NufftPolicy::kThreads)
    SpreadKernel(const __grid_constant__ NufftParams<T> p, NufftScratch s) {
  const double n = static_cast<double>(p.u.grid);
  const double shift = p.u.f_start + static_cast<double>(p.u.half) * p.u.f_step;
  const double turns_per_x = p.u.f_step * 0.15915494309189535;  // 1 / 2 pi
  const double half_width = p.u.width / 2.0;
  for (int64_t task = blockIdx.y; task < p.batch * kTransforms; task += gridDim.y) {
    const int64_t row = task / kTransforms;
    const int transform = static_cast<int>(task % kTransforms);
    double2* grid = s.grids + task * p.u.grid;
    for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x; base < p.n;
         base += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t j = base + threadIdx.x;
      const bool in = j < p.n;
      const double w = in ? p.wn[row * p.n + j] : 0.0;
      const double wy = in ? p.wy[row * p.n + j] : 0.0;
      // Per row, sum |w y| once (transform 1), a warp at a time.
      if (transform == 1) {
        double a = fabs(wy);
        for (int offset = kWarp / 2; offset > 0; offset /= 2) a += __shfl_down_sync(~0u, a, offset);
        if ((threadIdx.x & (kWarp - 1)) == 0 && a != 0) atomicAdd(&s.wy_abs_sum[row], a);
      }
      if (!in || w == 0) continue;
      const double x = static_cast<double>(p.x[row * p.x_batch_stride + j]);
      double turns = turns_per_x * x;
      if (transform == 2) turns *= 2;
      turns -= floor(turns);
      if (!isfinite(turns)) continue;  // x not finite (a stored operand is not checked)
      const double position = fmin(turns * n, n - 1e-9);
      double sn, cs;
      sincos(shift * x, &sn, &cs);
      if (transform == 2) {  // the phase doubled: (c + i s)^2
        const double c2 = cs * cs - sn * sn;
        sn = 2 * cs * sn;
        cs = c2;
      }
      const double coefficient = transform == 1 ? wy : w;
      const double re = coefficient * cs, im = coefficient * sn;
      const int64_t first = static_cast<int64_t>(ceil(position - half_width));
      for (int l = 0; l < p.u.width; ++l) {
        const double z = fmin(1.0, fabs((first + l - position) / half_width));
        const double k = KernelAt(z, p.u.beta);
        int64_t index = first + l;
        index += index < 0 ? p.u.grid : (index >= p.u.grid ? -p.u.grid : 0);
        atomicAdd(&grid[index].x, re * k);
        atomicAdd(&grid[index].y, im * k);
      }
    }
  }
}

__global__ void __launch_bounds__(NufftPolicy::kThreads)
    DeconvolveKernel(const __grid_constant__ LombScargleNufftArgs u, double* inverse_p) {
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       m <= u.largest_mode; m += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double p = 0;
    for (int q = 0; q < u.nodes; ++q) p += u.node_weight[q] * cos(static_cast<double>(m) * u.node_angle[q]);
    inverse_p[m] = 1 / p;
  }
}

struct PowerOptions {
  bool normalize, floating_mean, amplitude;
};

// The row's largest |value| as the bits of a non-negative double (ordered as the
// doubles are, NaN above all): each thread keeps its current row's, and a warp
// whose threads share one row adds one atomicMax for all. One per frequency, all
// on one address, serialized in L2 (~0.6 ms at 1e6 frequencies).
__device__ __forceinline__ void AddLargest(int64_t row, unsigned long long bits, NufftScratch s) {
  const int64_t row0 = __shfl_sync(~0u, row, 0);
  if (__all_sync(~0u, row == row0)) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const unsigned long long other = __shfl_xor_sync(~0u, bits, offset);
      bits = other > bits ? other : bits;
    }
    if ((threadIdx.x & (kWarp - 1)) == 0 && row >= 0) atomicMax(&s.largest[row], bits);
  } else if (row >= 0) {
    atomicMax(&s.largest[row], bits);
  }
}

template <typename T>
__global__ void __launch_bounds__(NufftPolicy::kThreads)
    PowerKernel(const __grid_constant__ NufftParams<T> p, NufftScratch s, PowerOptions o, T* out) {
  int64_t held_row = -1;  // the row whose largest |value| this thread holds, if any
  unsigned long long held = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.batch * p.m;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / p.m, k = i % p.m;
    const int64_t mode = k - p.u.half;
    const int64_t index = mode < 0 ? mode + p.u.grid : mode;
    const double inverse = s.inverse_p[mode < 0 ? -mode : mode];
    const double2* grids = s.grids + row * kTransforms * p.u.grid + index;
    const double2 f1 = grids[0], f2 = grids[p.u.grid], f3 = grids[2 * p.u.grid];
    const Sums sums = SumsFromTransforms(f1.x * inverse, f1.y * inverse, f2.x * inverse,
                                         f2.y * inverse, f3.x * inverse, f3.y * inverse);
    const PowerSettings settings{s.stats[row].y_sum, s.stats[row].yy_sum, p.n, o.normalize,
                                 o.floating_mean, o.amplitude};
    const SumErrors errors{p.u.sum_error, p.u.sum_error * s.wy_abs_sum[row]};
    double bound;
    const PeriodogramValue value = ValueOf(sums, settings, &errors, &bound);
    StoreValue(value, o.amplitude, i, out);
    s.bound[i] = bound;
    const auto bits = static_cast<unsigned long long>(
        __double_as_longlong(ResolvedMagnitude(value, o.amplitude, bound)));
    if (row != held_row) {
      if (held_row >= 0) atomicMax(&s.largest[held_row], held);
      held_row = row;
      held = bits;
    } else {
      held = bits > held ? bits : held;
    }
  }
  AddLargest(held_row, held, s);  // every thread of the block gets here
}

__global__ void __launch_bounds__(NufftPolicy::kThreads)
    FlagKernel(int64_t batch, int64_t m, double threshold, NufftScratch s) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < batch * m;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double largest = __longlong_as_double(static_cast<long long>(s.largest[i / m]));
    if (!(s.bound[i] <= threshold * largest)) s.redo[atomicAdd(s.redo_count, 1ull)] = i;
  }
}

template <typename T>
__global__ void __launch_bounds__(NufftPolicy::kThreads)
    RedoKernel(const __grid_constant__ NufftParams<T> p, NufftScratch s, PowerOptions o, T* out) {
  const int lane = threadIdx.x & (kWarp - 1);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  const int64_t count = static_cast<int64_t>(*s.redo_count);
  for (int64_t e = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; e < count;
       e += warps) {
    const int64_t i = s.redo[e];
    const int64_t row = i / p.m, k = i % p.m;
    const double f = p.u.f_start + static_cast<double>(k) * p.u.f_step;
    double sum[7] = {};  // cc, ss, cs, yc, ys, c, s
    for (int64_t j = lane; j < p.n; j += kWarp) {
      const double w = p.wn[row * p.n + j];
      const double wy = p.wy[row * p.n + j];
      double sn, cs;
      sincos(f * static_cast<double>(p.x[row * p.x_batch_stride + j]), &sn, &cs);
      sum[0] += w * cs * cs;
      sum[1] += w * sn * sn;
      sum[2] += w * cs * sn;
      sum[3] += wy * cs;
      sum[4] += wy * sn;
      sum[5] += w * cs;
      sum[6] += w * sn;
    }
#pragma unroll
    for (int v = 0; v < 7; ++v) {
      for (int offset = kWarp / 2; offset > 0; offset /= 2) sum[v] += __shfl_down_sync(~0u, sum[v], offset);
    }
    if (lane == 0) {
      const PowerSettings settings{s.stats[row].y_sum, s.stats[row].yy_sum, p.n, o.normalize,
                                   o.floating_mean, o.amplitude};
      const Sums sums{sum[0], sum[1], sum[2], sum[3], sum[4], sum[5], sum[6]};
      StoreValue(ValueOf(sums, settings), o.amplitude, i, out);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(NufftPolicy::kThreads)
    EvenCheckKernel(const T* freqs, int64_t m, double tolerance, unsigned long long* first) {
  const double start = static_cast<double>(freqs[0]), last = static_cast<double>(freqs[m - 1]);
  const double step = (last - start) / static_cast<double>(m - 1);
  const double allowed = tolerance * fmax(fabs(start), fabs(last));
  // A thread's first uneven k is its least (k only grows); one atomic per block, not
  // one per uneven frequency (1e6 of them on one address took ~0.7 ms on an H100).
  unsigned long long mine = kNoIndex;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x + 1; k + 1 < m;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!(fabs(static_cast<double>(freqs[k]) - (start + static_cast<double>(k) * step)) <= allowed)) {
      mine = static_cast<unsigned long long>(k);
      break;
    }
  }
  using BlockReduce = cub::BlockReduce<unsigned long long, NufftPolicy::kThreads>;
  __shared__ typename BlockReduce::TempStorage reduce;
  const unsigned long long block_first = BlockReduce(reduce).Reduce(mine, ::cuda::minimum<>{});
  if (threadIdx.x == 0 && block_first != kNoIndex) atomicMin(first, block_first);
}

// The bad-weights row of a chunk starting at row `first`, into the launch's result.
__global__ void MergeResultKernel(const LombScargleResult* chunk, int64_t first,
                                  LombScargleResult* result) {
  if (chunk->bad_batch != kNoIndex) {
    atomicMin(&result->bad_batch, chunk->bad_batch + static_cast<unsigned long long>(first));
  }
}

// The rows [first, first + rows) of `a` as a batch of their own.
LombScargleArgs ChunkOf(DType dtype, const LombScargleArgs& a, int64_t first, int64_t rows) {
  const size_t es = ElementSize(dtype);
  const int64_t row_bytes = a.samples * static_cast<int64_t>(es);
  LombScargleArgs c = a;
  c.batch = rows;
  c.x = static_cast<const char*>(a.x) + (a.x_batched ? first * row_bytes : 0);
  c.y = static_cast<const char*>(a.y) + first * row_bytes;
  if (a.weights != nullptr) {
    c.weights = static_cast<const char*>(a.weights) + (a.weights_batched ? first * row_bytes : 0);
  }
  const int64_t values = a.amplitude ? 2 : 1;  // per frequency
  c.out = static_cast<char*>(a.out) + first * a.frequencies * values * static_cast<int64_t>(es);
  return c;
}

template <typename T>
cudaError_t LaunchT(const LombScargleArgs& a, const LombScargleNufftArgs& u, cufftHandle fft,
                    const NufftScratch& s, LombScargleResult* result, const LaunchEnv& env) {
  GC_TRY(LaunchLombScarglePrep(sizeof(T) == 4 ? DType::kFloat32 : DType::kFloat64, a, s.wn, s.wy,
                               s.stats, result, env));
  GC_TRY(cudaMemsetAsync(s.grids, 0, sizeof(double2) * kTransforms * a.batch * u.grid, env.stream));
  GC_TRY(cudaMemsetAsync(s.largest, 0, sizeof(unsigned long long) * a.batch, env.stream));
  GC_TRY(cudaMemsetAsync(s.wy_abs_sum, 0, sizeof(double) * a.batch, env.stream));
  GC_TRY(cudaMemsetAsync(s.redo_count, 0, sizeof(unsigned long long), env.stream));
  const NufftParams<T> p{static_cast<const T*>(a.x), a.x_batched ? a.samples : 0, s.wn, s.wy,
                         a.batch, a.samples, a.frequencies, u};
  constexpr int kThreads = NufftPolicy::kThreads;
  {
    const int64_t tasks = a.batch * kTransforms;
    const unsigned gy = static_cast<unsigned>(std::min<int64_t>(tasks, 65535));
    // About kBlocksPerSm blocks per SM over all tasks.
    const int64_t per_task = CeilDiv(a.samples, kThreads);
    const int64_t share = std::max<int64_t>(1, int64_t{NufftPolicy::kBlocksPerSm} * env.sm_count / tasks);
    const unsigned gx = static_cast<unsigned>(std::min(per_task, share));
    SpreadKernel<T><<<dim3(gx, gy), kThreads, 0, env.stream>>>(p, s);
    GC_CHECK_LAUNCH();
  }
  DeconvolveKernel<<<GridFor(CeilDiv(u.largest_mode + 1, kThreads), env.sm_count, NufftPolicy::kBlocksPerSm),
                     kThreads, 0, env.stream>>>(u, s.inverse_p);
  GC_CHECK_LAUNCH();
  if (cufftExecZ2Z(fft, reinterpret_cast<cufftDoubleComplex*>(s.grids),
                   reinterpret_cast<cufftDoubleComplex*>(s.grids), CUFFT_INVERSE) != CUFFT_SUCCESS) {
    return cudaErrorUnknown;  // cuFFT refused to enqueue: not a sticky device error
  }
  const PowerOptions o{a.normalize, a.floating_mean, a.amplitude};
  const unsigned blocks = GridFor(CeilDiv(a.batch * a.frequencies, kThreads), env.sm_count,
                                  NufftPolicy::kBlocksPerSm);
  PowerKernel<T><<<blocks, kThreads, 0, env.stream>>>(p, s, o, static_cast<T*>(a.out));
  GC_CHECK_LAUNCH();
  FlagKernel<<<blocks, kThreads, 0, env.stream>>>(a.batch, a.frequencies, u.redo_threshold, s);
  GC_CHECK_LAUNCH();
  RedoKernel<T><<<GridFor(CeilDiv(a.batch * a.frequencies, kThreads / kWarp), env.sm_count,
                          NufftPolicy::kBlocksPerSm),
                  kThreads, 0, env.stream>>>(p, s, o, static_cast<T*>(a.out));
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

}  // namespace

size_t LombScargleNufftScratchBytes(const LombScargleArgs& args,
                                    const LombScargleNufftArgs& nufft) {
  NufftScratch s;
  return Layout(args, nufft, nullptr, &s);
}

cudaError_t LaunchLombScargleNufft(DType dtype, const LombScargleArgs& a,
                                   const LombScargleNufftArgs& u, int fft, void* scratch,
                                   LombScargleResult* result, const LaunchEnv& env) {
  GC_REQUIRE(result != nullptr && scratch != nullptr);
  GC_REQUIRE(a.batch >= 1 && a.samples >= 1 && a.frequencies >= 1);
  GC_REQUIRE(a.x != nullptr && a.y != nullptr && a.out != nullptr);
  GC_REQUIRE(u.width >= 2 && u.width <= 16 && u.grid >= 2 * a.frequencies && u.grid >= 2 * u.width);
  GC_REQUIRE(u.nodes >= 1 && u.nodes <= kNufftMaxNodes);
  GC_REQUIRE(u.chunk_rows >= 1 && u.chunk_rows <= a.batch);
  NufftScratch s;
  Layout(a, u, static_cast<char*>(scratch), &s);
  GC_TRY(cudaMemsetAsync(result, 0xff, sizeof(LombScargleResult), env.stream));
  // Chunks of chunk_rows rows (the FFT plan's batch); the last one ends at the last row,
  // overlapping the one before rather than running short: those rows come out the same.
  for (int64_t start = 0; start < a.batch; start += u.chunk_rows) {
    const int64_t first = std::min(start, a.batch - u.chunk_rows);
    const LombScargleArgs chunk = ChunkOf(dtype, a, first, u.chunk_rows);
    GC_TRY(dtype == DType::kFloat32 ? LaunchT<float>(chunk, u, fft, s, s.chunk_result, env)
                                    : LaunchT<double>(chunk, u, fft, s, s.chunk_result, env));
    MergeResultKernel<<<1, 1, 0, env.stream>>>(s.chunk_result, first, result);
    GC_CHECK_LAUNCH();
  }
  return cudaSuccess;
}

cudaError_t LaunchLombScargleEvenCheck(DType dtype, const void* freqs, int64_t m, double tolerance,
                                       unsigned long long* first, const LaunchEnv& env) {
  GC_REQUIRE(freqs != nullptr && first != nullptr && m >= 1);
  GC_TRY(cudaMemsetAsync(first, 0xff, sizeof(unsigned long long), env.stream));
  if (m < 3) return cudaSuccess;
  constexpr int kThreads = NufftPolicy::kThreads;
  const unsigned blocks = GridFor(CeilDiv(m, kThreads), env.sm_count, NufftPolicy::kBlocksPerSm);
  if (dtype == DType::kFloat32) {
    EvenCheckKernel<float><<<blocks, kThreads, 0, env.stream>>>(static_cast<const float*>(freqs), m,
                                                                 tolerance, first);
  } else {
    EvenCheckKernel<double><<<blocks, kThreads, 0, env.stream>>>(static_cast<const double*>(freqs),
                                                                  m, tolerance, first);
  }
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

void ListLombScargleNufftKernels(std::vector<KernelEntry>& out) {
  out.push_back({"lombscargle.nufft.spread<f32>", (const void*)&SpreadKernel<float>});
  out.push_back({"lombscargle.nufft.spread<f64>", (const void*)&SpreadKernel<double>});
  out.push_back({"lombscargle.nufft.deconvolve", (const void*)&DeconvolveKernel});
  out.push_back({"lombscargle.nufft.power<f32>", (const void*)&PowerKernel<float>});
  out.push_back({"lombscargle.nufft.power<f64>", (const void*)&PowerKernel<double>});
  out.push_back({"lombscargle.nufft.flag", (const void*)&FlagKernel});
  out.push_back({"lombscargle.nufft.merge_result", (const void*)&MergeResultKernel});
  out.push_back({"lombscargle.nufft.redo<f32>", (const void*)&RedoKernel<float>});
  out.push_back({"lombscargle.nufft.redo<f64>", (const void*)&RedoKernel<double>});
  out.push_back({"lombscargle.even_check<f32>", (const void*)&EvenCheckKernel<float>});
  out.push_back({"lombscargle.even_check<f64>", (const void*)&EvenCheckKernel<double>});
}

}  // namespace gpucompute::cuda
