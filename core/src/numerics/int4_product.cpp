// 4-bit weight products: quantization, the AVX2 kernel and the portable one (same numbers; the
// order of every sum is in int4_product.hpp).
#include "numerics/int4_product.hpp"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "masque/threading.hpp"
#include "numerics/parallel.hpp"
#include "numerics/simd.hpp"

namespace masque::numerics {

namespace {

constexpr std::int64_t kBlock = 32;  // inputs per 16 bytes of nibbles
constexpr float kLevels = 7.0f;

// Inline: the kernels widen one scale per group of 32 products (a call per group cost more
// than the products on one decoding row). Exactly widen_bf16's value.
inline float widen(std::uint16_t bf16) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bf16) << 16);
}

std::uint16_t to_bf16(float x) {
  std::uint16_t h;
  round_to_bf16(&x, 1, &h);
  return h;
}

inline float round_even(float v) {
  return (v + 12582912.0f) - 12582912.0f;  // 1.5 * 2^23: halves to even for |v| < 2^22
}

// One feature's weights (in values, contiguous) into its nibbles and scales.
void quantize_feature(const float* w, std::int64_t in, std::int64_t group, std::uint8_t* nibbles,
                      std::uint16_t* scales) {
  std::vector<std::int8_t> q(in);
  for (std::int64_t g = 0; g < in / group; ++g) {
    const float* wg = w + g * group;
    float amax = 0.0f;
    for (std::int64_t k = 0; k < group; ++k) amax = std::max(amax, std::fabs(wg[k]));
    const std::uint16_t s16 = to_bf16(amax / kLevels);
    scales[g] = s16;
    const float s = widen(s16);
    for (std::int64_t k = 0; k < group; ++k)
      q[g * group + k] =
          s > 0.0f ? static_cast<std::int8_t>(std::clamp(round_even(wg[k] / s), -kLevels, kLevels))
                   : 0;
  }
  for (std::int64_t b = 0; b < in / kBlock; ++b)
    for (std::int64_t j = 0; j < 16; ++j)
      nibbles[b * 16 + j] =
          static_cast<std::uint8_t>((q[b * kBlock + j] + 8) | (q[b * kBlock + 16 + j] + 8) << 4);
}

// The portable kernel: one row, one feature, the documented order.
float dot_portable(const std::int8_t* x, const std::uint8_t* nibbles, const std::uint16_t* scales,
                   std::int64_t in, std::int64_t group) {
  float acc[8] = {};
  const std::int64_t blocks_per_group = group / kBlock;
  for (std::int64_t g = 0; g < in / group; ++g) {
    std::int32_t d[8] = {};
    for (std::int64_t b = 0; b < blocks_per_group; ++b) {
      const std::int64_t block = g * blocks_per_group + b;
      const std::uint8_t* p = nibbles + block * 16;
      const std::int8_t* xb = x + block * kBlock;
      for (int k = 0; k < 32; ++k) {
        const int q = (k < 16 ? (p[k] & 0x0f) : (p[k - 16] >> 4)) - 8;
        d[k / 4] += q * xb[k];
      }
    }
    const float s = widen(scales[g]);
    for (int j = 0; j < 8; ++j) acc[j] = std::fma(static_cast<float>(d[j]), s, acc[j]);
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// ---- AVX2 ----------------------------------------------------------------------------------

#define MASQUE_AVX2 __attribute__((target("avx2,fma")))

MASQUE_AVX2 inline __m256i unpack_block(const std::uint8_t* p) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(bytes, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

// Eight int32 lanes, lane j the sum of the products of bytes 4j..4j+3 (exact: |x| <= 127 and
// |w| <= 7, so no 16-bit pair sum saturates).
MASQUE_AVX2 inline __m256i dot_block(__m256i x, __m256i w) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(w, x));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

MASQUE_AVX2 inline float sum_lanes(__m256 acc) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// R rows (R <= 4) of one feature: each weight block is unpacked once for all of them.
template <int R>
MASQUE_AVX2 void rows_avx2(const std::int8_t* const* x, const std::uint8_t* nibbles,
                           const std::uint16_t* scales, std::int64_t in, std::int64_t group,
                           float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const std::int64_t blocks_per_group = group / kBlock;
  for (std::int64_t g = 0; g < in / group; ++g) {
    __m256i d[R];
    for (int r = 0; r < R; ++r) d[r] = _mm256_setzero_si256();
    for (std::int64_t b = 0; b < blocks_per_group; ++b) {
      const std::int64_t block = g * blocks_per_group + b;
      const __m256i w = unpack_block(nibbles + block * 16);
      for (int r = 0; r < R; ++r) {
        const __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r] + block * 32));
        d[r] = _mm256_add_epi32(d[r], dot_block(xb, w));
      }
    }
    const __m256 s = _mm256_set1_ps(widen(scales[g]));
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[r]), s, acc[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = sum_lanes(acc[r]);
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

}  // namespace

bool int4_fits(std::int64_t in, std::int64_t group) {
  return group > 0 && group % kBlock == 0 && in % group == 0;
}

Int4Weights quantize_int4(const float* w, WeightLayout layout, std::int64_t in, std::int64_t out,
                          std::int64_t group) {
  if (!int4_fits(in, group))
    throw RuntimeError("int4: " + std::to_string(in) + " inputs do not split into groups of " +
                       std::to_string(group) + " (a multiple of 32)");
  Int4Weights q{in, out, group, std::vector<std::uint8_t>(out * in / 2),
                std::vector<std::uint16_t>(out * (in / group))};
  std::vector<float> column;
  for (std::int64_t n = 0; n < out; ++n) {
    const float* row = w + n * in;
    if (layout == WeightLayout::in_out) {
      column.resize(in);
      for (std::int64_t k = 0; k < in; ++k) column[k] = w[k * out + n];
      row = column.data();
    }
    quantize_feature(row, in, group, q.nibbles.data() + n * in / 2,
                     q.scales.data() + n * (in / group));
  }
  return q;
}

Int4Weights quantize_int4(const Tensor& w, WeightLayout layout, std::int64_t group) {
  const bool out_in = layout == WeightLayout::out_in;
  const std::int64_t in = w.dim(out_in ? 1 : 0), out = w.dim(out_in ? 0 : 1);
  auto check = [](const float* values, std::int64_t n) {
    if (std::isnan(abs_max_of(values, n)))
      throw RuntimeError(
          "Linear: the weight has values that are not finite; they cannot be quantized to int4");
  };
  if (!out_in || w.dtype() == DType::f32) {
    const Tensor w32 = w.dtype() == DType::f32 ? w : w.to_f32();
    check(w32.f32(), w32.numel());
    return quantize_int4(w32.f32(), layout, in, out, group);
  }
  if (!int4_fits(in, group)) return quantize_int4(nullptr, layout, in, out, group);  // throws
  Int4Weights q{in, out, group, std::vector<std::uint8_t>(out * in / 2),
                std::vector<std::uint16_t>(out * (in / group))};
  std::vector<float> row(in);
  const auto* bits = static_cast<const std::uint16_t*>(w.raw());
  for (std::int64_t n = 0; n < out; ++n) {
    if (w.dtype() == DType::bf16)
      widen_bf16(bits + n * in, in, row.data());
    else
      widen_f16(bits + n * in, in, row.data());
    check(row.data(), in);
    quantize_feature(row.data(), in, group, q.nibbles.data() + n * in / 2,
                     q.scales.data() + n * (in / group));
  }
  return q;
}

Int4Product::Int4Product(Int4Weights weights, const float* bias, Activation activation)
    : weights_(std::move(weights)), activation_(activation) {
  if (bias) bias_.assign(bias, bias + weights_.out);
}

std::size_t Int4Product::bytes() const {
  return weights_.nibbles.size() + weights_.scales.size() * sizeof(std::uint16_t) +
         bias_.size() * sizeof(float);
}

void Int4Product::features(const std::int8_t* qx, const float* sx, std::int64_t rows,
                           std::int64_t n_begin, std::int64_t n_end, float* y) const {
  const std::int64_t in = weights_.in, out = weights_.out, group = weights_.group;
  const std::int64_t per_feature = in / 2, groups = in / group;
  // Up to 64 rows at a time stay in cache while every feature of the range passes over them.
  constexpr std::int64_t kRowTile = 64;
  for (std::int64_t m0 = 0; m0 < rows; m0 += kRowTile) {
    const std::int64_t m1 = std::min(rows, m0 + kRowTile);
    for (std::int64_t n = n_begin; n < n_end; ++n) {
      const std::uint8_t* nib = weights_.nibbles.data() + n * per_feature;
      const std::uint16_t* sc = weights_.scales.data() + n * groups;
      std::int64_t m = m0;
      if (has_avx2()) {
        float r4[4];
        for (; m + 4 <= m1; m += 4) {
          const std::int8_t* x[4] = {qx + m * in, qx + (m + 1) * in, qx + (m + 2) * in,
                                     qx + (m + 3) * in};
          rows_avx2<4>(x, nib, sc, in, group, r4);
          for (int r = 0; r < 4; ++r) y[(m + r) * out + n] = r4[r] * sx[m + r];
        }
        for (; m < m1; ++m) {
          const std::int8_t* x[1] = {qx + m * in};
          rows_avx2<1>(x, nib, sc, in, group, r4);
          y[m * out + n] = r4[0] * sx[m];
        }
      }
      for (; m < m1; ++m) y[m * out + n] = dot_portable(qx + m * in, nib, sc, in, group) * sx[m];
    }
  }
}

void Int4Product::run(const std::int8_t* qx, const float* sx, std::int64_t rows, float* y) const {
  const std::int64_t out = weights_.out;
  // Few rows stream the weights (memory-bound): a second thread pays for large layers only.
  const double work = 2.0 * rows * weights_.in * out / 4.0;
  const int threads = rows < 16 ? (bytes() >= (1u << 19) ? thread_count() : 1) : threads_for(work);
  // Blocks of 16 features per chunk keep each thread's weights contiguous.
  const std::int64_t chunks = (out + 15) / 16;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (std::int64_t c = 0; c < chunks; ++c)
    features(qx, sx, rows, c * 16, std::min(out, (c + 1) * 16), y);
  if (!bias_.empty())
    for (std::int64_t m = 0; m < rows; ++m)
      for (std::int64_t n = 0; n < out; ++n) y[m * out + n] += bias_[n];
  if (activation_ != Activation::none) {
    Tensor view = Tensor::view(y, {rows, out}, DType::f32);
    activate(activation_, view);
  }
}

}  // namespace masque::numerics
