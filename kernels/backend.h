// The backend seam: everything the server asks of a compute backend, by role
// (devices, arrays, same-host shared memory, operations). The server validates
// requests (shape rules in kernels/shape_rules.h) and then calls these with
// well-formed arrays; backends still check their preconditions and return a
// Status, never abort. No gRPC in here.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/array.h"
#include "kernels/dtype.h"
#include "kernels/norm.h"

namespace gpucompute {

struct DeviceDescription {
  std::string name;         // "cpu", "cuda:0"
  std::string description;  // "NVIDIA H100 80GB HBM3", "16 threads"
  uint64_t memory_bytes = 0;
  bool healthy = true;
};

// Memory and warm-state figures for metrics; cheap to read.
struct DeviceMemoryStats {
  std::string device;            // DeviceDescription::name
  uint64_t pool_reserved_bytes = 0;  // held by the allocator (CUDA memory pool; CPU: live + kept for reuse)
  uint64_t pool_used_bytes = 0;      // in live arrays
  uint64_t queued_ops = 0;           // operations running or waiting on this device
};

// One memory budget (kernels/memory/memory_budget.h): "host" or a device name.
struct MemoryBudgetStats {
  std::string memory;
  uint64_t used_bytes = 0;
  uint64_t capacity_bytes = 0;
};

struct BackendStats {
  std::vector<DeviceMemoryStats> devices;
  std::vector<MemoryBudgetStats> memory_budgets;
  uint64_t pinned_staging_bytes = 0;
  int kernels_loaded = 0;  // kernels loaded and run once at start-up
  absl::Duration warmup_time = absl::ZeroDuration();
};

// Backend-private: the submission an operation joins while RunFromHost runs it
// (the CUDA backend's one stream, kernels/cuda/op_runner.h).
struct StreamSubmission;

// Per-call context: cancellation in, measured compute time out.
struct OpContext {
  // Set by the server when the client cancels or the deadline passes; backends
  // poll it between blocks of work and return absl::CancelledError.
  const std::atomic<bool>* cancelled = nullptr;
  // Time of the operation itself, measured by the backend (CUDA events on a GPU).
  absl::Duration compute_time = absl::ZeroDuration();
  // The algorithm an operation with a choice of them ran ("direct", "nufft"); empty otherwise.
  absl::string_view method;
  // Set by RunFromHost for the operation it runs; null otherwise.
  StreamSubmission* submission = nullptr;
  // Input bytes RunFromHost copied to the backend (also when the operation failed).
  uint64_t bytes_copied_in = 0;

  bool IsCancelled() const {
    return cancelled != nullptr && cancelled->load(std::memory_order_relaxed);
  }
};

// A contiguous run of host memory; a message received over the network arrives
// as several.
struct HostPiece {
  const void* data = nullptr;
  size_t bytes = 0;
};

// One input of Backend::RunFromHost: an array made from host bytes (the pieces,
// concatenated).
struct HostInput {
  DType dtype = DType::kFloat64;
  Shape shape;
  std::span<const HostPiece> pieces;
};

// The operation RunFromHost runs on the arrays it made: it writes `out`.
using ArraysRun = absl::FunctionRef<absl::Status(std::span<const std::shared_ptr<Array>> inputs,
                                                 Array& out, OpContext& ctx)>;

struct GeoPoint {
  double lat = 0;  // degrees
  double lon = 0;
};

// Inclusive linspace: count points from start to stop (numpy.linspace).
struct Linspace {
  double start = 0;
  double stop = 0;
  int64_t count = 0;

  double At(int64_t i) const {
    if (count == 1) return start;
    // numpy's formula: start + i * step, with the last point exactly `stop`.
    if (i == count - 1) return stop;
    return start + static_cast<double>(i) * ((stop - start) / static_cast<double>(count - 1));
  }
};

struct LatLonMesh {
  Linspace lat;
  Linspace lon;
};

inline constexpr double kDefaultEarthRadiusKm = 6371.0088;

// Device memory opened from another process's CUDA IPC handle; closed when
// `mapping` (which points at the allocation's base) is dropped.
struct IpcMemory {
  std::shared_ptr<void> mapping;
  size_t bytes = 0;  // the whole allocation, as the driver reports it
  int device = 0;    // CUDA ordinal of this process
};

// How the sums are computed: direct sums over samples x frequencies, or (evenly
// spaced frequencies only) type-1 non-uniform FFTs (kernels/lombscargle_nufft.h).
enum class LombScargleMethod { kAuto, kDirect, kNufft };

// The NUFFT's default accuracy: powers within this relative error of the direct
// float64 sums, on the scale of the row's largest power.
inline constexpr double kDefaultNufftAccuracy = 1e-9;

struct LombScargleOptions {
  bool precenter = false;
  bool normalize = false;
  bool floating_mean = false;
  LombScargleMethod method = LombScargleMethod::kAuto;
  double accuracy = kDefaultNufftAccuracy;  // NUFFT only; [kMinNufftAccuracy, kMaxNufftAccuracy]
  // Empty, or a ragged batch: B + 1 offsets of the rows in flat x, y, weights (LombScargleShapes).
  std::vector<int64_t> row_offsets;
  // SciPy's normalize="amplitude" (normalize false): per frequency the complex amplitude
  // (lombscargle_power.h Amplitude) as (real, imaginary); out gains a trailing axis of 2.
  bool amplitude = false;
};

struct ValueRule;  // kernels/preconditions.h

// The backend's roles, one interface each, so that a caller or a wrapper
// (kernels/forwarding_backend.h) deals with the role it needs, and a new
// operation is one method of BackendOperations, implemented by the CPU and CUDA
// backends.

// What the backend is and how it is doing: its devices, health and figures.
class BackendDevices {
 public:
  virtual ~BackendDevices() = default;

  // "cpu" or "cuda".
  virtual absl::string_view name() const = 0;
  virtual std::vector<DeviceDescription> Devices() const = 0;
  // False once no device can serve (e.g. every GPU hit a sticky error).
  virtual bool Healthy() const = 0;
  // The device a new request without stored operands should run on (least loaded).
  virtual int PickDevice() = 0;
  virtual BackendStats Stats() const = 0;
  // Called once on each thread that will run operations, before its first: per-thread
  // state that thread's first operation would otherwise set up (CUDA: the runtime's
  // state and each device's context, current on the thread).
  virtual void PrepareThread() {}
  // The most host memory the backend keeps outside live arrays for reuse (CPU: freed
  // arrays' blocks), which a server charges to its host budget at start.
  virtual uint64_t max_kept_host_bytes() const { return 0; }
  // Whether arrays live in host memory (kHostDevice): results stream from them as they
  // are, where a device's results are copied into the server's recycled chunk blocks.
  virtual bool arrays_on_host() const { return false; }
};

// Arrays on the backend's devices: allocation, copies to, from and between them,
// and checks of their values.
class BackendArrays {
 public:
  virtual ~BackendArrays() = default;

  // `Allocate` fails with RESOURCE_EXHAUSTED when the device is full.
  virtual absl::StatusOr<std::shared_ptr<Array>> Allocate(DType dtype, Shape shape,
                                                          int device) = 0;
  // Host <-> array copies of `bytes` bytes at byte `offset` within the array.
  virtual absl::Status CopyToArray(const void* host_src, size_t offset, size_t bytes,
                                   Array& dst) = 0;
  virtual absl::Status CopyFromArray(const Array& src, size_t offset, size_t bytes,
                                     void* host_dst) = 0;
  // The pieces, concatenated, copied to the array at byte `offset`: one pass over
  // the host bytes (the CUDA backend gathers them into its pinned staging).
  virtual absl::Status CopyPiecesToArray(std::span<const HostPiece> pieces, size_t offset,
                                         Array& dst);
  // Small work from host bytes: arrays on `device` made from `inputs`, an output
  // of `out_dtype` and `out_shape`, and `run` over them; returns the output. This
  // one goes step by step (each allocation and copy complete before the next) and
  // returns the output where it was computed; the CUDA backend queues everything on
  // one stream, the output's copy to its pinned memory included, waits once and
  // returns the output in host memory, where the bytes fit that memory.
  virtual absl::StatusOr<std::shared_ptr<Array>> RunFromHost(std::span<const HostInput> inputs,
                                                             DType out_dtype,
                                                             const Shape& out_shape, int device,
                                                             OpContext& ctx, ArraysRun run);
  // Whole-array copy between two arrays of equal byte size, possibly on two
  // devices (peer to peer where the GPUs allow it).
  virtual absl::Status CopyArray(const Array& src, Array& dst) = 0;
  // The values of an array that lies on the backend (a stored buffer) against
  // `rule`: INVALID_ARGUMENT "<name>[i] is <value>; <statement>" for the first
  // element that breaks it, as CheckElements says it for host data.
  virtual absl::Status CheckValues(const Array& array, absl::string_view name,
                                   const ValueRule& rule) = 0;
};

// Same-host zero copy (server/shared_memory_*): the memory of client processes
// on the server's host, pinned or opened for the backend's copies.
class BackendSharedMemory {
 public:
  virtual ~BackendSharedMemory() = default;

  // Registers `bytes` of host memory at `data` with the device driver, so that
  // copies to and from it run at pinned speed, until the returned handle is
  // dropped; null where nothing needs it.
  virtual absl::StatusOr<std::shared_ptr<void>> PinHostMemory(void* data, size_t bytes) = 0;
  // Opens the device memory of a CUDA IPC handle (cudaIpcMemHandle_t bytes) on the
  // GPU with `pci_bus_id`. FAILED_PRECONDITION when this backend has no such GPU
  // (another host, another GPU, or the CPU backend), INVALID_ARGUMENT for a
  // malformed handle, NOT_FOUND when the handle's memory is gone.
  virtual absl::StatusOr<IpcMemory> OpenIpcMemory(absl::string_view handle,
                                                  absl::string_view pci_bus_id) = 0;
};

// The operations, on well-formed arrays of the backend's.
class BackendOperations {
 public:
  virtual ~BackendOperations() = default;

  // out = factors * values, NumPy broadcasting; out has the broadcast shape.
  virtual absl::Status DiscountProduct(const Array& factors, const Array& values, Array& out,
                                       OpContext& ctx) = 0;
  // out (n_ref, n_lat, n_lon): great-circle distance from each reference to the mesh.
  virtual absl::Status HaversineMesh(const LatLonMesh& mesh, std::span<const GeoPoint> refs,
                                     double radius, Array& out, OpContext& ctx) = 0;
  // out (n_ref, *lat.shape): distance from each reference to each (lat, lon) pair.
  virtual absl::Status HaversinePoints(const Array& lat, const Array& lon,
                                       std::span<const GeoPoint> refs, double radius,
                                       Array& out, OpContext& ctx) = 0;
  // Each row along the last axis divided by its norm. A zero or non-finite norm
  // fails with INVALID_ARGUMENT naming the first such row; `out` is then unspecified.
  virtual absl::Status Normalize(const Array& in, NormKind norm, Array& out,
                                 OpContext& ctx) = 0;
  // scipy.signal.lombscargle over angular frequencies `freqs` (an array of shape
  // (M)) or `grid` (generated on the device). x: (N) or (B, N); y: (N) or (B, N);
  // weights: null or y's shape or (N); out: (M) or (B, M); or a ragged batch of
  // flat x, y, weights with options.row_offsets, out (B, M); options.amplitude: out
  // (..., M, 2). options.method kAuto
  // picks direct or NUFFT (ChooseLombScargleMethod); ctx.method says which ran.
  virtual absl::Status LombScargle(const Array& x, const Array& y, const Array* weights,
                                   const Array* freqs, const Linspace& grid,
                                   const LombScargleOptions& options, Array& out,
                                   OpContext& ctx) = 0;
};

// A compute backend: every role.
class Backend : public BackendDevices,
                public BackendArrays,
                public BackendSharedMemory,
                public BackendOperations {};

enum class BackendKind { kAuto, kCpu, kCuda };

// How a CUDA host thread waits for the device: spinning (lowest latency, a core
// each), spinning that yields the core to ready threads, or sleeping until the
// device signals (cudaDeviceSchedule{Spin,Yield,BlockingSync}).
enum class CudaSync { kSpin, kYield, kBlock };

struct BackendOptions {
  BackendKind kind = BackendKind::kAuto;
  int cpu_threads = 0;            // 0: hardware concurrency
  std::vector<int> cuda_devices;  // empty: all visible
  // Many executor threads wait at once: spinning ones would take the cores the
  // gRPC threads need.
  CudaSync cuda_sync = CudaSync::kYield;
  uint64_t pinned_staging_bytes = 64ull << 20;
  uint64_t pool_release_threshold_bytes = 0;  // 0: keep all freed memory cached
  // Device memory each pool reserves (allocates and frees) at start-up, so that the
  // first requests allocate from warm memory rather than from the driver.
  uint64_t pool_prewarm_bytes = 1ull << 30;
  // Memory budgets every array draws from (kernels/memory/memory_budget.h); 0 derives
  // them: a fraction of physical RAM, and of each GPU's memory.
  uint64_t host_memory_budget_bytes = 0;
  // Where the cgroup filesystem is mounted: the host budget's default sees the
  // container's memory limit there (tests point it at a fake tree).
  std::string cgroup_root = "/sys/fs/cgroup";
  uint64_t device_memory_budget_bytes = 0;  // per GPU
  // How long an allocation that does not fit waits for memory to be released.
  absl::Duration memory_budget_wait = absl::Seconds(1);
};

struct BackendSelection {
  std::unique_ptr<Backend> backend;
  std::string note;  // why this backend, for the log and ServerInfo
};

// kAuto: CUDA when compiled in and a usable device exists, else CPU.
absl::StatusOr<BackendSelection> CreateBackend(const BackendOptions& options);

}  // namespace gpucompute
