// Great-circle distances, computed in float64 and stored in the output dtype.
//
//   h = sin^2(dlat / 2) + cos(lat1) cos(lat2) sin^2(dlon / 2),  d = 2 R asin(sqrt(h))
//
// asin(sqrt(h)) equals the spec's atan2(sqrt(h), sqrt(1 - h)) for h in [0, 1]
// (h is clamped there) and costs half as much. On a mesh the terms separate:
// sin^2(dlat/2) and cos(lat1) cos(lat2) depend on the row only, sin^2(dlon/2)
// on the column only, so each point costs one multiply-add, a sqrt and an asin.
#include <cmath>
#include <numbers>
#include <vector>

#include "common/status_macros.h"
#include "kernels/cpu/cpu_ops.h"

namespace gpucompute::cpu {
namespace {

constexpr double kRadiansPerDegree = std::numbers::pi / 180.0;

double HalfAngleSinSquared(double degrees) {
  const double s = std::sin(0.5 * degrees * kRadiansPerDegree);
  return s * s;
}

double Distance(double h, double two_radius) {
  return two_radius * std::asin(std::sqrt(std::clamp(h, 0.0, 1.0)));
}

// Row terms (one per reference and latitude) and column terms (one per
// reference and longitude) of the separable mesh formula.
struct MeshTerms {
  std::vector<double> lat_term;  // sin^2(dlat/2), [ref][lat]
  std::vector<double> cos_term;  // cos(ref lat) cos(lat), [ref][lat]
  std::vector<double> lon_term;  // sin^2(dlon/2), [ref][lon]
};

absl::StatusOr<MeshTerms> ComputeMeshTerms(ThreadPool& pool, const LatLonMesh& mesh,
                                           std::span<const GeoPoint> refs, const OpContext& ctx) {
  const int64_t n_ref = static_cast<int64_t>(refs.size());
  const int64_t n_lat = mesh.lat.count;
  const int64_t n_lon = mesh.lon.count;
  MeshTerms terms;
  terms.lat_term.resize(n_ref * n_lat);
  terms.cos_term.resize(n_ref * n_lat);
  terms.lon_term.resize(n_ref * n_lon);
  GC_RETURN_IF_ERROR(
      pool.ParallelFor(n_ref * n_lat, GrainFor(64), ctx, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
          const GeoPoint& ref = refs[k / n_lat];
          const double lat = mesh.lat.At(k % n_lat);
          terms.lat_term[k] = HalfAngleSinSquared(lat - ref.lat);
          terms.cos_term[k] =
              std::cos(ref.lat * kRadiansPerDegree) * std::cos(lat * kRadiansPerDegree);
        }
      }));
  GC_RETURN_IF_ERROR(
      pool.ParallelFor(n_ref * n_lon, GrainFor(64), ctx, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) {
          terms.lon_term[k] = HalfAngleSinSquared(mesh.lon.At(k % n_lon) - refs[k / n_lon].lon);
        }
      }));
  return terms;
}

template <typename T>
absl::Status RunMesh(ThreadPool& pool, const LatLonMesh& mesh, std::span<const GeoPoint> refs,
                     double radius, Array& out, const OpContext& ctx) {
  GC_ASSIGN_OR_RETURN(const MeshTerms terms, ComputeMeshTerms(pool, mesh, refs, ctx));
  const int64_t n_lat = mesh.lat.count;
  const int64_t n_lon = mesh.lon.count;
  const int64_t rows = static_cast<int64_t>(refs.size()) * n_lat;
  const double two_radius = 2 * radius;
  T* result = out.data_as<T>();
  // One output row: a fixed (reference, latitude) over all longitudes.
  return pool.ParallelFor(rows, GrainFor(n_lon, 1 << 15), ctx, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const double lat_term = terms.lat_term[row];
      const double cos_term = terms.cos_term[row];
      const double* lon_term = terms.lon_term.data() + (row / n_lat) * n_lon;
      T* out_row = result + row * n_lon;
      for (int64_t j = 0; j < n_lon; ++j) {
        out_row[j] = static_cast<T>(Distance(lat_term + cos_term * lon_term[j], two_radius));
      }
    }
  });
}

template <typename T>
absl::Status RunPoints(ThreadPool& pool, const Array& lat_array, const Array& lon_array,
                       std::span<const GeoPoint> refs, double radius, Array& out,
                       const OpContext& ctx) {
  const int64_t points = lat_array.size();
  const T* lat = lat_array.data_as<T>();
  const T* lon = lon_array.data_as<T>();
  T* result = out.data_as<T>();
  const double two_radius = 2 * radius;
  const int64_t n_ref = static_cast<int64_t>(refs.size());
  return pool.ParallelFor(points, GrainFor(n_ref, 1 << 14), ctx, [&](int64_t begin, int64_t end) {
    // cos(lat) of the block's points, shared by all references.
    std::vector<double> cos_lat(end - begin);
    for (int64_t p = begin; p < end; ++p) {
      cos_lat[p - begin] = std::cos(static_cast<double>(lat[p]) * kRadiansPerDegree);
    }
    for (int64_t r = 0; r < n_ref; ++r) {
      const GeoPoint& ref = refs[r];
      const double cos_ref = std::cos(ref.lat * kRadiansPerDegree);
      T* out_ref = result + r * points;
      for (int64_t p = begin; p < end; ++p) {
        const double h = HalfAngleSinSquared(static_cast<double>(lat[p]) - ref.lat) +
                         cos_ref * cos_lat[p - begin] *
                             HalfAngleSinSquared(static_cast<double>(lon[p]) - ref.lon);
        out_ref[p] = static_cast<T>(Distance(h, two_radius));
      }
    }
  });
}

// Point values follow the latitude and longitude rules. The server checks inline
// points before they arrive; stored ones are checked only here.
template <typename T>
absl::Status CheckPointValues(const Array& lat, const Array& lon) {
  const T* lat_values = lat.data_as<T>();
  const T* lon_values = lon.data_as<T>();
  GC_RETURN_IF_ERROR(CheckElements(
      lat.size(), [&](int64_t i) { return double{lat_values[i]}; }, "lat", kLatitudeRule));
  return CheckElements(
      lon.size(), [&](int64_t i) { return double{lon_values[i]}; }, "lon", kLongitudeRule);
}

}  // namespace

absl::Status HaversineMesh(ThreadPool& pool, const LatLonMesh& mesh, std::span<const GeoPoint> refs,
                           double radius, Array& out, const OpContext& ctx) {
  GC_RETURN_IF_ERROR(CheckHaversineMesh(mesh, refs, radius, out));
  if (out.size() == 0) return absl::OkStatus();
  if (out.dtype() == DType::kFloat32) return RunMesh<float>(pool, mesh, refs, radius, out, ctx);
  return RunMesh<double>(pool, mesh, refs, radius, out, ctx);
}

absl::Status HaversinePoints(ThreadPool& pool, const Array& lat, const Array& lon,
                             std::span<const GeoPoint> refs, double radius, Array& out,
                             const OpContext& ctx) {
  GC_RETURN_IF_ERROR(CheckHaversinePoints(lat, lon, refs, radius, out));
  if (out.size() == 0) return absl::OkStatus();
  if (out.dtype() == DType::kFloat32) {
    GC_RETURN_IF_ERROR(CheckPointValues<float>(lat, lon));
    return RunPoints<float>(pool, lat, lon, refs, radius, out, ctx);
  }
  GC_RETURN_IF_ERROR(CheckPointValues<double>(lat, lon));
  return RunPoints<double>(pool, lat, lon, refs, radius, out, ctx);
}

}  // namespace gpucompute::cpu
