// Vectorisable scalar kernels (internal).
//
// libmasque is built for baseline x86-64; the hot element-wise loops are compiled again for
// AVX-512 and AVX2+FMA and picked at load time (GCC function multiversioning), and the
// transcendental functions below are branch-free so that those loops vectorise.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "masque/vectorize.hpp"

namespace masque::numerics {

// e^x for x <= 88 (0 below -87.3, so -inf gives 0; NaN gives NaN); relative error ~2 ulp.
// Cody-Waite range reduction and a degree-6 polynomial.
inline float fast_exp(float x) {
  // Selects rather than std::clamp (which returns a reference): they keep loops branch-free.
  const bool underflow = x < -87.3f;
  // A NaN is carried by the result, not converted to an int (undefined behaviour).
  const bool nan = x != x;
  const float input = x;
  x = nan ? 0.0f : x;
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.0f ? 88.0f : x;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t e = static_cast<std::int32_t>(n) + 127;
  const float y = p * std::bit_cast<float>(e << 23);
  return nan ? input : underflow ? 0.0f : y;
}

// erf(x) as a rational approximation on [-4, 4] (erf is +-1 to float precision outside);
// absolute error ~1e-7.
inline float fast_erf(float x) {
  x = x < -4.0f ? -4.0f : x;
  x = x > 4.0f ? 4.0f : x;
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * x;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return p / q;
}

// tanh(x) = 1 - 2 / (e^(2x) + 1); absolute error ~1e-7.
inline float fast_tanh(float x) {
  x = x < -9.0f ? -9.0f : x;
  x = x > 9.0f ? 9.0f : x;
  return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f);
}

inline float gelu_erf_scalar(float x) {
  return 0.5f * x * (1.0f + fast_erf(x * 0.70710678118654752f));
}
inline float gelu_tanh_scalar(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + fast_tanh(u));
}
inline float silu_scalar(float x) {
  return x / (1.0f + fast_exp(-x));
}

// The largest of x[0..n) (-inf for n = 0; NaNs are skipped). GCC vectorises neither a max
// reduction (without -ffinite-math-only) nor an array of lane accumulators (it keeps them in
// scalar registers), so the lanes are a vector type (GCC/Clang vector extensions) of 8 floats:
// GCC lowers wider ones on AVX2 through the stack (4x slower than 8 lanes there).
inline float max_of(const float* x, std::int64_t n) {
  constexpr int kLanes = 8;
  using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));
  Lanes lanes = Lanes{} - __builtin_inff();
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes v;
    std::memcpy(&v, x + i, sizeof v);
    lanes = v > lanes ? v : lanes;
  }
  float m = -__builtin_inff();
  for (int l = 0; l < kLanes; ++l) m = lanes[l] > m ? lanes[l] : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// The largest |x[i]| of x[0..n) (0 for n = 0), or NaN when one of them is not finite. Lanes as
// in max_of.
inline float abs_max_of(const float* x, std::int64_t n) {
  constexpr int kLanes = 8;
  using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));
  using Mask = std::int32_t __attribute__((vector_size(kLanes * sizeof(float))));
  constexpr float kMaxFinite = 3.40282347e+38f;
  Lanes lanes = {};
  Mask finite = Mask{} - 1;
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes v;
    std::memcpy(&v, x + i, sizeof v);
    const Lanes a = v < 0 ? -v : v;  // a NaN stays NaN
    finite &= a <= kMaxFinite;
    lanes = a > lanes ? a : lanes;
  }
  float m = 0.0f;
  bool all_finite = true;
  for (int l = 0; l < kLanes; ++l) {
    m = lanes[l] > m ? lanes[l] : m;
    all_finite = all_finite && finite[l] != 0;
  }
  for (; i < n; ++i) {
    const float a = std::fabs(x[i]);
    all_finite = all_finite && a <= kMaxFinite;
    m = a > m ? a : m;
  }
  return all_finite ? m : __builtin_nanf("");
}

}  // namespace masque::numerics
