// The haversine arithmetic of the candidates (haversine_variants.h). First, host and
// device, the branch-free float64/float32 last step of the "reduced" formulations
// (HaversineAngle::kAsinReduced*, HaversinePointsVariant::kReduced*) and the mesh terms'
// sines and cosines: haversine_math_test checks it on the CPU against long double, the
// GPU tests through the kernels. The device-only formulations are haversine_angles.cuh.
//
// Last step: asin(sqrt(h)) = pi/4 + asin(2h - 1) / 2 for every h in [0, 1], and asin(z)
// = z R(z^2) with R(w) = asin(sqrt(w)) / sqrt(w). So with g = 1 - h formed from its own
// terms (HaversineG) and m = min(h, g): m <= 1/4 gives sqrt(m) R(m) (pi/2 minus that
// when m = g); 1/4 < m gives pi/4 + z R(z^2) / 2, z = h - g. One polynomial R on
// [0, 1/4] (float64 12 terms, float32 5) serves all three, chosen by selects.
// kAsinReducedBranchFree: the same with the selects forced; kAsinReducedNewton: sqrt(m)
// from the MUFU estimate and a Newton step; kAsinReducedLean: the same formula on 32-bit
// words with a 5-operation square root (SqrtLean), for h, g >= 0.
// Points and mesh terms: sin and cos of a half angle in degrees, reduced by an exact
// multiple of 180 degrees, then short polynomials (Chebyshev interpolants of the Taylor
// series, converted to monomials and rounded).
#pragma once

#include <cmath>
#include <cstring>

#if defined(__CUDACC__)
#define GC_HOST_DEVICE __host__ __device__ __forceinline__
#define GC_UNROLL _Pragma("unroll")
#else
#define GC_HOST_DEVICE inline
#define GC_UNROLL
#endif

namespace gpucompute::cuda::lab::haversine_math {

constexpr double kPi = 3.14159265358979323846264338327950288;

template <typename T>
GC_HOST_DEVICE T Fma(T a, T b, T c) {
#if defined(__CUDA_ARCH__)
  return fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

template <typename T, int N>
GC_HOST_DEVICE T Horner(const T (&c)[N], T x) {
  T p = c[N - 1];
  GC_UNROLL
  for (int k = N - 2; k >= 0; --k) p = Fma(p, x, c[k]);
  return p;
}

// The bits of x as a signed integer: for comparisons on the integer pipe, which order
// like the values for x >= 0 (and put every negative x below every positive one).
GC_HOST_DEVICE long long Bits(double x) {
#if defined(__CUDA_ARCH__)
  return __double_as_longlong(x);
#else
  long long b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
#endif
}
GC_HOST_DEVICE long long Bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(x);
#else
  int b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
#endif
}

// sqrt(m) for m > 0 without the IEEE square root's range checks: m rsqrt(m) (rsqrt
// 1 ulp on the device: ~1.5 ulp in all).
template <typename T>
GC_HOST_DEVICE T SqrtOfPositive(T m) {
#if defined(__CUDA_ARCH__)
  return m * rsqrt(m);
#else
  return std::sqrt(m);
#endif
}

// SqrtOfPositive, 0 for m <= 0 (a rounding below 0).
template <typename T>
GC_HOST_DEVICE T SqrtOfNonNegative(T m) {
  return Bits(m) > 0 ? SqrtOfPositive(m) : T(0);
}

// (R(w) - 1) / w, R(w) = asin(sqrt(w)) / sqrt(w), w in [0, 1/4].
struct AsinSqrtTailCoefficients {
  double c[12];
};
inline constexpr AsinSqrtTailCoefficients kAsinSqrtTail64 = {
    {0.1666666666666665, 0.07500000000020764, 0.044642857103423646, 0.03038194736709848, 0.02237204763174451,
     0.017355259955786323, 0.013929652902326633, 0.011875494382636922, 0.0078029494773533175, 0.01603551434914882,
     -0.010749050339697808, 0.028169218060881414}};
#if defined(__CUDACC__)
// The same in constant memory: DFMA reads a constant-bank operand, where the 64-bit
// literals took two register moves each, every point (~10 of a mesh point's ~60
// instructions).
static __constant__ AsinSqrtTailCoefficients kAsinSqrtTail64Device = kAsinSqrtTail64;
#endif
GC_HOST_DEVICE double AsinSqrtTail(double w) {
#if defined(__CUDA_ARCH__)
  return Horner(kAsinSqrtTail64Device.c, w);
#else
  return Horner(kAsinSqrtTail64.c, w);
#endif
}
GC_HOST_DEVICE float AsinSqrtTail(float w) {
  constexpr float kC[5] = {0.16666672414795305f, 0.07498855072600821f, 0.04500138006991017f,
                           0.026554542206161328f, 0.038085023561092654f};
  return Horner(kC, w);
}

// asin(x) = x R(w) = x + x w (R(w) - 1) / w, for |x| <= 1/2 and w = x^2 (or what x^2
// rounds to: m where x = sqrt(m)).
template <typename T>
GC_HOST_DEVICE T AsinByTail(T x, T w) {
  return Fma(x, w * AsinSqrtTail(w), x);
}

// a > b ? x : y, a and b compared as signed integers (Bits; a float's fit in 32
// bits), as one select the compiler cannot see through: NVVM turns the reduced step's
// selects into branches around the square root, and each branch ends a block, so the
// scheduler cannot interleave a thread's points (a 12-deep FMA chain each) across it.
GC_HOST_DEVICE double SelectIfGreater(long long a, long long b, double x, double y) {
#if defined(__CUDA_ARCH__)
  double r;
  asm("{\n\t.reg .pred q;\n\tsetp.gt.s64 q, %3, %4;\n\tselp.f64 %0, %1, %2, q;\n\t}"
      : "=d"(r) : "d"(x), "d"(y), "l"(a), "l"(b));
  return r;
#else
  return a > b ? x : y;
#endif
}
GC_HOST_DEVICE float SelectIfGreater(long long a, long long b, float x, float y) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("{\n\t.reg .pred q;\n\tsetp.gt.s32 q, %3, %4;\n\tselp.f32 %0, %1, %2, q;\n\t}"
      : "=f"(r) : "f"(x), "f"(y), "r"(static_cast<int>(a)), "r"(static_cast<int>(b)));
  return r;
#else
  return a > b ? x : y;
#endif
}

// float64 sqrt(m) from MUFU.RSQ64H's estimate y0 (rsqrt.approx.ftz.f64, ~2^-23
// relative) without the library rsqrt's range checks and slow-path branch: one
// coupled Newton step for s = sqrt(m) and h = 1/(2 sqrt(m)) together (s0 = m y0,
// h0 = y0/2, r = 1/2 - s0 h0: both to ~e0^2), then s + (m - s^2) h, the residual by
// FMA. 7 double operations, ~0.5 ulp for any estimate within 2^-16 (checked in long
// double on the CPU with the estimate perturbed); m below the smallest normal (the
// estimate flushes it) gives 0.
GC_HOST_DEVICE double SqrtByRsqrtNewton(double m) {
#if defined(__CUDA_ARCH__)
  double y;
  asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(m));
  double s = m * y, h = 0.5 * y;
  const double r = Fma(-s, h, 0.5);
  s = Fma(s, r, s);
  h = Fma(h, r, h);
  const double root = Fma(Fma(-s, s, m), h, s);
  return SelectIfGreater(Bits(m), Bits(0x1p-1022) - 1, root, 0.0);
#else
  return Bits(m) > 0 ? std::sqrt(m) : 0.0;
#endif
}

// The high 32 bits of x (sign, exponent and 20 bits of mantissa) as a signed integer,
// the low 32, and x from them: the lean step's range tests, clamps and exact halving
// run on the integer pipe, one 32-bit operation each.
GC_HOST_DEVICE int HiWord(double x) {
#if defined(__CUDA_ARCH__)
  return __double2hiint(x);
#else
  return static_cast<int>(Bits(x) >> 32);
#endif
}
GC_HOST_DEVICE unsigned LoWord(double x) { return static_cast<unsigned>(Bits(x) & 0xffffffffLL); }
GC_HOST_DEVICE double FromWords(int hi, unsigned lo) {
#if defined(__CUDA_ARCH__)
  return __hiloint2double(hi, static_cast<int>(lo));
#else
  const unsigned long long b = (static_cast<unsigned long long>(static_cast<unsigned>(hi)) << 32) | lo;
  double x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
#endif
}

// An estimate of 1/sqrt(m) for a normal m > 0: on the device MUFU.RSQ64H
// (rsqrt.approx.ftz.f64); on the host the exact value with its low word cleared, a
// relative error up to 2^-20, worse than the device's, so the CPU tests bound it.
GC_HOST_DEVICE double RsqrtEstimate(double m) {
#if defined(__CUDA_ARCH__)
  double y;
  asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(m));
  return y;
#else
  return FromWords(HiWord(1 / std::sqrt(m)), 0);
#endif
}

// sqrt(m) for 0 <= m <= 1 in 5 double operations (SqrtByRsqrtNewton takes 7 and a
// select): y = RsqrtEstimate(max(m, 2^-1022)) with relative error e, so y/2 is exact
// on the integer pipe (y is normal); s = m y, r = 1/2 - s y/2 = -e - e^2/2, s1 = s + s r
// = sqrt(m) (1 - 3e^2/2), then one residual step with y/2 itself, s1 + (m - s1^2) y/2
// = sqrt(m) (1 + O(e^3)): ~2^-60 for e = 2^-20, so the last roundings dominate (~0.5
// ulp). m = 0 gives 0 exactly; m below the smallest normal a finite value under 1e-150.
GC_HOST_DEVICE double SqrtLean(double m) {
  constexpr int kSmallestNormalHi = 0x00100000;  // HiWord(2^-1022)
  const int hi = HiWord(m);
  const double y = RsqrtEstimate(FromWords(hi > kSmallestNormalHi ? hi : kSmallestNormalHi, LoWord(m)));
  const double half_y = FromWords(HiWord(y) - kSmallestNormalHi, LoWord(y));  // exponent - 1
  const double s = m * y;
  const double s1 = Fma(s, Fma(-s, half_y, 0.5), s);
  return Fma(Fma(-s1, s1, m), half_y, s1);
}

struct LeanWords {  // high words of 1/4, 1, -1, 1/2, pi/2, pi/4; the low word of pi/2 and pi/4
  static constexpr int kQuarter = 0x3fd00000, kOne = 0x3ff00000, kMinusOne = -0x40100000, kHalf = 0x3fe00000;
  static constexpr int kHalfPi = 0x3ff921fb, kQuarterPi = 0x3fe921fb;
  static constexpr unsigned kPiLow = 0x54442d18u;
};

// ScaledHalfAngleReduced's formula (three ranges, one polynomial on [0, 1/4]) in fewer
// instructions, for the kernels whose h and g are sums of non-negative terms (the mesh,
// the chord points): the range tests compare high words (one 32-bit compare each; a
// value within 2^-20 above 1/4 stays in the outer range, where the polynomial is as
// good 2^-22 past its end), m = min(h, g) is built from the smaller high word, clamped
// to >= 0 (a negative rounding gives a tiny m, not a NaN), w = x^2 in every range
// (no select of w: in the outer ranges x^2 is m to an ulp, which T(w) does not see),
// the square root SqrtLean, and the selected constants k in {1, -1, 1/2} and base in
// {0, pi/2, pi/4} are built from 32-bit words (pi/2 and pi/4 share their low word).
// Plain selects: nothing is conditional around the square root, and NVVM keeps them
// selects (no branch in the PTX of any lean kernel; a forced select of x cost one more
// compare a point).
// Double operations: 1 (z) + 5 (sqrt) + 1 (w) + 11 (tail) + 4 = 22, ScaledHalfAngleReduced
// with SqrtByRsqrtNewton 24.
// ScaledHalfAngleLeanOfMin takes the step from m = min(h, g) in words, z = h - g and
// whether g is the smaller (`upper`), for callers that make them otherwise (the chords).
GC_HOST_DEVICE double ScaledHalfAngleLeanOfMin(int m_hi, unsigned m_lo, double z, bool upper, double scale) {
  using W = LeanWords;
  const bool middle = m_hi > W::kQuarter;
  const double m = FromWords(m_hi > 0 ? m_hi : 0, m_lo);
  const double root = SqrtLean(m);
  const double x = middle ? z : root;
  const double w = x * x;
  const int k_hi = middle ? W::kHalf : (upper ? W::kMinusOne : W::kOne);
  const int base_hi = middle ? W::kQuarterPi : (upper ? W::kHalfPi : 0);
  const unsigned base_lo = middle || upper ? W::kPiLow : 0u;
  return scale * Fma(FromWords(k_hi, 0), AsinByTail(x, w), FromWords(base_hi, base_lo));
}
GC_HOST_DEVICE double ScaledHalfAngleLean(double h, double g, double scale) {
  const int h_hi = HiWord(h), g_hi = HiWord(g);
  const bool upper = h_hi > g_hi;
  return ScaledHalfAngleLeanOfMin(upper ? g_hi : h_hi, upper ? LoWord(g) : LoWord(h), h - g, upper, scale);
}

// The lean step's three ranges one at a time, for callers that know every h of a warp
// lies in one (the mesh, whose neighbouring points have neighbouring h): no selects, no
// min(h, g), and each range only what it needs. Ranges by h's high word: lower h < 1/4,
// middle 1/4 <= h < 3/4, upper h >= 3/4.
// - lower: sqrt(h) R(h), w = h itself; g is not formed (a mesh point's double
//   operations with h: 20, against the general step's 25);
// - middle: pi/4 + z R(z^2) / 2 with z = 2h - 1, exact for h in [1/4, 3/4] (Sterbenz),
//   so g is not formed either (18);
// - upper: pi/2 - sqrt(g) R(g), g from its own terms (HaversineG) (23).
// h, g >= 0 (sums of non-negative terms).
enum class LeanRange { kLower, kMiddle, kUpper };
inline constexpr int kThreeQuartersHi = 0x3fe80000;  // HiWord(0.75)
GC_HOST_DEVICE bool InLeanRange(LeanRange range, double h) {
  const int hi = HiWord(h);
  switch (range) {
    case LeanRange::kLower: return hi < LeanWords::kQuarter;
    case LeanRange::kMiddle: return hi >= LeanWords::kQuarter && hi < kThreeQuartersHi;
    default: return hi >= kThreeQuartersHi;
  }
}
GC_HOST_DEVICE double ScaledHalfAngleLower(double h, double scale) {
  return scale * AsinByTail(SqrtLean(h), h);
}
GC_HOST_DEVICE double ScaledHalfAngleMiddle(double h, double scale) {
  const double z = Fma(2.0, h, -1.0);
  return scale * Fma(0.5, AsinByTail(z, z * z), kPi / 4);
}
GC_HOST_DEVICE double ScaledHalfAngleUpper(double g, double scale) {
  return scale * (kPi / 2 - AsinByTail(SqrtLean(g), g));
}

// How the reduced step takes sqrt(m) and makes its choices (HaversineAngle::
// kAsinReduced, kAsinReducedBranchFree, kAsinReducedNewton).
enum class ReducedForm {
  kPlain,       // m rsqrt(m); selects, which NVVM turns into branches around the sqrt
  kBranchFree,  // m rsqrt(m), every select forced (SelectIfGreater)
  kNewton,      // float64 SqrtByRsqrtNewton, every select forced
};

// sqrt(m) for the reduced step (m <= 1/4), 0 for m <= 0.
template <ReducedForm kForm, typename T>
GC_HOST_DEVICE T ReducedSqrt(T m) {
  if constexpr (kForm == ReducedForm::kNewton && sizeof(T) == 8) {
    return SqrtByRsqrtNewton(m);
  } else if constexpr (kForm == ReducedForm::kPlain) {
    return SqrtOfNonNegative(m);
  } else {
    return SelectIfGreater(Bits(m), 0, SqrtOfPositive(m), T(0));
  }
}

// scale * asin(sqrt(h)) from h and g = 1 - h, each formed without cancellation
// (HaversineG): near h = 1 the angle is pi/2 - asin(sqrt(g)), and g = 1 - h from a
// rounded h would carry h's absolute error, u / (2 sqrt(g)) in the angle (~10 ulp at
// 19900 km; the library asin(sqrt(h)) adds its sqrt's rounding, twice that). As
// scale (base + k x (1 + w tail(w))), m = min(h, g): (base, k, x, w) = (0, 1, sqrt(m),
// m) for m = h <= 1/4, (pi/2, -1, sqrt(m), m) for m = g <= 1/4, and (pi/4, 1/2, z, z^2)
// between, z = h - g = 2h - 1. The range tests compare bits (integer pipe; a rounding
// below 0 has negative bits and gives sqrt 0); base and k are selected constants, so
// the kernels keep no extra registers for them (folding scale into them saves a
// multiply but holds four more doubles across the loop: the fused kernel spilled).
// kForm: ReducedForm (kBranchFree, kNewton: the selects of m, w and x and the
// square root's forced, no branch at all).
template <typename T, ReducedForm kForm = ReducedForm::kPlain>
GC_HOST_DEVICE T ScaledHalfAngleReduced(T h, T g, T scale) {
  const bool upper = Bits(h) > Bits(g);
  const T z = h - g;
  T m, w, x;
  if constexpr (kForm != ReducedForm::kPlain) {
    m = SelectIfGreater(Bits(h), Bits(g), g, h);
    w = SelectIfGreater(Bits(m), Bits(T(0.25)), z * z, m);
    x = SelectIfGreater(Bits(m), Bits(T(0.25)), z, ReducedSqrt<kForm>(m));
  } else {
    m = upper ? g : h;
    w = Bits(m) > Bits(T(0.25)) ? z * z : m;
    x = Bits(m) > Bits(T(0.25)) ? z : ReducedSqrt<kForm>(m);
  }
  const bool middle = Bits(m) > Bits(T(0.25));
  const T k = middle ? T(0.5) : (upper ? T(-1) : T(1));
  const T base = middle ? static_cast<T>(kPi / 4) : (upper ? static_cast<T>(kPi / 2) : T(0));
  return scale * Fma(k, AsinByTail(x, w), base);
}

// h = sin^2(dlat/2) + cos lat1 cos lat2 sin^2(dlon/2) has the complement
// g = 1 - h = cos^2(dlat/2) cos^2(dlon/2) + sin^2((lat1 + lat2)/2) sin^2(dlon/2),
// a sum of non-negative terms as h is: both keep a few ulp of relative error, and
// ScaledHalfAngleReduced takes the smaller. 2 operations.
template <typename T>
GC_HOST_DEVICE T HaversineG(T cos2_half_dlat, T sin2_half_lat_sum, T sin2_half_dlon, T cos2_half_dlon) {
  return Fma(cos2_half_dlat, cos2_half_dlon, sin2_half_lat_sum * sin2_half_dlon);
}

// (sin t - t) / t^3 and (cos t - 1) / t^2 as polynomials in u = t^2, |t| <= pi/4.
GC_HOST_DEVICE double SinTail(double u) {
  constexpr double kC[6] = {-0.16666666666666666,   0.008333333333330948,   -0.00019841269836758574,
                            2.755731610255244e-06, -2.5051131845003624e-08, 1.5918129294866608e-10};
  return Horner(kC, u);
}
GC_HOST_DEVICE double CosTail(double u) {
  constexpr double kC[7] = {-0.5,
                            0.04166666666666664,
                            -0.0013888888888880775,
                            2.480158729369346e-05,
                            -2.7557315566341895e-07,
                            2.0875886738047052e-09,
                            -1.1367998654022494e-11};
  return Horner(kC, u);
}
GC_HOST_DEVICE float SinTail(float u) {
  constexpr float kC[3] = {-0.1666666466231438f, 0.008332748270629749f, -0.00019587890880412386f};
  return Horner(kC, u);
}
GC_HOST_DEVICE float CosTail(float u) {
  constexpr float kC[4] = {-0.49999999969119313f, 0.04166665064451703f, -0.0013887589155600576f,
                           2.4463788293265746e-05f};
  return Horner(kC, u);
}

// sin and cos of half of x degrees, |x| <= 90.
template <typename T>
GC_HOST_DEVICE void SinCosHalfDegrees(T x, T* s, T* c) {
  const T t = x * static_cast<T>(kPi / 360);
  const T u = t * t;
  *s = Fma(t * u, SinTail(u), t);
  *c = Fma(u, CosTail(u), T(1));
}

// sin and cos of half of x degrees up to a sign common to both, |x| <= 2^21: x - 180 k
// is exact for any integer k; k = x / 180 rounded by adding 1.5 2^52 (float32: 2^23),
// whose last bit is k's parity.
template <typename T>
GC_HOST_DEVICE void SinCosHalfDegreesUpToSign(T x, T* s, T* c) {
  constexpr T kRound = sizeof(T) == 8 ? T(6755399441055744.0) : T(12582912.0f);
  const T shifted = Fma(x, static_cast<T>(1.0 / 180), kRound);
  const T k = shifted - kRound;
  T sr, cr;
  SinCosHalfDegrees(Fma(-k, T(180), x), &sr, &cr);
  const bool odd = (Bits(shifted) & 1) != 0;  // sin(r + 90) = cos r, cos(r + 90) = -sin r
  *s = odd ? cr : sr;
  *c = odd ? -sr : cr;
}

// The terms of h and g for a pair of latitudes (the mesh's rows): sin^2 and cos^2 of
// half their difference, cos lat cos ref_lat (cos lat as the cosine of half of 2 lat,
// relatively accurate to the poles), sin^2 of half their sum; in float64.
struct LatitudeTerms {
  double sin2_half_dlat, cos_product, cos2_half_dlat, sin2_half_lat_sum;
};
GC_HOST_DEVICE LatitudeTerms LatitudePairTerms(double lat, double ref_lat, double ref_cos_lat) {
  double s, c, s2, c2, ss, cs;
  SinCosHalfDegreesUpToSign(lat - ref_lat, &s, &c);
  SinCosHalfDegreesUpToSign(2 * lat, &s2, &c2);
  SinCosHalfDegreesUpToSign(lat + ref_lat, &ss, &cs);
  return {s * s, fabs(c2) * ref_cos_lat, c * c, ss * ss};
}

// sin^2 and cos^2 of half of dlon degrees.
GC_HOST_DEVICE void LongitudeTerms(double dlon, double* sin2, double* cos2) {
  double s, c;
  SinCosHalfDegreesUpToSign(dlon, &s, &c);
  *sin2 = s * s;
  *cos2 = c * c;
}

// Points by chords (HaversinePointsVariant::kChord*): p/2 for the unit vector p of a
// point, once per point, so that per (reference, point) pair h = |p/2 - q/2|^2 takes 6
// operations (float32, ChordH) and the float64 lean step's inputs 10
// (ChordHalfAngleLean). From the half-angle sines and cosines in degrees: cos lat =
// 2 c^2 - 1, and (cos lon, sin lon) / 2 = (c'^2 - 1/2, s' c'), exact in sign up to the
// common sign of (s', c') (SinCosHalfDegreesUpToSign). Each coordinate
// is within a few 1e-16 (float64) absolutely, like the half-angle differences of the
// split variants: both lose relative accuracy for pairs much closer than 1e-8 radians.
template <typename T>
struct HalfVector {
  T x, y, z;
};
template <typename T>
GC_HOST_DEVICE HalfVector<T> HalfUnitVector(T lat, T lon) {
  T s, c, so, co;
  SinCosHalfDegrees(lat, &s, &c);  // |lat| <= 90 once checked
  SinCosHalfDegreesUpToSign(lon, &so, &co);
  const T cos_lat = Fma(c + c, c, T(-1));
  return {cos_lat * Fma(co, co, T(-0.5)), cos_lat * (so * co), s * c};
}

// h = |p - q|^2 for half vectors p and q.
template <typename T>
GC_HOST_DEVICE T ChordH(const HalfVector<T>& p, const HalfVector<T>& q) {
  const T dx = p.x - q.x, dy = p.y - q.y, dz = p.z - q.z;
  return Fma(dx, dx, Fma(dy, dy, dz * dz));
}

// ScaledHalfAngleLean for half vectors p and q. With d = p.q, h = |p - q|^2 = 1/2 - 2d
// and g = |p + q|^2 = 1/2 + 2d, so d's sign says which is the smaller and z = h - g =
// -4d (absolutely as accurate as h - g, which is what the middle range needs); only the
// smaller, m, is formed from its differences or sums (the outer ranges need it to its
// last digits): 10 double operations where h, g and z took 13. d near 0 may pick the
// other side, but there both are near 1/2 and the middle range does not look at it.
GC_HOST_DEVICE double ChordHalfAngleLean(const HalfVector<double>& p, const HalfVector<double>& q, double scale) {
  const double d = Fma(p.x, q.x, Fma(p.y, q.y, p.z * q.z));
  const bool upper = HiWord(d) < 0;  // g < h
  const double side = upper ? 1.0 : -1.0;
  // p -+ q, rounded once as a sum or difference would be.
  const double tx = Fma(side, q.x, p.x), ty = Fma(side, q.y, p.y), tz = Fma(side, q.z, p.z);
  const double m = Fma(tx, tx, Fma(ty, ty, tz * tz));
  return ScaledHalfAngleLeanOfMin(HiWord(m), LoWord(m), -4 * d, upper, scale);
}

}  // namespace gpucompute::cuda::lab::haversine_math
