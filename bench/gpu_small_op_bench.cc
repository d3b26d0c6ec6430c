// Where the GPU part of a small request goes: one 1024-element float32
// normalize from host memory to host memory, timed per call on the host clock.
//
//   gpu_small_op_bench [--sync=spin|yield|block] [--calls=N] [--threads=1,4,16] [--gap_us=N]
//                      [--mmap_threshold_bytes=N]
//
// Rows, each the p50 / p99 of N calls in microseconds:
// - copies: 4 KiB pinned in and out on one stream, one wait (no kernel);
// - kernel: the same with the normalize kernel between, its buffers allocated once;
// - graph: that sequence captured once as a CUDA graph, replayed (one launch, one wait);
//   then captured anew each call and the graph updated to it before the launch;
// - backend: Backend::RunFromHost as the server calls it (allocations, events, result
//   check, copies, one wait), single thread, then from several threads at once
//   (calls per second over all of them); then single thread with 64 Ki elements
//   (256 KiB in and out).
// --sync sets how the host thread waits for the GPU, as the server's --cuda_sync.
// --gap_us sleeps that long between timed calls, as a server at 1 request in flight
// is idle between requests (the GPU's clocks and the host thread may settle meanwhile).
#include <cuda_runtime_api.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/check_or_exit.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_resources.h"
#include "kernels/cuda/launchers.h"

namespace gpucompute {
namespace {

constexpr int64_t kCols = 1024;
constexpr size_t kBytes = kCols * sizeof(float);

struct Percentiles {
  double p50 = 0, p99 = 0;
};

Percentiles Of(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100]};
}

// Idle time between timed calls (--gap_us).
std::chrono::microseconds g_gap{0};

// Calls `one` `calls` times after 200 warm-ups, g_gap apart; microseconds per call.
Percentiles TimeCalls(int calls, const std::function<void()>& one) {
  for (int i = 0; i < 200; ++i) one();
  std::vector<double> us;
  us.reserve(calls);
  for (int i = 0; i < calls; ++i) {
    if (g_gap.count() > 0) std::this_thread::sleep_for(g_gap);
    const auto t0 = std::chrono::steady_clock::now();
    one();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return Of(std::move(us));
}

void Print(const char* row, Percentiles p) {
  std::printf("  %-34s p50 %7.1f us  p99 %7.1f us\n", row, p.p50, p.p99);
}

// The raw sequences on one stream with buffers made once.
// The stream every thread frees on in the "shared free" rows, as the backend's
// arrays are freed on one of its allocation streams.
cudaStream_t g_shared_stream = nullptr;
std::mutex g_shared_stream_mu;

struct Raw {
  cudaStream_t stream = nullptr;
  float* host_in = nullptr;
  float* host_out = nullptr;
  float* dev_in = nullptr;
  float* dev_out = nullptr;
  cuda::NormalizeResult* dev_result = nullptr;
  cuda::NormalizeResult* host_result = nullptr;
  cuda::LaunchEnv env;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaMemPool_t pool = nullptr;  // the backend's kind: device memory, never released
  cudaEvent_t start = nullptr, stop = nullptr;

  void Make(int sm_count, cudaMemPool_t pool) {
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host_in), kBytes, cudaHostAllocDefault));
    CHECK_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host_out), kBytes, cudaHostAllocDefault));
    CHECK_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&host_result), sizeof(*host_result), cudaHostAllocDefault));
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dev_in), kBytes));
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dev_out), kBytes));
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dev_result), sizeof(*dev_result)));
    for (int64_t i = 0; i < kCols; ++i) host_in[i] = 1.0f + static_cast<float>(i % 7);
    env = {stream, pool, sm_count};
    this->pool = pool;
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&stop));
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    Queue();
    CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    CHECK_CUDA(cudaGraphUpload(exec, stream));
  }
  void Copies() const {
    CHECK_CUDA(cudaMemcpyAsync(dev_in, host_in, kBytes, cudaMemcpyHostToDevice, stream));
    CHECK_CUDA(cudaMemcpyAsync(host_out, dev_in, kBytes, cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  void Queue() const {
    CHECK_CUDA(cudaMemcpyAsync(dev_in, host_in, kBytes, cudaMemcpyHostToDevice, stream));
    CHECK_CUDA(cuda::LaunchNormalize(DType::kFloat32, dev_in, dev_out, 1, kCols, NormKind::kL2,
                                     dev_result, env));
    CHECK_CUDA(cudaMemcpyAsync(host_result, dev_result, sizeof(*host_result),
                               cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaMemcpyAsync(host_out, dev_out, kBytes, cudaMemcpyDeviceToHost, stream));
  }
  void Kernel() const {
    Queue();
    CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  void LaunchOnly() const {
    CHECK_CUDA(cuda::LaunchNormalize(DType::kFloat32, dev_in, dev_out, 1, kCols, NormKind::kL2,
                                     dev_result, env));
    CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  // The kernel reads its input from pinned host memory and writes its result there:
  // no copy at all (host memory is mapped into the device's address space).
  void Mapped() const {
    CHECK_CUDA(cuda::LaunchNormalize(DType::kFloat32, host_in, host_out, 1, kCols, NormKind::kL2,
                                     host_result, env));
    CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  // The kernel's sequence with its two arrays and the result from a pool on this
  // stream, freed on this stream (`other` null) or on a stream shared by every thread,
  // as the backend frees arrays; `timed` adds the two events around the kernel.
  void Pooled(cudaStream_t other, bool timed) const {
    float* in = nullptr;
    float* out = nullptr;
    void* result = nullptr;
    CHECK_CUDA(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&in), kBytes, pool, stream));
    CHECK_CUDA(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&out), kBytes, pool, stream));
    CHECK_CUDA(cudaMallocFromPoolAsync(&result, sizeof(cuda::NormalizeResult), pool, stream));
    CHECK_CUDA(cudaMemcpyAsync(in, host_in, kBytes, cudaMemcpyHostToDevice, stream));
    if (timed) CHECK_CUDA(cudaEventRecord(start, stream));
    CHECK_CUDA(cuda::LaunchNormalize(DType::kFloat32, in, out, 1, kCols, NormKind::kL2,
                                     static_cast<cuda::NormalizeResult*>(result), env));
    if (timed) CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaMemcpyAsync(host_result, result, sizeof(*host_result), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaMemcpyAsync(host_out, out, kBytes, cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    if (timed) {
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    }
    CHECK_CUDA(cudaFreeAsync(result, stream));
    for (void* p : {static_cast<void*>(in), static_cast<void*>(out)}) {
      if (other == nullptr) {
        CHECK_CUDA(cudaFreeAsync(p, stream));
      } else {
        std::lock_guard<std::mutex> lock(g_shared_stream_mu);
        CHECK_CUDA(cudaFreeAsync(p, other));
      }
    }
  }
  void PooledSameStream() const { Pooled(nullptr, false); }
  void PooledSharedFree() const { Pooled(g_shared_stream, false); }
  void PooledSharedFreeTimed() const { Pooled(g_shared_stream, true); }
  void Graph() const {
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  // What a server pays that cannot tell a repeat from the request alone (the
  // operation's arguments are made inside its launch): the sequence captured again,
  // the instantiated graph updated to it, then launched.
  void GraphRecaptured() const {
    cudaGraph_t captured = nullptr;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    Queue();
    CHECK_CUDA(cudaStreamEndCapture(stream, &captured));
    cudaGraphExecUpdateResultInfo info{};
    CHECK_CUDA(cudaGraphExecUpdate(exec, captured, &info));
    CHECK_CUDA(cudaGraphDestroy(captured));
    Graph();
  }
};

// `threads` threads, thread t calling what make_call(t) returns (made on that
// thread) over and over; calls per second over all of them, after a warm-up.
double CallsPerSecond(int threads, const std::function<std::function<void()>(int)>& make_call) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> done{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const std::function<void()> call = make_call(t);
      while (!stop.load(std::memory_order_relaxed)) {
        call();
        done.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t before = done.load();
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  const int64_t counted = done.load() - before;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop.store(true);
  for (std::thread& t : pool) t.join();
  return counted / seconds;
}

void PrintCallsPerSecond(int threads, double calls) {
  std::printf("    %2d threads %9.0f calls/s\n", threads, calls);
}

int Main(int argc, char** argv) {
  BackendOptions options;
  int calls = 5000;
  std::vector<int> thread_counts = {1, 4, 16};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--sync=spin") options.cuda_sync = CudaSync::kSpin;
    else if (arg == "--sync=yield") options.cuda_sync = CudaSync::kYield;
    else if (arg == "--sync=block") options.cuda_sync = CudaSync::kBlock;
    else if (arg.rfind("--gap_us=", 0) == 0) {
      int gap = 0;
      if (!absl::SimpleAtoi(arg.substr(9), &gap) || gap < 0) CHECK_OK(absl::InvalidArgumentError(arg));
      g_gap = std::chrono::microseconds(gap);
    } else if (arg.rfind("--mmap_threshold_bytes=", 0) == 0) {
      // As the server fixes it (server/main.cc): larger blocks come fresh from mmap.
      int bytes = 0;
      if (!absl::SimpleAtoi(arg.substr(23), &bytes) || bytes <= 0) CHECK_OK(absl::InvalidArgumentError(arg));
      mallopt(M_MMAP_THRESHOLD, bytes);
    } else if (arg.rfind("--calls=", 0) == 0) CHECK_OK(absl::SimpleAtoi(arg.substr(8), &calls) ? absl::OkStatus() : absl::InvalidArgumentError(arg));
    else if (arg.rfind("--threads=", 0) == 0) {
      thread_counts.clear();
      for (absl::string_view t : absl::StrSplit(arg.substr(10), ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(t, &n) || n < 1) CHECK_OK(absl::InvalidArgumentError(arg));
        thread_counts.push_back(n);
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: nothing to time\n");
    return 0;
  }
  absl::StatusOr<std::unique_ptr<Backend>> made = CreateCudaBackend(options);
  CHECK_OK(made.status());
  Backend& backend = **made;
  const int device = backend.PickDevice();
  const cuda::ScopedDevice on_device(device);
  CHECK_CUDA(on_device.error());
  static const char* const kSyncNames[] = {"spin", "yield", "block"};
  std::printf("small op: normalize l2 1 x %lld float32, %s wait, %d calls a row, %lld us apart\n",
              static_cast<long long>(kCols), kSyncNames[static_cast<int>(options.cuda_sync)], calls,
              static_cast<long long>(g_gap.count()));

  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  cudaMemPool_t pool = nullptr;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  CHECK_CUDA(cudaMemPoolCreate(&pool, &props));
  uint64_t keep = UINT64_MAX;
  CHECK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  CHECK_CUDA(cudaStreamCreateWithFlags(&g_shared_stream, cudaStreamNonBlocking));
  Raw raw;
  raw.Make(prop.multiProcessorCount, pool);
  struct Sequence {
    const char* name;
    void (Raw::*one)() const;
  };
  const Sequence sequences[] = {
      {"copies (4 KiB in, out, one wait)", &Raw::Copies},
      {"kernel (in, normalize, out, wait)", &Raw::Kernel},
      {"launch only (normalize, wait)", &Raw::LaunchOnly},
      {"mapped (normalize host to host)", &Raw::Mapped},
      {"graph (kernel's sequence replayed)", &Raw::Graph},
      {"graph, captured again and updated", &Raw::GraphRecaptured},
      {"pooled (3 allocations, freed here)", &Raw::PooledSameStream},
      {"pooled, 2 freed on a shared stream", &Raw::PooledSharedFree},
      {"pooled, shared free, events", &Raw::PooledSharedFreeTimed},
  };
  for (const Sequence& seq : sequences) {
    Print(seq.name, TimeCalls(calls, [&] { (raw.*seq.one)(); }));
    for (int threads : thread_counts) {
      std::vector<Raw> raws(threads);  // each thread its own stream and buffers
      for (Raw& r : raws) r.Make(prop.multiProcessorCount, pool);
      PrintCallsPerSecond(threads, CallsPerSecond(threads, [&](int t) {
                            return [&, t, on = std::make_shared<cuda::ScopedDevice>(device)] {
                              (raws[t].*seq.one)();
                            };
                          }));
    }
  }
  std::vector<float> expect(raw.host_out, raw.host_out + kCols);
  raw.Mapped();
  for (int64_t i = 0; i < kCols; ++i) {
    if (raw.host_out[i] != expect[i]) {
      std::printf("mapped result differs at %lld\n", static_cast<long long>(i));
      return 1;
    }
  }

  // Backend::RunFromHost of a 1 x `cols` normalize from `host_in`.
  const auto backend_call = [&](const float* host_in, int64_t cols) {
    const Shape shape = {1, cols};
    const HostPiece piece{host_in, static_cast<size_t>(cols) * sizeof(float)};
    const HostInput input{DType::kFloat32, shape, std::span<const HostPiece>(&piece, 1)};
    OpContext ctx;
    absl::StatusOr<std::shared_ptr<Array>> out = backend.RunFromHost(
        std::span<const HostInput>(&input, 1), DType::kFloat32, shape, device, ctx,
        [&](std::span<const std::shared_ptr<Array>> arrays, Array& result, OpContext& run_ctx) {
          return backend.Normalize(*arrays[0], NormKind::kL2, result, run_ctx);
        });
    CHECK_OK(out.status());
  };
  const auto small_call = [&] { backend_call(raw.host_in, kCols); };
  Print("backend RunFromHost", TimeCalls(calls, small_call));
  for (int threads : thread_counts) {
    PrintCallsPerSecond(threads, CallsPerSecond(threads, [&](int) {
                          backend.PrepareThread();
                          return small_call;
                        }));
  }
  // A result at the server's 256 KiB mmap threshold, about the largest whose input and
  // result fit one submission: its host block is reused (or faults when fresh).
  constexpr int64_t kLargeCols = 1 << 16;
  const std::vector<float> large_in(kLargeCols, 1.5f);
  Print("backend RunFromHost, 256 KiB", TimeCalls(calls, [&] { backend_call(large_in.data(), kLargeCols); }));
  return 0;
}

}  // namespace
}  // namespace gpucompute

int main(int argc, char** argv) { return gpucompute::Main(argc, argv); }
