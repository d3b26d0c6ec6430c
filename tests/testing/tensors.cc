#include "tests/testing/tensors.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <complex>
#include <numbers>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/lombscargle_power.h"

namespace gpucompute::test {
namespace {

// SplitMix64: a counter-based generator, so draws can be made in parallel.
uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Splits [0, n) over up to 16 threads once n is large enough to be worth it.
template <typename F>
void ParallelFor(int64_t n, F f) {
  const int threads =
      static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  if (n < (1 << 16) || threads == 1) {
    f(0, n);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int64_t b = t * per, e = std::min(n, b + per);
    if (b < e) pool.emplace_back([=] { f(b, e); });
  }
  for (auto& t : pool) t.join();
}

}  // namespace

uint64_t FreshSeed() {
  // GPUCOMPUTE_SEED=<a seed a failure printed>: every test draws from it, to reproduce.
  if (const char* fixed = std::getenv("GPUCOMPUTE_SEED")) return std::strtoull(fixed, nullptr, 10);
  static std::atomic<uint64_t> counter{0};
  static const uint64_t base =
      std::random_device{}() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return base + 0x9e3779b97f4a7c15ull * (++counter);
}

template <typename T>
std::vector<T> Uniform(int64_t n, double lo, double hi, uint64_t seed) {
  std::vector<T> v(static_cast<size_t>(n));
  ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const uint64_t bits = Mix(seed ^ (static_cast<uint64_t>(i) * 0xd1342543de82ef95ull));
      const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;
      v[i] = static_cast<T>(lo + (hi - lo) * u);
    }
  });
  return v;
}
template std::vector<float> Uniform<float>(int64_t, double, double, uint64_t);
template std::vector<double> Uniform<double>(int64_t, double, double, uint64_t);
template std::vector<unsigned char> Uniform<unsigned char>(int64_t, double, double, uint64_t);

std::vector<double> RandomInputs::Uniform(int64_t n, double lo, double hi) {
  return test::Uniform<double>(n, lo, hi, Mix(seed_ + ++draws_));
}

int64_t ElementCount(const Shape& shape) {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

Shape BroadcastShape(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[rank - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<double> BroadcastProduct(const std::vector<double>& a, const Shape& a_shape,
                                     const std::vector<double>& b, const Shape& b_shape,
                                     const Shape& out_shape) {
  const size_t rank = out_shape.size();
  std::vector<double> out(ElementCount(out_shape));
  std::vector<int64_t> index(rank);
  for (int64_t flat = 0; flat < static_cast<int64_t>(out.size()); ++flat) {
    int64_t rest = flat;
    for (size_t axis = rank; axis-- > 0;) {
      index[axis] = rest % out_shape[axis];
      rest /= out_shape[axis];
    }
    auto offset = [&](const Shape& shape) {
      int64_t position = 0;
      for (size_t axis = 0; axis < shape.size(); ++axis) {
        const int64_t i = shape[axis] == 1 ? 0 : index[rank - shape.size() + axis];
        position = position * shape[axis] + i;
      }
      return position;
    };
    out[flat] = a[offset(a_shape)] * b[offset(b_shape)];
  }
  return out;
}

double HaversineDistance(double lat1, double lon1, double lat2, double lon2, double radius) {
  const double to_radians = std::numbers::pi / 180;
  const double dlat = (lat2 - lat1) * to_radians;
  const double dlon = (lon2 - lon1) * to_radians;
  double h = std::pow(std::sin(dlat / 2), 2) + std::cos(lat1 * to_radians) *
                                                   std::cos(lat2 * to_radians) *
                                                   std::pow(std::sin(dlon / 2), 2);
  h = std::min(1.0, std::max(0.0, h));
  return 2 * radius * std::atan2(std::sqrt(h), std::sqrt(1 - h));
}

std::vector<double> MeshDistances(const LatLonMesh& mesh, const std::vector<GeoPoint>& refs,
                                  double radius) {
  std::vector<double> out;
  out.reserve(refs.size() * mesh.lat.count * mesh.lon.count);
  for (const GeoPoint& ref : refs) {
    for (int64_t i = 0; i < mesh.lat.count; ++i) {
      for (int64_t j = 0; j < mesh.lon.count; ++j) {
        out.push_back(HaversineDistance(ref.lat, ref.lon, mesh.lat.At(i), mesh.lon.At(j), radius));
      }
    }
  }
  return out;
}

std::vector<double> NormalizeRows(const std::vector<double>& in, int64_t length, NormKind kind) {
  std::vector<double> out(in.size());
  for (size_t start = 0; start < in.size(); start += length) {
    long double norm = 0;
    for (int64_t i = 0; i < length; ++i) {
      const long double x = in[start + i];
      switch (kind) {
        case NormKind::kSum: norm += x; break;
        case NormKind::kL1: norm += std::abs(x); break;
        case NormKind::kL2: norm += x * x; break;
        case NormKind::kMaxAbs: norm = std::max(norm, std::abs(x)); break;
      }
    }
    const double n = static_cast<double>(kind == NormKind::kL2 ? std::sqrt(norm) : norm);
    for (int64_t i = 0; i < length; ++i) out[start + i] = in[start + i] / n;
  }
  return out;
}

namespace {

// One row of a Lomb-Scargle reference: weights normalized to sum 1, y centred when
// precenter (plain mean), Y = sum w y, YY = sum w y^2, sum w |y|.
struct ReferenceRow {
  const double* x;
  std::vector<double> w, y;
  double Y = 0, YY = 0, y_abs = 0;
};

ReferenceRow PrepareReferenceRow(const std::vector<double>& x, bool x_batched,
                                 const std::vector<double>& y, const std::vector<double>* weights,
                                 bool weights_batched, int64_t b, int64_t n, bool precenter) {
  ReferenceRow row{x.data() + (x_batched ? b * n : 0), std::vector<double>(n, 1.0),
                   std::vector<double>(y.begin() + b * n, y.begin() + (b + 1) * n)};
  if (weights != nullptr) {
    for (int64_t i = 0; i < n; ++i) row.w[i] = (*weights)[(weights_batched ? b * n : 0) + i];
  }
  double w_total = 0;
  for (double v : row.w) w_total += v;
  for (double& v : row.w) v /= w_total;
  if (precenter) {
    double mean = 0;
    for (double v : row.y) mean += v;
    mean /= n;
    for (double& v : row.y) v -= mean;
  }
  for (int64_t i = 0; i < n; ++i) {
    row.Y += row.w[i] * row.y[i];
    row.YY += row.w[i] * row.y[i] * row.y[i];
    row.y_abs += row.w[i] * std::abs(row.y[i]);
  }
  return row;
}

// The weighted moments of one row at phases f x - shift: C, S, CC, SS, CS, YC, YS,
// centred (the products of the means taken off) when floating_mean.
struct Moments {
  double C = 0, S = 0, CC = 0, SS = 0, CS = 0, YC = 0, YS = 0;
};

// cos and sin of the exact f x - shift: of the rounded product p, turned by
// e - shift, where e = f x - p exactly (a rounded f x is off by up to 1e-4 rad at 1e12).
void SinCosOfExactPhase(double f, double x, double shift, double* s, double* c) {
  const double p = f * x;
  const double rest = std::fma(f, x, -p) - shift;
  const double sp = std::sin(p), cp = std::cos(p), sr = std::sin(rest), cr = std::cos(rest);
  *s = sp * cr + cp * sr;
  *c = cp * cr - sp * sr;
}

Moments MomentsAt(const ReferenceRow& row, int64_t n, double f, double shift, bool floating_mean) {
  Moments m;
  for (int64_t i = 0; i < n; ++i) {
    double c, s;
    SinCosOfExactPhase(f, row.x[i], shift, &s, &c);
    m.CC += row.w[i] * c * c;
    m.SS += row.w[i] * s * s;
    m.CS += row.w[i] * c * s;
    m.YC += row.w[i] * row.y[i] * c;
    m.YS += row.w[i] * row.y[i] * s;
    m.C += row.w[i] * c;
    m.S += row.w[i] * s;
  }
  if (floating_mean) {
    m.YC -= row.Y * m.C;
    m.YS -= row.Y * m.S;
    m.CC -= m.C * m.C;
    m.SS -= m.S * m.S;
    m.CS -= m.C * m.S;
  }
  return m;
}

// G's smaller eigenvalue, G = [[CC, CS], [CS, SS]].
double SmallerEigenvalue(const Moments& m) {
  const double D = m.CC * m.SS - m.CS * m.CS, trace = m.CC + m.SS;
  return 2 * D / (trace + std::sqrt(std::max(0.0, trace * trace - 4 * D)));
}

}  // namespace

std::vector<double> LombScarglePowers(const std::vector<double>& x, bool x_batched,
                                      const std::vector<double>& y,
                                      const std::vector<double>* weights, bool weights_batched,
                                      const std::vector<double>& freqs, int64_t batch, int64_t n,
                                      const LombScargleOptions& options,
                                      std::vector<LombScargleConditioning>* conditioning) {
  const int64_t m = static_cast<int64_t>(freqs.size());
  std::vector<double> p(batch * m);
  if (conditioning != nullptr) conditioning->assign(batch * m, {});
  for (int64_t b = 0; b < batch; ++b) {
    const ReferenceRow row =
        PrepareReferenceRow(x, x_batched, y, weights, weights_batched, b, n, options.precenter);
    const double Y = row.Y, YY = row.YY;
    ParallelFor(m, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const Moments g = MomentsAt(row, n, freqs[k], 0, options.floating_mean);
        // Without the fma's exact products, rounding in D and the numerators would
        // reach the power as u / lambda_min: beyond the bound `conditioning` gives.
        const double D = DifferenceOfProducts(g.CC, g.SS, g.CS, g.CS);
        const double a = DifferenceOfProducts(g.YC, g.SS, g.YS, g.CS) / D;
        const double bb = DifferenceOfProducts(g.YS, g.CC, g.YC, g.CS) / D;
        const double power = 2 * (a * g.YC + bb * g.YS);
        const double scale =
            options.normalize ? 1 / (2 * (options.floating_mean ? YY - Y * Y : YY)) : n / 4.0;
        p[b * m + k] = power * scale;
        if (conditioning != nullptr) {
          const double ab = std::abs(a) + std::abs(bb);
          (*conditioning)[b * m + k] = {
              .first_order = (4 * ab * row.y_abs + 2 * ab * ab + std::abs(power)) * scale,
              .lambda_min = SmallerEigenvalue(g)};
        }
      }
    });
  }
  return p;
}

std::vector<std::complex<double>> LombScargleAmplitudes(
    const std::vector<double>& x, bool x_batched, const std::vector<double>& y,
    const std::vector<double>* weights, bool weights_batched, const std::vector<double>& freqs,
    int64_t batch, int64_t n, const LombScargleOptions& options,
    std::vector<LombScargleConditioning>* conditioning) {
  const int64_t m = static_cast<int64_t>(freqs.size());
  std::vector<std::complex<double>> out(batch * m);
  if (conditioning != nullptr) conditioning->assign(batch * m, {});
  constexpr double kEpsNeg = 0x1.0p-53;  // numpy.finfo(float64).epsneg
  for (int64_t b = 0; b < batch; ++b) {
    const ReferenceRow row =
        PrepareReferenceRow(x, x_batched, y, weights, weights_batched, b, n, options.precenter);
    ParallelFor(m, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const Moments g = MomentsAt(row, n, freqs[k], 0, options.floating_mean);
        const double tau = 0.5 * std::atan2(2 * g.CS, g.CC - g.SS);
        // Summed again at the phases turned by tau, where CS vanishes.
        const Moments t = MomentsAt(row, n, freqs[k], tau, options.floating_mean);
        const double a = t.YC / std::max(t.CC, kEpsNeg);
        const double bb = t.YS / std::max(t.SS, kEpsNeg);
        out[b * m + k] = std::complex<double>(a, bb) * std::polar(1.0, tau);
        if (conditioning != nullptr) {
          // dv = G^-1 (dr - dG v): |dr| <= sqrt(2) u sum w |y|, |dG| <= 2 u.
          const double lambda_min = SmallerEigenvalue(g), v = std::abs(out[b * m + k]);
          (*conditioning)[b * m + k] = {
              .first_order = (2 * row.y_abs + 2 * v) / lambda_min + v, .lambda_min = lambda_min};
        }
      }
    });
  }
  return out;
}

std::vector<double> ClassicLombScargle(const std::vector<double>& x, std::vector<double> y,
                                       const std::vector<double>& freqs, bool precenter,
                                       bool normalize) {
  if (precenter) {
    double mean = 0;
    for (double v : y) mean += v;
    mean /= y.size();
    for (double& v : y) v -= mean;
  }
  std::vector<double> p(freqs.size());
  for (size_t i = 0; i < freqs.size(); ++i) {
    double xc = 0, xs = 0, cc = 0, ss = 0, cs = 0;
    for (size_t j = 0; j < x.size(); ++j) {
      const double c = std::cos(freqs[i] * x[j]), s = std::sin(freqs[i] * x[j]);
      xc += y[j] * c;
      xs += y[j] * s;
      cc += c * c;
      ss += s * s;
      cs += c * s;
    }
    const double tau = std::atan2(2 * cs, cc - ss) / (2 * freqs[i]);
    const double ct = std::cos(freqs[i] * tau), st = std::sin(freqs[i] * tau);
    p[i] = 0.5 * (std::pow(ct * xc + st * xs, 2) / (ct * ct * cc + 2 * ct * st * cs + st * st * ss) +
                  std::pow(ct * xs - st * xc, 2) / (ct * ct * ss - 2 * ct * st * cs + st * st * cc));
  }
  if (normalize) {
    double yy = 0;
    for (double v : y) yy += v * v;
    for (double& v : p) v *= 2 / yy;
  }
  return p;
}

v1::Tensor ToProto(std::span<const double> values, const Shape& shape, v1::DType dtype,
                   std::vector<double>* stored) {
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  for (int64_t extent : shape) tensor.add_shape(extent);
  if (dtype == v1::FLOAT32) {
    const std::vector<float> f(values.begin(), values.end());
    tensor.set_data(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float));
    if (stored != nullptr) stored->assign(f.begin(), f.end());
  } else {
    tensor.set_data(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
    if (stored != nullptr) stored->assign(values.begin(), values.end());
  }
  return tensor;
}

std::vector<double> Values(const client::Result& result) {
  auto values = result.AsDoubles();
  EXPECT_TRUE(values.ok()) << values.status().message();
  return values.ok() ? *values : std::vector<double>{};
}

void ExpectNear(const std::vector<double>& actual, const std::vector<double>& expected,
                double rtol, double atol) {
  ASSERT_EQ(actual.size(), expected.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const bool ok = std::abs(actual[i] - expected[i]) <= atol + rtol * std::abs(expected[i]);
    if (!ok && ++mismatches <= 5) {
      ADD_FAILURE() << "element " << i << ": got " << actual[i] << ", expected " << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << actual.size() << " elements";
}

void ExpectWithinBounds(const std::vector<double>& actual, const std::vector<double>& expected,
                        const std::vector<double>& bounds) {
  ASSERT_EQ(actual.size(), expected.size());
  ASSERT_EQ(bounds.size(), expected.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const bool ok = std::abs(actual[i] - expected[i]) <= bounds[i];
    if (!ok && ++mismatches <= 5) {
      ADD_FAILURE() << "element " << i << ": got " << actual[i] << ", expected " << expected[i]
                    << " within " << bounds[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << actual.size() << " elements";
}

void ExpectCloseAtScale(const std::vector<double>& out, const std::vector<double>& ref,
                        double rtol) {
  ASSERT_EQ(out.size(), ref.size());
  double scale = 0;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_FALSE(std::isnan(out[i])) << "element " << i;
    ASSERT_LE(std::abs(out[i] - ref[i]), rtol * std::max(std::abs(ref[i]), scale * 1e-3))
        << "element " << i << ": got " << out[i] << ", want " << ref[i];
  }
}

Diff Compare(const std::vector<double>& got, const std::vector<double>& ref) {
  Diff d;
  EXPECT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    const double g = got[i], r = ref[i];
    if (std::isfinite(r) != std::isfinite(g)) {
      if (d.first_bad < 0) d.first_bad = static_cast<int64_t>(i);
      ++d.bad;
      continue;
    }
    if (!std::isfinite(r)) continue;
    num += (g - r) * (g - r);
    den += r * r;
    d.max_abs = std::max(d.max_abs, std::abs(g - r));
  }
  d.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return d;
}

void ExpectRelativeL2(const std::vector<double>& got, const std::vector<double>& ref,
                      double rel_l2) {
  const Diff d = Compare(got, ref);
  EXPECT_EQ(d.bad, 0) << "first bad element " << d.first_bad;
  EXPECT_LE(d.rel, rel_l2) << "max abs diff " << d.max_abs;
}

}  // namespace gpucompute::test
