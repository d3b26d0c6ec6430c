// Times every normalize path (normalize_variants.h) against the shipped launcher
// (LaunchNormalize), kernels only, per shape, with what each path runs there and its
// largest relative error against the CPU backend's float64 result (on the shape's
// first rows, at most 1e6 elements).
//
//   normalize_lab [--reps N]
//
// Shapes: every row length from 64 to 1e6 (1e8 float32 / 5e7 float64 elements in all),
// the seed's short and long rows.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dev/cuda/lab.h"
#include "dev/cuda/normalize_variants.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/launchers.h"

namespace gpucompute::lab {
namespace {

namespace cl = cuda::lab;
using V = cl::NormalizeVariant;

constexpr std::pair<V, const char*> kVariants[] = {
    {V::kTwoReads, "two reads"}, {V::kTile, "tile"}, {V::kCluster, "cluster"}, {V::kNarrowGroups, "narrow groups"},
    {V::kPipelined, "pipelined"}, {V::kPipelinedPlain, "pipelined plain"}, {V::kCluster16, "cluster16"},
    {V::kPipelinedLagged, "pipelined lagged"}, {V::kPipelinedRowByRow, "pipelined rowwise"},
    {V::kClusterBulk, "cluster bulk"}, {V::kClusterBulkV4, "cluster bulk v4"},
    {V::kClusterBulkHalf, "cluster bulk half"}, {V::kHeld, "held"}};

struct Case {
  int64_t rows, cols;
  DType dtype;
  NormKind norm;
  const char* name;
};

void Run(const Device& dev, const Case& c) {
  Buffer in(dev, c.dtype, c.rows * c.cols, 0.5, 1.5, 31), out(dev, c.dtype, c.rows * c.cols, 0, 0, 0);
  cuda::NormalizeResult* res = nullptr;
  LAB_CHECK(cudaMalloc(reinterpret_cast<void**>(&res), sizeof(*res)));
  // The reference: the CPU backend in float64 on the first rows.
  const int64_t check_rows = std::max<int64_t>(1, std::min<int64_t>(c.rows, 1000000 / c.cols));
  static std::unique_ptr<Backend> cpu = CreateCpuBackend(0);
  auto x = cpu->Allocate(DType::kFloat64, {check_rows, c.cols}, 0), y = cpu->Allocate(DType::kFloat64, {check_rows, c.cols}, 0);
  if (!x.ok() || !y.ok()) std::exit(1);
  const std::vector<double> host_in = in.Read(check_rows * c.cols);
  std::memcpy((*x)->data(), host_in.data(), host_in.size() * sizeof(double));
  OpContext ctx;
  if (!cpu->Normalize(**x, c.norm, **y, ctx).ok()) std::exit(1);
  const double* w = (*y)->data_as<double>();
  const std::vector<double> want(w, w + check_rows * c.cols);
  auto error = [&](auto launch) {
    LAB_CHECK(launch(check_rows));
    LAB_CHECK(cudaStreamSynchronize(dev.stream));
    return MaxRelativeError(out.Read(check_rows * c.cols), want, 0);
  };
  const std::string shape = std::string(c.name) + " " + Short(c.dtype) + " " + std::to_string(c.rows) + "x" +
                            std::to_string(c.cols);
  auto shipped = [&](int64_t rows) {
    return cuda::LaunchNormalize(c.dtype, in.p, out.p, rows, c.cols, c.norm, res, dev.Env());
  };
  const double shipped_ms = dev.Time([&] { return shipped(c.rows); });
  PrintRow(shape, "shipped: " + cl::DescribeNormalizePolicy(c.dtype, c.rows, c.cols, V::kDefault), shipped_ms,
           shipped_ms, error(shipped));
  for (const auto& [variant, name] : kVariants) {
    auto candidate = [&](int64_t rows) {
      return cl::LaunchNormalizeVariant(c.dtype, in.p, out.p, rows, c.cols, c.norm, res, dev.Env(), variant);
    };
    PrintRow(shape, std::string(name) + ": " + cl::DescribeNormalizePolicy(c.dtype, c.rows, c.cols, variant),
             dev.Time([&] { return candidate(c.rows); }), shipped_ms, error(candidate));
  }
  cudaFree(res);
}

int Main(int argc, char** argv) {
  Device dev;
  if (!dev.OpenWithArgs(argc, argv)) return 0;
  std::vector<Case> cases = {{10, 10000000, DType::kFloat32, NormKind::kSum, "sum"},
                             {10, 10000000, DType::kFloat64, NormKind::kL2, "l2"},
                             {1000000, 100, DType::kFloat32, NormKind::kSum, "sum"},
                             {10000000, 10, DType::kFloat32, NormKind::kL1, "l1"}};
  for (int64_t cols : {int64_t{64}, int64_t{128}, int64_t{256}, int64_t{512}, int64_t{1000}, int64_t{10000},
                       int64_t{50000}, int64_t{100000}, int64_t{400000}, int64_t{1000000}}) {
    cases.push_back({100000000 / cols, cols, DType::kFloat32, NormKind::kSum, "sum"});
    cases.push_back({50000000 / cols, cols, DType::kFloat64, NormKind::kL2, "l2"});
  }
  for (const Case& c : cases) Run(dev, c);
  return 0;
}

}  // namespace
}  // namespace gpucompute::lab

int main(int argc, char** argv) { return gpucompute::lab::Main(argc, argv); }
