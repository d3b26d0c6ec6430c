// Times every haversine candidate (haversine_variants.h) against the shipped launcher
// (LaunchHaversineMesh / LaunchHaversinePoints), kernels only, and gives each one's
// largest relative error against the CPU backend's float64 distances.
//
//   haversine_lab [--reps N]
//
// Mesh: 1e4 x 1e4 around the reference (every h small) and across the globe (h spans
// [0, 1] within a warp); errors on the 1e3 x 1e3 versions. Points: 1e7 x 4 references;
// errors on 1e5 x 4.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dev/cuda/haversine_variants.h"
#include "dev/cuda/lab.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/launchers.h"

namespace gpucompute::lab {
namespace {

namespace cl = cuda::lab;
using Angle = cl::HaversineAngle;
using Schedule = cl::HaversineMeshSchedule;
using Points = cl::HaversinePointsVariant;

constexpr std::pair<Angle, const char*> kAngles[] = {
    {Angle::kAtan2, "atan2"}, {Angle::kAsinSplit, "asin_split"}, {Angle::kAsin, "asin"},
    {Angle::kAsinPolynomial, "asin_poly"}, {Angle::kAsinReduced, "reduced"}, {Angle::kAsinReducedNewton, "newton"},
    {Angle::kAsinReducedBranchFree, "branchfree"}, {Angle::kAsinReducedLean, "lean"}};
constexpr std::pair<Schedule, const char*> kSchedules[] = {
    {Schedule::kCovering, "covering"}, {Schedule::kFullWaves, "waves"}, {Schedule::kFullWavesTwoRows, "waves2"},
    {Schedule::kFullWavesFused, "fused"}, {Schedule::kFullWavesFusedWide, "wide"},
    {Schedule::kFullWavesFusedStaged, "staged"}, {Schedule::kFullWavesFusedWideStaged, "wide staged"}};
constexpr std::pair<Points, const char*> kPoints[] = {
    {Points::kSplitTerms, "split"}, {Points::kDirect, "direct"}, {Points::kSplitPrefetch, "prefetch"},
    {Points::kReduced, "reduced"}, {Points::kReducedPrefetch, "reduced prefetch"},
    {Points::kReducedNewton, "reduced newton"}, {Points::kReducedNewtonPrefetch, "newton prefetch"},
    {Points::kReducedBranchFree, "branchfree"}, {Points::kChord, "chord"}, {Points::kChordPrefetch, "chord prefetch"},
    {Points::kReducedLean, "reduced lean"}, {Points::kChordVector, "chord vector"}};

constexpr double kRadius = 6371.0088;

struct Refs {
  std::vector<GeoPoint> points;
  cuda::RefPoint* d = nullptr;
  explicit Refs(std::vector<GeoPoint> p) : points(std::move(p)) {
    std::vector<cuda::RefPoint> h(points.size());
    for (size_t i = 0; i < points.size(); ++i) {
      h[i] = {points[i].lat, points[i].lon, std::cos(points[i].lat * 0.017453292519943295), 0};
    }
    LAB_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), h.size() * sizeof(h[0])));
    LAB_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(h[0]), cudaMemcpyHostToDevice));
  }
  ~Refs() { cudaFree(d); }
};

Backend& Cpu() {
  static std::unique_ptr<Backend> cpu = CreateCpuBackend(0);
  return *cpu;
}

std::vector<double> CpuMesh(const LatLonMesh& mesh, const Refs& refs) {
  auto out = Cpu().Allocate(DType::kFloat64, {static_cast<int64_t>(refs.points.size()), mesh.lat.count, mesh.lon.count}, 0);
  OpContext ctx;
  if (!out.ok() || !Cpu().HaversineMesh(mesh, refs.points, kRadius, **out, ctx).ok()) std::exit(1);
  const double* p = (*out)->data_as<double>();
  return std::vector<double>(p, p + (*out)->size());
}

void Mesh(const Device& dev, DType t) {
  const Refs refs({{30, 101}});
  for (const auto& [mesh, label] : {std::pair{LatLonMesh{{29, 31, 10000}, {99, 101, 10000}}, "1e4 x 1e4"},
                                    std::pair{LatLonMesh{{-89.5, 89.5, 10000}, {-180, 180, 10000}}, "1e4 x 1e4 globe"}}) {
    const cuda::MeshAxis lat{mesh.lat.start, mesh.lat.stop, mesh.lat.count};
    const cuda::MeshAxis lon{mesh.lon.start, mesh.lon.stop, mesh.lon.count};
    const cuda::MeshAxis small_lat{mesh.lat.start, mesh.lat.stop, 1000}, small_lon{mesh.lon.start, mesh.lon.stop, 1000};
    const std::vector<double> want = CpuMesh(LatLonMesh{{mesh.lat.start, mesh.lat.stop, 1000},
                                                        {mesh.lon.start, mesh.lon.stop, 1000}}, refs);
    Buffer out(dev, t, mesh.lat.count * mesh.lon.count, 0, 0, 0);
    const std::string shape = std::string("mesh ") + Short(t) + " " + label;
    auto error = [&](auto launch) {
      LAB_CHECK(launch(small_lat, small_lon));
      LAB_CHECK(cudaStreamSynchronize(dev.stream));
      return MaxRelativeError(out.Read(1000 * 1000), want, 1e-3);
    };
    auto shipped = [&](const cuda::MeshAxis& a, const cuda::MeshAxis& b) {
      return cuda::LaunchHaversineMesh(t, a, b, refs.d, 1, kRadius, out.p, dev.Env());
    };
    const double shipped_ms = dev.Time([&] { return shipped(lat, lon); });
    PrintRow(shape, "shipped", shipped_ms, shipped_ms, error(shipped));
    for (const auto& [angle, angle_name] : kAngles) {
      for (const auto& [schedule, schedule_name] : kSchedules) {
        auto candidate = [&](const cuda::MeshAxis& a, const cuda::MeshAxis& b) {
          return cl::LaunchHaversineMeshVariant(t, a, b, refs.d, 1, kRadius, out.p, dev.Env(), angle, schedule);
        };
        PrintRow(shape, std::string(angle_name) + " " + schedule_name, dev.Time([&] { return candidate(lat, lon); }),
                 shipped_ms, error(candidate));
      }
    }
  }
}

void PointsCase(const Device& dev, DType t) {
  const Refs refs({{30, 101}, {-12, 40}, {51, 0}, {0, -170}});
  const int64_t n = 10000000, small = 100000;
  Buffer lat(dev, t, n, -89, 89, 22), lon(dev, t, n, -180, 180, 23), out(dev, t, 4 * n, 0, 0, 0);
  cuda::PointsResult* res = nullptr;
  LAB_CHECK(cudaMalloc(reinterpret_cast<void**>(&res), sizeof(*res)));
  const std::vector<double> la = lat.Read(small), lo = lon.Read(small);
  auto cpu_lat = Cpu().Allocate(DType::kFloat64, {small}, 0), cpu_lon = Cpu().Allocate(DType::kFloat64, {small}, 0);
  auto cpu_out = Cpu().Allocate(DType::kFloat64, {4, small}, 0);
  if (!cpu_lat.ok() || !cpu_lon.ok() || !cpu_out.ok()) std::exit(1);
  std::memcpy((*cpu_lat)->data(), la.data(), small * sizeof(double));
  std::memcpy((*cpu_lon)->data(), lo.data(), small * sizeof(double));
  OpContext ctx;
  if (!Cpu().HaversinePoints(**cpu_lat, **cpu_lon, refs.points, kRadius, **cpu_out, ctx).ok()) std::exit(1);
  const double* w = (*cpu_out)->data_as<double>();
  const std::vector<double> want(w, w + 4 * small);
  const std::string shape = std::string("points ") + Short(t) + " 1e7 x 4";
  auto error = [&](auto launch) {
    LAB_CHECK(launch(small));
    LAB_CHECK(cudaStreamSynchronize(dev.stream));
    return MaxRelativeError(out.Read(4 * small), want, 1e-3);
  };
  auto shipped = [&](int64_t m) {
    return cuda::LaunchHaversinePoints(t, lat.p, lon.p, m, refs.d, 4, kRadius, out.p, res, dev.Env());
  };
  const double shipped_ms = dev.Time([&] { return shipped(n); });
  PrintRow(shape, "shipped", shipped_ms, shipped_ms, error(shipped));
  for (const auto& [variant, name] : kPoints) {
    auto candidate = [&](int64_t m) {
      return cl::LaunchHaversinePointsVariant(t, lat.p, lon.p, m, refs.d, 4, kRadius, out.p, res, dev.Env(), variant);
    };
    PrintRow(shape, name, dev.Time([&] { return candidate(n); }), shipped_ms, error(candidate));
  }
  cudaFree(res);
}

int Main(int argc, char** argv) {
  Device dev;
  if (!dev.OpenWithArgs(argc, argv)) return 0;
  for (DType t : {DType::kFloat32, DType::kFloat64}) Mesh(dev, t);
  for (DType t : {DType::kFloat32, DType::kFloat64}) PointsCase(dev, t);
  return 0;
}

}  // namespace
}  // namespace gpucompute::lab

int main(int argc, char** argv) { return gpucompute::lab::Main(argc, argv); }
