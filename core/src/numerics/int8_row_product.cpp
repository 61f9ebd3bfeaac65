// One-row int8 products (int8_row_product.hpp): eight exact int32 lanes per feature, four
// features per pass over the input row.
#include "numerics/int8_row_product.hpp"

#include <immintrin.h>

#include <algorithm>

#include "masque/threading.hpp"

namespace masque::numerics {

namespace {

#define MASQUE_AVX2 __attribute__((target("avx2,fma")))

constexpr std::int64_t kChunk = 64;  // features per task when threads share a layer

// Eight int32 lanes of x . w over 32 bytes (|x| as unsigned times w with x's sign).
MASQUE_AVX2 inline __m256i dot32(__m256i abs_x, __m256i x, const std::int8_t* w) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(abs_x, _mm256_sign_epi8(wv, x)),
                           _mm256_set1_epi16(1));
}

MASQUE_AVX2 inline std::int32_t sum_lanes(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// Features [n_begin, n_end): four at a time, then one.
MASQUE_AVX2 void features_avx2(const std::int8_t* qx, const std::int8_t* weights, std::int64_t in,
                               const float* scales, std::int64_t n_begin, std::int64_t n_end,
                               float* y) {
  const std::int64_t body = in / 32 * 32;
  auto tail = [&](const std::int8_t* w) {
    std::int32_t s = 0;
    for (std::int64_t k = body; k < in; ++k) s += static_cast<std::int32_t>(qx[k]) * w[k];
    return s;
  };
  std::int64_t n = n_begin;
  for (; n + 4 <= n_end; n += 4) {
    const std::int8_t* w = weights + n * in;
    __m256i d0 = _mm256_setzero_si256(), d1 = d0, d2 = d0, d3 = d0;
    for (std::int64_t k = 0; k < body; k += 32) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + k));
      const __m256i ax = _mm256_sign_epi8(x, x);
      d0 = _mm256_add_epi32(d0, dot32(ax, x, w + k));
      d1 = _mm256_add_epi32(d1, dot32(ax, x, w + in + k));
      d2 = _mm256_add_epi32(d2, dot32(ax, x, w + 2 * in + k));
      d3 = _mm256_add_epi32(d3, dot32(ax, x, w + 3 * in + k));
    }
    y[n] = static_cast<float>(sum_lanes(d0) + tail(w)) * scales[n];
    y[n + 1] = static_cast<float>(sum_lanes(d1) + tail(w + in)) * scales[n + 1];
    y[n + 2] = static_cast<float>(sum_lanes(d2) + tail(w + 2 * in)) * scales[n + 2];
    y[n + 3] = static_cast<float>(sum_lanes(d3) + tail(w + 3 * in)) * scales[n + 3];
  }
  for (; n < n_end; ++n) {
    const std::int8_t* w = weights + n * in;
    __m256i d = _mm256_setzero_si256();
    for (std::int64_t k = 0; k < body; k += 32) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + k));
      d = _mm256_add_epi32(d, dot32(_mm256_sign_epi8(x, x), x, w + k));
    }
    y[n] = static_cast<float>(sum_lanes(d) + tail(w)) * scales[n];
  }
}

}  // namespace

Int8RowProduct::Int8RowProduct(const std::int8_t* weights, std::int64_t in, std::int64_t out,
                               const float* scales)
    : weights_(weights), in_(in), out_(out), scales_(scales) {}

bool Int8RowProduct::runs_here() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

void Int8RowProduct::features(const std::int8_t* qx, std::int64_t n_begin, std::int64_t n_end,
                              float* y) const {
  features_avx2(qx, weights_, in_, scales_, n_begin, n_end, y);
}

void Int8RowProduct::run(const std::int8_t* qx, float* y) const {
  // Memory-bound: a second thread pays for large layers only (as Linear decides for f32).
  const int threads = in_ * out_ >= (1 << 19) ? thread_count() : 1;
  const std::int64_t chunks = (out_ + kChunk - 1) / kChunk;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (std::int64_t c = 0; c < chunks; ++c)
    features(qx, c * kChunk, std::min(out_, (c + 1) * kChunk), y);
}

}  // namespace masque::numerics
