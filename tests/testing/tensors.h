// Test data and expectations shared by the test files: random inputs from a
// stated seed, float64 references of every operation, tensor <-> proto helpers,
// and closeness checks whose tolerance each call states.
#pragma once

#include <complex>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "client/client.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "kernels/backend.h"
#include "kernels/dtype.h"
#include "kernels/norm.h"

namespace gpucompute::test {

namespace v1 = ::gpucompute::v1;

// ---- random inputs --------------------------------------------------------------

// A new seed on every call and every run; tests print it (SCOPED_TRACE) to reproduce
// with GPUCOMPUTE_SEED=<seed>, which every call then returns.
uint64_t FreshSeed();

// n draws from U[lo, hi), rounded to T. Element i depends only on (seed, i), so
// the values do not change with n or with how the work is split over threads.
template <typename T>
std::vector<T> Uniform(int64_t n, double lo, double hi, uint64_t seed);

// Successive draws from one seed, for tests that need many inputs.
class RandomInputs {
 public:
  explicit RandomInputs(uint64_t seed = FreshSeed()) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  std::vector<double> Uniform(int64_t n, double lo, double hi);

 private:
  uint64_t seed_;
  uint64_t draws_ = 0;
};

int64_t ElementCount(const Shape& shape);

// ---- float64 references ----------------------------------------------------------

// The NumPy broadcast of two shapes (assumed compatible).
Shape BroadcastShape(const Shape& a, const Shape& b);

// out = a * b, indexing each operand NumPy-style from the output index.
std::vector<double> BroadcastProduct(const std::vector<double>& a, const Shape& a_shape,
                                     const std::vector<double>& b, const Shape& b_shape,
                                     const Shape& out_shape);

// Great-circle distance between two points in degrees.
double HaversineDistance(double lat1, double lon1, double lat2, double lon2, double radius);

// Distances from each reference to every mesh point: (refs, n_lat, n_lon).
std::vector<double> MeshDistances(const LatLonMesh& mesh, const std::vector<GeoPoint>& refs,
                                  double radius);

// Each row of length `length` divided by its norm (accumulated in long double).
std::vector<double> NormalizeRows(const std::vector<double>& in, int64_t length, NormKind kind);

// The generalized Lomb-Scargle periodogram the backends implement, row by row,
// with sin and cos evaluated at every (frequency, sample).
//
// With `conditioning`, also each power's first-order sensitivity to relative
// errors of one unit in the weighted sums (CC, CS, YC, ...), the phases and the
// power itself: a kernel that forms those in a precision of unit roundoff u errs
// by a small multiple of u times it. p = 2 r' G^-1 r with G the (centred) 2x2
// matrix of cos/sin moments and r = (YC, YS); with (a, b) = G^-1 r,
// dp = 4 (a, b).dr - 2 (a, b)' dG (a, b), and |dG| <= u (the raw moments are
// at most 1), |dr| <= u sum w |y|. |a| + |b| grows as 1 / D where few samples
// leave cos and sin nearly dependent, or a floating mean cancels them. That
// holds while u stays well below G's smaller eigenvalue, lambda_min.
struct LombScargleConditioning {
  double first_order = 0;
  double lambda_min = 0;
};
std::vector<double> LombScarglePowers(const std::vector<double>& x, bool x_batched,
                                      const std::vector<double>& y,
                                      const std::vector<double>* weights, bool weights_batched,
                                      const std::vector<double>& freqs, int64_t batch, int64_t n,
                                      const LombScargleOptions& options,
                                      std::vector<LombScargleConditioning>* conditioning = nullptr);

// SciPy 1.15's normalize="amplitude" as SciPy computes it: tau from the moments, then
// the moments summed again at the phases f x - tau, where CS vanishes; a = YC / CC,
// b = YS / SS (CC and SS floored at float64's epsneg), (a + ib) e^{i tau}. options.normalize
// and amplitude are not read. conditioning: the first-order error of the amplitude
// for unit errors in the sums, and G's smaller eigenvalue, as for the powers.
std::vector<std::complex<double>> LombScargleAmplitudes(
    const std::vector<double>& x, bool x_batched, const std::vector<double>& y,
    const std::vector<double>* weights, bool weights_batched, const std::vector<double>& freqs,
    int64_t batch, int64_t n, const LombScargleOptions& options,
    std::vector<LombScargleConditioning>* conditioning = nullptr);

// SciPy 1.10's classic formula (tau form): independent of the generalized form,
// and equal to it without weights and floating mean.
std::vector<double> ClassicLombScargle(const std::vector<double>& x, std::vector<double> y,
                                       const std::vector<double>& freqs, bool precenter,
                                       bool normalize);

// ---- tensors and protos ------------------------------------------------------------

// `values` as a tensor of `dtype`, built field by field (no validation, so tests
// can make malformed ones); `stored` receives the values as rounded to the dtype.
v1::Tensor ToProto(std::span<const double> values, const Shape& shape, v1::DType dtype,
                   std::vector<double>* stored = nullptr);
inline v1::Tensor F64(std::vector<double> values, const Shape& shape) {
  return ToProto(values, shape, v1::FLOAT64);
}
inline v1::Tensor F32(std::vector<double> values, const Shape& shape) {
  return ToProto(values, shape, v1::FLOAT32);
}
inline v1::Operand Operand(v1::Tensor tensor) {
  v1::Operand operand;
  *operand.mutable_tensor() = std::move(tensor);
  return operand;
}

// A result's elements as float64; empty (and a test failure) if it cannot be read.
std::vector<double> Values(const client::Result& result);

// ---- closeness ----------------------------------------------------------------------

// Every element within atol + rtol * |expected| (an unwritten NaN fails).
void ExpectNear(const std::vector<double>& actual, const std::vector<double>& expected,
                double rtol, double atol);

// |out - ref| <= rtol * max(|ref|, 1e-3 * max |ref|): relative, with a floor at
// the result's scale so that values near zero are not held to nothing.
void ExpectCloseAtScale(const std::vector<double>& out, const std::vector<double>& ref,
                        double rtol);

// ||got - ref|| / ||ref|| over the elements where ref is finite; a non-finite got
// where ref is finite (or the reverse) counts as bad.
struct Diff {
  double rel = 0;
  double max_abs = 0;
  int64_t bad = 0;
  int64_t first_bad = -1;
};
Diff Compare(const std::vector<double>& got, const std::vector<double>& ref);

// No bad elements and ||got - ref|| <= rel_l2 * ||ref||: for results that are
// ill-conditioned at some points, or accumulated in lower precision, where
// elementwise bounds would measure the conditioning rather than the implementation.
void ExpectRelativeL2(const std::vector<double>& got, const std::vector<double>& ref,
                      double rel_l2);

// Every |actual[i] - expected[i]| <= bounds[i] (an unwritten NaN fails).
void ExpectWithinBounds(const std::vector<double>& actual, const std::vector<double>& expected,
                        const std::vector<double>& bounds);

template <typename T>
std::vector<double> ToDoubles(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace gpucompute::test
