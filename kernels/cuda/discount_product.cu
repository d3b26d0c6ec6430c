// Discount product: out = a * b with NumPy broadcasting (factors (M, O) x values
// (D, M, O) in the seed). Memory-bound: every kernel is grid-stride, moves 16-byte
// vectors where alignment allows and keeps the broadcast operand in registers.
//
//   LaunchDiscountProduct (host: coalesce axes, pick a path)
//     -> FlatKernel / RowBroadcastKernel / GeneralKernel (thin __global__)
//       -> FlatAgent / RowBroadcastAgent / GeneralAgent (the per-thread loops)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.h"

namespace gpucompute::cuda {
namespace {

// ---- policies ------------------------------------------------------------------
struct FlatPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
  static constexpr int kUnroll = 4;  // vectors in flight per thread per iteration
};
struct RowBroadcastPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
  static constexpr int kUnroll = 4;  // rows in flight per thread per iteration
  static constexpr int kMinRowVectors = 32;  // narrower rows go to the general path
};
struct GeneralPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 4;
};

// ---- flat: rank 1 after coalescing, each operand contiguous or a scalar --------
template <typename T, bool kAFull, bool kBFull, bool kVec>
struct FlatAgent {
  using V = typename Vec16<T>::type;
  static constexpr int kV = kVec ? Vec16<T>::kCount : 1;
  using L = std::conditional_t<kVec, V, T>;  // unit of a load

  const T* a;
  const T* b;
  T* out;
  int64_t n;

  __device__ static L Splat(T s) {
    if constexpr (kVec) {
      if constexpr (std::is_same_v<T, float>) return make_float4(s, s, s, s);
      else return make_double2(s, s);
    } else {
      return s;
    }
  }
  __device__ static L Mul(const L& x, const L& y) {
    if constexpr (kVec) return VecMap2(x, y, [](T p, T q) { return p * q; });
    else return x * y;
  }

  __device__ void Run() {
    const int64_t units = n / kV;
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const L* au = reinterpret_cast<const L*>(a);
    const L* bu = reinterpret_cast<const L*>(b);
    L* ou = reinterpret_cast<L*>(out);
    // A broadcast (scalar) operand is read once and kept in a register.
    const L a_s = kAFull ? L{} : Splat(a[0]);
    const L b_s = kBFull ? L{} : Splat(b[0]);
    constexpr int U = FlatPolicy::kUnroll;
    int64_t i = tid;
    for (; i + (U - 1) * stride < units; i += U * stride) {
      L va[U], vb[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        va[u] = kAFull ? au[i + u * stride] : a_s;
        vb[u] = kBFull ? bu[i + u * stride] : b_s;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) ou[i + u * stride] = Mul(va[u], vb[u]);
    }
    for (; i < units; i += stride) {
      ou[i] = Mul(kAFull ? au[i] : a_s, kBFull ? bu[i] : b_s);
    }
    if constexpr (kVec) {  // the < kV elements past the last whole vector
      const int64_t e = units * kV + tid;
      if (e < n) out[e] = (kAFull ? a[e] : a[0]) * (kBFull ? b[e] : b[0]);
    }
  }
};

template <typename T, bool kAFull, bool kBFull, bool kVec>
__global__ void __launch_bounds__(FlatPolicy::kThreads, FlatPolicy::kMinBlocksPerSm)
    FlatKernel(const T* a, const T* b, T* out, int64_t n) {
  FlatAgent<T, kAFull, kBFull, kVec>{a, b, out, n}.Run();
}

// ---- row broadcast: out (D, K) = row (K) * full (D, K) ---------------------------
// Each thread owns one column vector of the row, loads it once into registers and
// walks the batch axis D.
template <typename T, bool kVec>
struct RowBroadcastAgent {
  using V = typename Vec16<T>::type;
  using L = std::conditional_t<kVec, V, T>;
  const T* row;
  const T* full;
  T* out;
  int64_t rows;      // D
  int64_t row_units; // K / vector width

  __device__ static L Mul(const L& x, const L& y) {
    if constexpr (kVec) return VecMap2(x, y, [](T p, T q) { return p * q; });
    else return x * y;
  }

  __device__ void Run() {
    const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (col >= row_units) return;
    const L* fu = reinterpret_cast<const L*>(full);
    L* ou = reinterpret_cast<L*>(out);
    const L r = reinterpret_cast<const L*>(row)[col];
    const int64_t step = static_cast<int64_t>(gridDim.y) * blockDim.y;
    constexpr int U = RowBroadcastPolicy::kUnroll;
    int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    for (; d + (U - 1) * step < rows; d += U * step) {
      L v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = fu[(d + u * step) * row_units + col];
#pragma unroll
      for (int u = 0; u < U; ++u) ou[(d + u * step) * row_units + col] = Mul(r, v[u]);
    }
    for (; d < rows; d += step) ou[d * row_units + col] = Mul(r, fu[d * row_units + col]);
  }
};

template <typename T, bool kVec>
__global__ void __launch_bounds__(RowBroadcastPolicy::kThreads, RowBroadcastPolicy::kMinBlocksPerSm)
    RowBroadcastKernel(const T* row, const T* full, T* out, int64_t rows, int64_t row_units) {
  RowBroadcastAgent<T, kVec>{row, full, out, rows, row_units}.Run();
}

// ---- general: any broadcast, rank <= 8, index arithmetic per element --------------
template <typename IndexT>
struct GeneralParams {
  int rank;
  IndexT n;
  IndexT shape[kMaxRank];
  IndexT sa[kMaxRank];
  IndexT sb[kMaxRank];
};

template <typename T, typename IndexT>
struct GeneralAgent {
  const T* a;
  const T* b;
  T* out;
  const GeneralParams<IndexT>& p;

  __device__ void Run() {
    const IndexT stride = static_cast<IndexT>(gridDim.x) * blockDim.x;
    for (IndexT i = static_cast<IndexT>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n;
         i += stride) {
      IndexT rem = i, oa = 0, ob = 0;
#pragma unroll
      for (int d = kMaxRank - 1; d >= 0; --d) {
        if (d < p.rank) {
          const IndexT q = rem / p.shape[d];
          const IndexT r = rem - q * p.shape[d];
          oa += r * p.sa[d];
          ob += r * p.sb[d];
          rem = q;
        }
      }
      out[i] = a[oa] * b[ob];
    }
  }
};

template <typename T, typename IndexT>
__global__ void __launch_bounds__(GeneralPolicy::kThreads, GeneralPolicy::kMinBlocksPerSm)
    GeneralKernel(const T* a, const T* b, T* out, const __grid_constant__ GeneralParams<IndexT> p) {
  GeneralAgent<T, IndexT>{a, b, out, p}.Run();
}

// ---- host planning ---------------------------------------------------------------
struct Coalesced {
  int rank = 0;
  int64_t n = 1;
  int64_t shape[kMaxRank];
  int64_t sa[kMaxRank];
  int64_t sb[kMaxRank];
};

// Drops extent-1 axes and merges neighbours that both operands walk contiguously.
Coalesced Coalesce(const BroadcastArgs& args) {
  Coalesced c;
  for (int d = 0; d < args.rank; ++d) {
    const int64_t ext = args.shape[d];
    c.n *= ext;
    if (ext == 1) continue;
    if (c.rank > 0) {
      const int k = c.rank - 1;
      if (c.sa[k] == args.stride_a[d] * ext && c.sb[k] == args.stride_b[d] * ext) {
        c.shape[k] *= ext;
        c.sa[k] = args.stride_a[d];
        c.sb[k] = args.stride_b[d];
        continue;
      }
    }
    c.shape[c.rank] = ext;
    c.sa[c.rank] = args.stride_a[d];
    c.sb[c.rank] = args.stride_b[d];
    ++c.rank;
  }
  return c;
}

template <typename T>
constexpr int VecCount() { return Vec16<T>::kCount; }

// Which kernel a coalesced broadcast runs on.
enum class DiscountPath { kEmpty, kFlat, kRowBroadcast, kGeneral };

DiscountPath Plan(const Coalesced& c, int vec, const void* a, const void* b, void* out,
                  bool* swap, bool* use_vec) {
  *swap = false;
  *use_vec = false;
  if (c.n == 0) return DiscountPath::kEmpty;
  if (c.rank <= 1) {
    const bool a_full = c.rank == 1 && c.sa[0] == 1;
    const bool b_full = c.rank == 1 && c.sb[0] == 1;
    const bool ok_a = c.rank == 0 || c.sa[0] == 0 || c.sa[0] == 1;
    const bool ok_b = c.rank == 0 || c.sb[0] == 0 || c.sb[0] == 1;
    if (ok_a && ok_b) {
      *use_vec = Aligned16(out) && (!a_full || Aligned16(a)) && (!b_full || Aligned16(b));
      return DiscountPath::kFlat;
    }
  }
  if (c.rank == 2 && c.sa[1] == 1 && c.sb[1] == 1) {
    const int64_t k = c.shape[1];
    const bool a_row = c.sa[0] == 0 && c.sb[0] == k;
    const bool b_row = c.sb[0] == 0 && c.sa[0] == k;
    if (a_row || b_row) {
      *swap = b_row;
      const void* row = b_row ? b : a;
      const void* full = b_row ? a : b;
      const bool v = (k % vec == 0) && Aligned16(row) && Aligned16(full) && Aligned16(out);
      if ((v ? k / vec : k) >= RowBroadcastPolicy::kMinRowVectors) {
        *use_vec = v;
        return DiscountPath::kRowBroadcast;
      }
    }
  }
  return DiscountPath::kGeneral;
}

template <typename T>
cudaError_t LaunchFlat(const T* a, const T* b, T* out, const Coalesced& c, bool vec,
                       const LaunchEnv& env) {
  const bool af = c.rank == 1 && c.sa[0] == 1;
  const bool bf = c.rank == 1 && c.sb[0] == 1;
  const int64_t units = vec ? c.n / VecCount<T>() : c.n;
  const unsigned grid = GridFor(CeilDiv(std::max<int64_t>(units, 1), FlatPolicy::kThreads),
                                env.sm_count, FlatPolicy::kMinBlocksPerSm);
  const dim3 block(FlatPolicy::kThreads);
#define GC_FLAT(AF, BF, VEC) \
  FlatKernel<T, AF, BF, VEC><<<grid, block, 0, env.stream>>>(a, b, out, c.n)
  if (vec) {
    if (af && bf) GC_FLAT(true, true, true);
    else if (af) GC_FLAT(true, false, true);
    else if (bf) GC_FLAT(false, true, true);
    else GC_FLAT(false, false, true);
  } else {
    if (af && bf) GC_FLAT(true, true, false);
    else if (af) GC_FLAT(true, false, false);
    else if (bf) GC_FLAT(false, true, false);
    else GC_FLAT(false, false, false);
  }
#undef GC_FLAT
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T>
cudaError_t LaunchRowBroadcast(const T* row, const T* full, T* out, int64_t rows, int64_t k,
                               bool vec, const LaunchEnv& env) {
  const int64_t units = vec ? k / VecCount<T>() : k;
  int bx = 32;
  while (bx < RowBroadcastPolicy::kThreads && bx < units) bx *= 2;
  const int by = RowBroadcastPolicy::kThreads / bx;
  const int64_t gx = CeilDiv(units, bx);
  GC_REQUIRE(gx <= 0x7fffffff);
  const int64_t want = static_cast<int64_t>(env.sm_count) * RowBroadcastPolicy::kMinBlocksPerSm * 2;
  const int64_t gy = std::clamp<int64_t>(want / gx, 1, std::min<int64_t>(CeilDiv(rows, by), 65535));
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  const dim3 block(bx, by);
  if (vec) RowBroadcastKernel<T, true><<<grid, block, 0, env.stream>>>(row, full, out, rows, units);
  else RowBroadcastKernel<T, false><<<grid, block, 0, env.stream>>>(row, full, out, rows, units);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T, typename IndexT>
cudaError_t LaunchGeneralT(const T* a, const T* b, T* out, const Coalesced& c, const LaunchEnv& env) {
  GeneralParams<IndexT> p{};
  p.rank = c.rank;
  p.n = static_cast<IndexT>(c.n);
  for (int d = 0; d < c.rank; ++d) {
    p.shape[d] = static_cast<IndexT>(c.shape[d]);
    p.sa[d] = static_cast<IndexT>(c.sa[d]);
    p.sb[d] = static_cast<IndexT>(c.sb[d]);
  }
  const unsigned grid = GridFor(CeilDiv(c.n, GeneralPolicy::kThreads), env.sm_count,
                                GeneralPolicy::kMinBlocksPerSm * 2);
  GeneralKernel<T, IndexT><<<grid, GeneralPolicy::kThreads, 0, env.stream>>>(a, b, out, p);
  GC_CHECK_LAUNCH();
  return cudaSuccess;
}

template <typename T>
cudaError_t LaunchT(const T* a, const T* b, T* out, const BroadcastArgs& args, const LaunchEnv& env) {
  const Coalesced c = Coalesce(args);
  bool swap = false, vec = false;
  switch (Plan(c, VecCount<T>(), a, b, out, &swap, &vec)) {
    case DiscountPath::kEmpty:
      return cudaSuccess;
    case DiscountPath::kFlat:
      return LaunchFlat<T>(a, b, out, c, vec, env);
    case DiscountPath::kRowBroadcast:
      // Multiplication commutes bit for bit, so the row operand may be either one.
      return swap ? LaunchRowBroadcast<T>(b, a, out, c.shape[0], c.shape[1], vec, env)
                  : LaunchRowBroadcast<T>(a, b, out, c.shape[0], c.shape[1], vec, env);
    case DiscountPath::kGeneral:
      if (c.n <= 0xffffffffll) return LaunchGeneralT<T, uint32_t>(a, b, out, c, env);
      return LaunchGeneralT<T, uint64_t>(a, b, out, c, env);
  }
  return cudaErrorInvalidValue;
}

bool ValidArgs(const BroadcastArgs& args) {
  if (args.rank < 0 || args.rank > kMaxRank) return false;
  for (int d = 0; d < args.rank; ++d) {
    if (args.shape[d] < 0 || args.stride_a[d] < 0 || args.stride_b[d] < 0) return false;
  }
  return true;
}

}  // namespace

cudaError_t LaunchDiscountProduct(DType dtype, const void* a, const void* b, void* out,
                                  const BroadcastArgs& args, const LaunchEnv& env) {
  GC_REQUIRE(ValidArgs(args));
  int64_t n = 1;
  for (int d = 0; d < args.rank; ++d) n *= args.shape[d];
  if (n == 0) return cudaSuccess;
  GC_REQUIRE(a != nullptr && b != nullptr && out != nullptr);
  if (dtype == DType::kFloat32) {
    return LaunchT<float>(static_cast<const float*>(a), static_cast<const float*>(b),
                          static_cast<float*>(out), args, env);
  }
  return LaunchT<double>(static_cast<const double*>(a), static_cast<const double*>(b),
                         static_cast<double*>(out), args, env);
}

namespace {

template <typename T>
void ListT(std::vector<KernelEntry>& out, const char* t) {
  const std::string s(t);
  out.push_back({"discount.flat<" + s + ",full,full,vec>", (const void*)&FlatKernel<T, true, true, true>});
  out.push_back({"discount.flat<" + s + ",full,scalar,vec>", (const void*)&FlatKernel<T, true, false, true>});
  out.push_back({"discount.flat<" + s + ",scalar,full,vec>", (const void*)&FlatKernel<T, false, true, true>});
  out.push_back({"discount.flat<" + s + ",scalar,scalar,vec>", (const void*)&FlatKernel<T, false, false, true>});
  out.push_back({"discount.flat<" + s + ",full,full>", (const void*)&FlatKernel<T, true, true, false>});
  out.push_back({"discount.flat<" + s + ",full,scalar>", (const void*)&FlatKernel<T, true, false, false>});
  out.push_back({"discount.flat<" + s + ",scalar,full>", (const void*)&FlatKernel<T, false, true, false>});
  out.push_back({"discount.flat<" + s + ",scalar,scalar>", (const void*)&FlatKernel<T, false, false, false>});
  out.push_back({"discount.row_broadcast<" + s + ",vec>", (const void*)&RowBroadcastKernel<T, true>});
  out.push_back({"discount.row_broadcast<" + s + ">", (const void*)&RowBroadcastKernel<T, false>});
  out.push_back({"discount.general<" + s + ",u32>", (const void*)&GeneralKernel<T, uint32_t>});
  out.push_back({"discount.general<" + s + ",u64>", (const void*)&GeneralKernel<T, uint64_t>});
}

template <typename T>
cudaError_t WarmT(T* buf, const LaunchEnv& env) {
  // buf: 3 x 64 elements, 16-byte aligned.
  T* a = buf;
  T* b = buf + 64;
  T* o = buf + 128;
  Coalesced c;
  c.rank = 1;
  c.n = 64;
  c.shape[0] = 64;
  const int64_t combos[4][2] = {{1, 1}, {1, 0}, {0, 1}, {0, 0}};
  for (const auto& s : combos) {
    c.sa[0] = s[0];
    c.sb[0] = s[1];
    c.n = (s[0] == 0 && s[1] == 0) ? 1 : 64;
    c.shape[0] = c.n;
    GC_TRY(LaunchFlat<T>(a, b, o, c, true, env));
    GC_TRY(LaunchFlat<T>(a, b, o, c, false, env));
  }
  GC_TRY(LaunchRowBroadcast<T>(a, b, o, 1, 64, true, env));
  GC_TRY(LaunchRowBroadcast<T>(a, b, o, 1, 64, false, env));
  c.rank = 2;
  c.n = 64;
  c.shape[0] = 8; c.shape[1] = 8;
  c.sa[0] = 0; c.sa[1] = 1;
  c.sb[0] = 1; c.sb[1] = 0;
  GC_TRY((LaunchGeneralT<T, uint32_t>(a, b, o, c, env)));
  GC_TRY((LaunchGeneralT<T, uint64_t>(a, b, o, c, env)));
  return cudaSuccess;
}

}  // namespace

void ListDiscountProductKernels(std::vector<KernelEntry>& out) {
  ListT<float>(out, "f32");
  ListT<double>(out, "f64");
}

cudaError_t WarmupDiscountProduct(const LaunchEnv& env) {
  Scratch s;
  GC_TRY(s.Allocate(3 * 64 * sizeof(double), env));
  GC_TRY(cudaMemsetAsync(s.as<void>(), 0, 3 * 64 * sizeof(double), env.stream));
  GC_TRY(WarmT<float>(s.as<float>(), env));
  GC_TRY(WarmT<double>(s.as<double>(), env));
  return cudaSuccess;
}

}  // namespace gpucompute::cuda
