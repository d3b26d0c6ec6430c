// Host entry points of the CUDA kernels (one .cu file per operation). Each launcher
// checks its preconditions (cudaErrorInvalidValue when they fail), enqueues its
// kernel(s) on `env.stream`, checks cudaGetLastError after every launch and returns
// without synchronizing. Scratch memory comes from `env.arena` where it fits, else
// from `env.pool` (stream-ordered).
// Plain C++ interface: included by the backend (.cc, g++) and the .cu files alike.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/norm.h"

namespace gpucompute::cuda {

// "No row / batch" in the device result structs below.
inline constexpr unsigned long long kNoIndex = ~0ull;

// Device bytes that belong to the launching stream alone (a small request's, see
// op_runner.h), handed out in order and never given back: scratch from here costs
// no allocation, and no lock shared with the other streams, as the pool's do.
struct ScratchArena {
  static constexpr size_t kAlignment = 256;
  char* next = nullptr;
  char* end = nullptr;

  static constexpr size_t Aligned(size_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  // `bytes` (aligned), or null where they do not fit.
  void* Take(size_t bytes) {
    const size_t aligned = Aligned(bytes);
    if (next == nullptr || aligned > static_cast<size_t>(end - next)) return nullptr;
    void* taken = next;
    next += aligned;
    return taken;
  }
};

// Where and how to launch.
struct LaunchEnv {
  cudaStream_t stream = nullptr;
  cudaMemPool_t pool = nullptr;  // scratch allocations (cudaMallocFromPoolAsync)
  int sm_count = 1;              // multiprocessors of the device (grid sizing)
  ScratchArena* arena = nullptr;  // scratch first taken from here, where set
};

// `bytes` of scratch for work on env.stream: from env.arena where it fits (*pooled
// false: nothing to give back), else in stream order from env.pool, or the device's
// default pool (*pooled true: the caller frees it on env.stream).
inline cudaError_t AllocateScratch(size_t bytes, const LaunchEnv& env, void** out, bool* pooled) {
  *out = env.arena != nullptr ? env.arena->Take(bytes) : nullptr;
  *pooled = *out == nullptr;
  if (!*pooled) return cudaSuccess;
  if (env.pool != nullptr) return cudaMallocFromPoolAsync(out, bytes, env.pool, env.stream);
  return cudaMallocAsync(out, bytes, env.stream);
}

// A kernel known to the backend: loaded (cudaFuncGetAttributes) at start-up.
struct KernelEntry {
  std::string name;
  const void* func = nullptr;
};

// ---- discount product: out = a * b with NumPy broadcasting ------------------
// Element strides of a and b read as the output shape (0 on broadcast axes), as
// BroadcastStrides gives them. rank <= kMaxRank; out is dense row-major.
struct BroadcastArgs {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride_a[kMaxRank] = {};
  int64_t stride_b[kMaxRank] = {};
};

cudaError_t LaunchDiscountProduct(DType dtype, const void* a, const void* b, void* out,
                                  const BroadcastArgs& args, const LaunchEnv& env);

// ---- haversine --------------------------------------------------------------
// Per-reference constants, computed on the host in float64.
struct RefPoint {
  double lat_deg = 0;
  double lon_deg = 0;
  double cos_lat = 0;  // cos(lat) of the reference
  double pad = 0;
};

struct MeshAxis {  // numpy.linspace(start, stop, count), degrees
  double start = 0;
  double stop = 0;
  int64_t count = 0;
};

// out (n_ref, lat.count, lon.count). `refs` is a device array of n_ref RefPoints.
cudaError_t LaunchHaversineMesh(DType dtype, const MeshAxis& lat, const MeshAxis& lon,
                                const RefPoint* refs, int64_t n_ref, double radius, void* out,
                                const LaunchEnv& env);
// Device results of a points launch: the lowest point index whose latitude, and
// whose longitude, breaks its rule (kLatitudeRule, kLongitudeRule), kNoIndex when none.
struct PointsResult {
  unsigned long long bad_lat;
  unsigned long long bad_lon;
};

// out (n_ref, n_points); lat, lon: n_points degrees each. `result` is device memory
// the launcher initializes; out is written whatever the points hold.
cudaError_t LaunchHaversinePoints(DType dtype, const void* lat, const void* lon, int64_t n_points,
                                  const RefPoint* refs, int64_t n_ref, double radius, void* out,
                                  PointsResult* result, const LaunchEnv& env);

// ---- normalize ----------------------------------------------------------------
// Device results of a normalize launch, read back by the caller after the stream
// completes: the lowest row index the launch could not normalize (UINT64_MAX when
// none) and, after LaunchNormalizeBadRowNorm, that row's norm.
struct NormalizeResult {
  unsigned long long bad_row;
  double bad_norm;
};

// in, out: rows x cols (dense). `result` is device memory the launcher initializes.
// A row is left to result->bad_row when its norm is zero or non-finite (never divided
// by: its output is left unwritten), when a quotient overflows T (SUM), or, float64
// L2 only, when its squares overflow or underflow (LaunchNormalizeRescue redoes it).
cudaError_t LaunchNormalize(DType dtype, const void* in, void* out, int64_t rows, int64_t cols,
                            NormKind norm, NormalizeResult* result, const LaunchEnv& env);
// After LaunchNormalize completed with result->bad_row = first_row: for float64 L2,
// normalizes every row from first_row on whose squares overflow or underflow, scaled
// by a power of two, and resets result->bad_row to the first row still bad. A no-op
// for other dtypes and norms, whose bad rows are final.
cudaError_t LaunchNormalizeRescue(DType dtype, const void* in, void* out, int64_t rows,
                                  int64_t cols, NormKind norm, unsigned long long first_row,
                                  NormalizeResult* result, const LaunchEnv& env);
// Error path, after LaunchNormalize completed with result->bad_row set: fills
// result->bad_norm with that row's norm (for the message).
cudaError_t LaunchNormalizeBadRowNorm(DType dtype, const void* in, int64_t rows, int64_t cols,
                                      NormKind norm, NormalizeResult* result, const LaunchEnv& env);

// ---- Lomb-Scargle -------------------------------------------------------------
struct LombScargleArgs {
  int64_t batch = 1;
  int64_t samples = 0;      // N
  int64_t frequencies = 0;  // M
  const void* x = nullptr;
  bool x_batched = false;
  const void* y = nullptr;         // (B, N)
  const void* weights = nullptr;   // null, (N) or (B, N)
  bool weights_batched = false;
  const void* freqs = nullptr;     // (M), or null: grid below
  double grid_start = 0, grid_stop = 0;  // numpy.linspace(start, stop, M)
  bool precenter = false;
  bool normalize = false;
  bool floating_mean = false;
  bool amplitude = false;          // SciPy's "amplitude": (real, imaginary) per frequency
  void* out = nullptr;             // (B, M), amplitude (B, M, 2)
};

// Device flag written by the launch: first batch whose weights are negative or do
// not sum to a positive value (UINT64_MAX when none).
struct LombScargleResult {
  unsigned long long bad_batch;
};

// The launch policy (frequencies per thread) is picked by dtype and size
// (lombscargle.cu: PolicyFor).
cudaError_t LaunchLombScargle(DType dtype, const LombScargleArgs& args, LombScargleResult* result,
                              const LaunchEnv& env);

// Per batch row, in float64.
struct LombScargleRowStats {
  double y_sum;   // Y  = sum w' y   (w' = w / sum w)
  double yy_sum;  // YY = sum w' y^2
};

// The direct kernel's first step, as the NUFFT takes it: per row, w' = w / sum w and
// w' (y - mean) into wn, wy (B x N, float64 whatever y's dtype: float32 weights would
// not sum to 1, an error a floating mean amplifies at low frequencies), Y and YY into
// stats; flags bad weights in result (initialized here).
cudaError_t LaunchLombScarglePrep(DType dtype, const LombScargleArgs& args, double* wn, double* wy,
                                  LombScargleRowStats* stats, LombScargleResult* result,
                                  const LaunchEnv& env);

// ---- ragged Lomb-Scargle batches (row_offsets) --------------------------------
struct LombScargleRaggedArgs {
  const void* x = nullptr;        // flat (T)
  const void* y = nullptr;        // flat (T)
  const void* weights = nullptr;  // flat (T) or null
  const int64_t* offsets = nullptr;  // device, B + 1
  int64_t batch = 0;
  int64_t padded = 0;             // N_max
  bool precenter = false;
  void* x_out = nullptr;          // (B, N_max) each
  void* y_out = nullptr;
  void* weights_out = nullptr;
};

// The rows into (B, N_max): y centred when precenter, weights 1 where none are
// given, and weight 0 past each row's end.
cudaError_t LaunchLombScargleRaggedGather(DType dtype, const LombScargleRaggedArgs& args,
                                          const LaunchEnv& env);
// out (B, M) row b times N_b / N_max: the "power" scale N / 4 of each row's own N.
cudaError_t LaunchLombScargleRaggedScale(DType dtype, const LombScargleRaggedArgs& args, void* out,
                                         int64_t m, const LaunchEnv& env);

// ---- Lomb-Scargle by NUFFT (kernels/lombscargle_nufft.h) -----------------------
inline constexpr int kNufftMaxNodes = 40;

// The transform's size and the frequencies f_k = f_start + k f_step.
struct LombScargleNufftArgs {
  int width = 0;
  double beta = 0;
  int64_t half = 0;
  int64_t grid = 0;           // n
  int64_t chunk_rows = 1;     // rows per pass (the FFT plan's batch is 3 x chunk_rows)
  int64_t largest_mode = 0;   // |m| <= largest_mode
  double f_start = 0, f_step = 0;
  double sum_error = 0;       // NufftSumError
  double redo_threshold = 0;  // redo where bound > redo_threshold * the row's largest power
  int nodes = 0;              // quadrature of the kernel's transform
  double node_weight[kNufftMaxNodes] = {};
  double node_angle[kNufftMaxNodes] = {};
};

// Scratch bytes LaunchLombScargleNufft needs besides the FFT's work area, for
// nufft.chunk_rows rows.
size_t LombScargleNufftScratchBytes(const LombScargleArgs& args,
                                    const LombScargleNufftArgs& nufft);

// The periodogram of args at the even frequencies of `nufft`, chunk_rows rows at a
// time, through `fft` (a cuFFT plan of chunk_rows * 3 double-complex inverse
// transforms of nufft.grid points,
// set to env.stream and given its work area) and `scratch` of
// LombScargleNufftScratchBytes. Frequencies whose error bound passes the accuracy
// are computed again by direct sums (one warp each).
cudaError_t LaunchLombScargleNufft(DType dtype, const LombScargleArgs& args,
                                   const LombScargleNufftArgs& nufft, int fft, void* scratch,
                                   LombScargleResult* result, const LaunchEnv& env);

// EvenlySpaced on the device: the first k in (0, M - 1) whose freqs[k] departs from
// the even spacing through freqs[0] and freqs[M - 1] by more than EvenSpacingAllowed
// (kNoIndex when none), into *first (device memory, initialized here).
cudaError_t LaunchLombScargleEvenCheck(DType dtype, const void* freqs, int64_t m, double tolerance,
                                       unsigned long long* first, const LaunchEnv& env);

// ---- value check --------------------------------------------------------------
// A ValueRule (kernels/preconditions.h) as the device reads it.
struct ValueBounds {
  double lowest = 0;
  double highest = 0;
  bool nonzero = false;
};

// *first = the lowest index i < n whose element breaks `bounds`, kNoIndex when
// none (the launcher initializes it).
cudaError_t LaunchFirstBreakingValue(DType dtype, const void* data, int64_t n,
                                     const ValueBounds& bounds, unsigned long long* first,
                                     const LaunchEnv& env);

// ---- start-up -----------------------------------------------------------------
// Every kernel of every operation, for cudaFuncGetAttributes.
void ListKernels(std::vector<KernelEntry>& out);
// Runs every kernel instantiation once on tiny inputs (scratch from env.pool) on the
// current device; returns the first error. The caller synchronizes.
cudaError_t WarmupKernels(const LaunchEnv& env);

// Per-operation pieces of the two above (one per .cu file).
void ListDiscountProductKernels(std::vector<KernelEntry>& out);
void ListHaversineKernels(std::vector<KernelEntry>& out);
void ListNormalizeKernels(std::vector<KernelEntry>& out);
void ListLombScargleKernels(std::vector<KernelEntry>& out);
// Loaded, not warmed up: the NUFFT's kernels run after a cuFFT plan is made.
void ListLombScargleNufftKernels(std::vector<KernelEntry>& out);
void ListLombScargleRaggedKernels(std::vector<KernelEntry>& out);
void ListValueCheckKernels(std::vector<KernelEntry>& out);
cudaError_t WarmupDiscountProduct(const LaunchEnv& env);
cudaError_t WarmupHaversine(const LaunchEnv& env);
cudaError_t WarmupNormalize(const LaunchEnv& env);
cudaError_t WarmupLombScargle(const LaunchEnv& env);
cudaError_t WarmupValueCheck(const LaunchEnv& env);

// ---- benchmark support --------------------------------------------------------
// Fills n elements with uniform values in [lo, hi) from a counter-based hash of
// (seed, index): the same on every device and run.
cudaError_t LaunchFillUniform(DType dtype, void* data, int64_t n, double lo, double hi,
                              uint64_t seed, const LaunchEnv& env);

}  // namespace gpucompute::cuda
