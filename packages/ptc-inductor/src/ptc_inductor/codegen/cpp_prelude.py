"""The C++ header every generated graph starts with: dtype conversions, math helpers, Philox."""

PRELUDE = r"""
// glibc declares its vector math (libmvec: expf, tanhf, ... over 4/8 lanes) only under
// __FAST_MATH__; defining the macro alone gets vectorized calls without fast-math semantics.
#define __FAST_MATH__ 1
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <omp.h>

// Reduced-precision storage: bf16/fp16 are loaded into float and rounded back on store,
// which is how eager's CPU kernels compute them.
static inline float ptc_bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
static inline uint16_t ptc_float_to_bf16(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
static inline float ptc_round_bf16(float f) { return ptc_bf16_to_float(ptc_float_to_bf16(f)); }
static inline float ptc_half_to_float(uint16_t h) { _Float16 v; std::memcpy(&v, &h, 2); return static_cast<float>(v); }
static inline uint16_t ptc_float_to_half(float f) { _Float16 v = static_cast<_Float16>(f); uint16_t h; std::memcpy(&h, &v, 2); return h; }
static inline float ptc_round_half(float f) { return ptc_half_to_float(ptc_float_to_half(f)); }

template <typename T> static inline bool ptc_isnan(T x) { if constexpr (std::is_floating_point_v<T>) return std::isnan(x); else return false; }
// Eager's maximum/minimum propagate NaN; std::max does not. Written as one select: a NaN `a` is
// kept by the isnan test and a NaN `b` fails the compare and is picked, so gcc vectorizes it
// as two compares and a blend; the chain of ifs took four compares, three of them on the
// accumulator that a row max carries from one vector to the next.
template <typename T> static inline T ptc_max(T a, T b) { return (a > b || ptc_isnan(a)) ? a : b; }
template <typename T> static inline T ptc_min(T a, T b) { return (a < b || ptc_isnan(a)) ? a : b; }
// NaN-propagating max/min as OpenMP reductions, so row reductions vectorize too.
#pragma omp declare reduction(ptc_max : float, double, int64_t, int32_t, int16_t, int8_t, uint8_t : omp_out = ptc_max(omp_out, omp_in)) initializer(omp_priv = omp_orig)
#pragma omp declare reduction(ptc_min : float, double, int64_t, int32_t, int16_t, int8_t, uint8_t : omp_out = ptc_min(omp_out, omp_in)) initializer(omp_priv = omp_orig)
template <typename T> static inline T ptc_fmax(T a, T b) { if constexpr (std::is_floating_point_v<T>) return std::fmax(a, b); else return a > b ? a : b; }
template <typename T> static inline T ptc_fmin(T a, T b) { if constexpr (std::is_floating_point_v<T>) return std::fmin(a, b); else return a < b ? a : b; }
template <typename T> static inline T ptc_floordiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { return std::floor(a / b); }
  else { T q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1; return q; }
}
template <typename T> static inline T ptc_truncdiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::trunc(a / b); else return a / b;
}
// Python-style modulus: the result takes the divisor's sign.
template <typename T> static inline T ptc_remainder(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { T m = std::fmod(a, b); if (m != 0 && ((m < 0) != (b < 0))) m += b; return m; }
  else { T m = a % b; if (m != 0 && ((m < 0) != (b < 0))) m += b; return m; }
}
template <typename T> static inline T ptc_fmod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::fmod(a, b); else return a % b;
}
template <typename T> static inline T ptc_pow(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) { return std::pow(a, b); }
  else { if (b < 0) return (a == 1) ? 1 : ((a == -1) ? ((b % 2) ? -1 : 1) : 0); T r = 1; while (b) { if (b & 1) r *= a; a *= a; b >>= 1; } return r; }
}
template <typename T> static inline T ptc_sign(T x) {
  if constexpr (std::is_same_v<T, bool>) return x;
  else if constexpr (std::is_floating_point_v<T>) { if (std::isnan(x)) return x; return static_cast<T>((x > 0) - (x < 0)); }
  else return static_cast<T>((x > 0) - (x < 0));
}
template <typename T> static inline T ptc_abs(T x) { if constexpr (std::is_same_v<T, bool>) return x; else return x < 0 ? -x : x; }
template <typename T> static inline T ptc_bitwise_not(T x) { if constexpr (std::is_same_v<T, bool>) return !x; else return ~x; }
// float exp as plain arithmetic, so gcc inlines and vectorizes it. glibc's vector expf (libmvec)
// drops to its scalar path for every vector holding a lane below ln(FLT_MIN) ~ -87.3, which
// masked attention scores (-1e9, -inf) hit on every row. exp(x) = 2^n * e^r with
// n = round(x / ln2) and r = x - n*ln2 in [-ln2/2, ln2/2]:
// - n is rounded by adding 1.5*2^23, which leaves n in the low mantissa bits (no float->int
//   conversion, which would be UB for NaN); ln2 is split in two (Cody-Waite): the high part
//   has 9 significant bits so n*hi is exact for |n| < 2^15.
// - e^r = 1 + r * (1 + r*P(r)), two fmas after Horner: P is our own weighted least-squares
//   (Lawson) fit of (e^r - 1 - r)/r^2 on [-ln2/2, ln2/2], relative error 3e-9. With fma, every
//   float comes out within 0.91 ulp of the exact exp (1 + r + r^2*P in three steps reached 1.03).
// - 2^n is applied as two factors 2^(n/2) built in the exponent bits, so both stay normal
//   floats while the product reaches subnormal results (n down to -150) and overflows to inf.
//   t = n + 254 comes from z's bits in one subtraction and carries both biases.
// - Inputs outside [-104, 89] are selected at the end (e^-104 rounds to 0, e^89 overflows)
//   rather than clamped first: gcc folds a clamp's constant into every step as masks and extra
//   multiplies, while a select on the result costs a compare and a blend. Out there the
//   arithmetic above is garbage or NaN but never UB (the exponent work is unsigned); a NaN
//   fails both compares and comes out of the arithmetic as NaN.
static inline float ptc_expf(float x) {
  const float shifter = 12582912.0f;  // 1.5 * 2^23
  float z = x * 1.442695041f + shifter;
  float n = z - shifter;
  float r = x - n * 0.693359375f;
  r = r - n * -2.121944417e-4f;
  float p = 1.381461276e-3f;
  p = p * r + 8.368710056e-3f;
  p = p * r + 4.166838899e-2f;
  p = p * r + 1.666652113e-1f;
  p = p * r + 4.999999404e-1f;
  float e = (p * r + 1.0f) * r + 1.0f;
  uint32_t zbits, shbits;
  std::memcpy(&zbits, &z, 4);
  std::memcpy(&shbits, &shifter, 4);
  uint32_t t = zbits - (shbits - 254u);  // n + 254, in [104, 382] for x in [-104, 89]
  uint32_t b1 = (t >> 1) << 23, b2 = (t - (t >> 1)) << 23;  // 2^floor(n/2), 2^ceil(n/2)
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  float y = e * s1 * s2;
  y = x < -104.0f ? 0.0f : y;
  return x > 89.0f ? std::numeric_limits<float>::infinity() : y;
}
// Float exp goes through ptc_expf; double (and integer, promoted to double) keep std::exp.
template <typename T> static inline auto ptc_exp(T x) {
  if constexpr (std::is_same_v<T, float>) return ptc_expf(x); else return std::exp(x);
}
template <typename T> static inline T ptc_sigmoid(T x) { return T(1) / (T(1) + ptc_exp(-x)); }
template <typename T> static inline T ptc_rsqrt(T x) { return T(1) / std::sqrt(x); }
template <typename T> static inline T ptc_frac(T x) { return x - std::trunc(x); }
template <typename T> static inline T ptc_round(T x) { return std::nearbyint(x); }
// The sign bit read as an integer: gcc 12 crashes (an internal compiler error) vectorizing
// std::signbit of a float converted from bfloat16 or half into a bool store.
template <typename T> static inline bool ptc_signbit(T x) {
  if constexpr (std::is_same_v<T, float>) { uint32_t b; std::memcpy(&b, &x, 4); return (b >> 31) != 0; }
  else if constexpr (std::is_same_v<T, double>) { uint64_t b; std::memcpy(&b, &x, 8); return (b >> 63) != 0; }
  else return x < 0;  // integers have no negative zero
}
template <typename T> static inline T ptc_heaviside(T x, T v) { return x == 0 ? v : static_cast<T>(x > 0); }
template <typename T> static inline T ptc_logaddexp(T a, T b) {
  if (std::isinf(a) && a == b) return a;
  T m = a > b ? a : b; return m + std::log1p(std::exp(-std::abs(a - b)));
}
template <typename T> static inline T ptc_shl(T a, T b) { return (b < 0 || b >= T(sizeof(T) * 8)) ? T(0) : static_cast<T>(a << b); }
template <typename T> static inline T ptc_shr(T a, T b) { return (b < 0 || b >= T(sizeof(T) * 8)) ? (a < 0 ? T(-1) : T(0)) : static_cast<T>(a >> b); }
template <typename T> static inline int64_t ptc_wrap_index(T i, int64_t size) { int64_t v = static_cast<int64_t>(i); return v < 0 ? v + size : v; }

static inline double ptc_erfinv(double y) {
  if (y <= -1.0) return y == -1.0 ? -INFINITY : NAN;
  if (y >= 1.0) return y == 1.0 ? INFINITY : NAN;
  // Giles' single-precision approximation, then Newton steps on erf for full precision.
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 5.0) {
    w -= 2.5;
    x = 2.81022636e-08; x = 3.43273939e-07 + x * w; x = -3.5233877e-06 + x * w; x = -4.39150654e-06 + x * w;
    x = 0.00021858087 + x * w; x = -0.00125372503 + x * w; x = -0.00417768164 + x * w; x = 0.246640727 + x * w; x = 1.50140941 + x * w;
  } else {
    w = std::sqrt(w) - 3.0;
    x = -0.000200214257; x = 0.000100950558 + x * w; x = 0.00134934322 + x * w; x = -0.00367342844 + x * w;
    x = 0.00573950773 + x * w; x = -0.0076224613 + x * w; x = 0.00943887047 + x * w; x = 1.00167406 + x * w; x = 2.83297682 + x * w;
  }
  x *= y;
  for (int i = 0; i < 2; ++i) x -= (std::erf(x) - y) / (1.1283791670955126 * std::exp(-x * x));
  return x;
}
static inline double ptc_digamma(double x) {
  if (x == 0) return std::signbit(x) ? INFINITY : -INFINITY;
  if (x < 0) {
    if (x == std::floor(x)) return NAN;
    return ptc_digamma(1.0 - x) - M_PI / std::tan(M_PI * x);
  }
  double r = 0;
  while (x < 6) { r -= 1 / x; x += 1; }
  double f = 1 / (x * x);
  return r + std::log(x) - 0.5 / x - f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f / 132))));
}
static inline double ptc_i0(double x) {
  double q = x * x / 4, term = 1, sum = 1;
  for (int k = 1; k < 500; ++k) { term *= q / (double(k) * k); sum += term; if (term < sum * 1e-17) break; }
  return sum;
}

// Philox-4x32-10 (Salmon et al., SC'11): a counter-based generator keyed by the seed.
static inline void ptc_philox(uint64_t seed, uint64_t counter, uint32_t out[4]) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int i = 0; i < 10; ++i) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0, p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0, n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1); c3 = static_cast<uint32_t>(p0); c0 = n0; c2 = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}
static inline float ptc_rand(int64_t seed, int64_t offset) {
  uint32_t r[4]; ptc_philox(static_cast<uint64_t>(seed), static_cast<uint64_t>(offset), r);
  return static_cast<float>(r[0] >> 8) * (1.0f / 16777216.0f);
}
static inline float ptc_randn(int64_t seed, int64_t offset) {
  uint32_t r[4]; ptc_philox(static_cast<uint64_t>(seed), static_cast<uint64_t>(offset), r);
  double u1 = (static_cast<double>(r[0]) + 1.0) / 4294967297.0, u2 = static_cast<double>(r[1]) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

template <typename T> struct PtcWelford { T mean = 0, m2 = 0, n = 0; };
template <typename T> static inline PtcWelford<T> ptc_welford_add(PtcWelford<T> a, T x) {
  a.n += 1; T d = x - a.mean; a.mean += d / a.n; a.m2 += d * (x - a.mean); return a;
}
template <typename T> static inline PtcWelford<T> ptc_welford_merge(PtcWelford<T> a, PtcWelford<T> b) {
  if (b.n == 0) return a; if (a.n == 0) return b;
  T n = a.n + b.n, d = b.mean - a.mean;
  PtcWelford<T> r; r.n = n; r.mean = a.mean + d * b.n / n; r.m2 = a.m2 + b.m2 + d * d * a.n * b.n / n; return r;
}
"""

PRELUDE += r"""
// argmax/argmin keep the first index of the extreme value; NaN counts as the largest/smallest.
template <typename T> struct PtcArg { T v; int64_t i; };
template <typename T> static inline PtcArg<T> ptc_argmax_add(PtcArg<T> a, T x, int64_t i) {
  if (ptc_isnan(a.v)) return a;
  if (ptc_isnan(x) || x > a.v || a.i < 0) { a.v = x; a.i = i; }
  return a;
}
template <typename T> static inline PtcArg<T> ptc_argmin_add(PtcArg<T> a, T x, int64_t i) {
  if (ptc_isnan(a.v)) return a;
  if (ptc_isnan(x) || x < a.v || a.i < 0) { a.v = x; a.i = i; }
  return a;
}
template <typename T> static inline PtcArg<T> ptc_argmax_merge(PtcArg<T> a, PtcArg<T> b) {
  if (b.i < 0) return a; if (a.i < 0) return b;
  if (ptc_isnan(a.v) || ptc_isnan(b.v)) return ptc_isnan(a.v) && (!ptc_isnan(b.v) || a.i < b.i) ? a : b;
  if (a.v == b.v) return a.i < b.i ? a : b;
  return a.v > b.v ? a : b;
}
template <typename T> static inline PtcArg<T> ptc_argmin_merge(PtcArg<T> a, PtcArg<T> b) {
  if (b.i < 0) return a; if (a.i < 0) return b;
  if (ptc_isnan(a.v) || ptc_isnan(b.v)) return ptc_isnan(a.v) && (!ptc_isnan(b.v) || a.i < b.i) ? a : b;
  if (a.v == b.v) return a.i < b.i ? a : b;
  return a.v < b.v ? a : b;
}
"""
