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
#include "numerics/release_in_order.hpp"
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

// ---- tiles ---------------------------------------------------------------------------------
//
// The vector kernels multiply the stored nibbles (q + 8, in [1, 15]) as unsigned bytes with the
// signed input bytes, which sums 8 * x on top of each product. Each group's eight lane sums start
// from the offsets below (-8 times the row's inputs of that lane and group), so they end at d
// exactly; no pair of products can saturate (2 * 15 * 127 < 2^15).

// Per row and group, eight int32: -8 * the sum of x[k] over the group's inputs k with
// k mod 32 in [4j, 4j + 4).
void group_offsets(const std::int8_t* qx, std::int64_t rows, std::int64_t in, std::int64_t group,
                   std::int32_t* offsets) {
  const std::int64_t groups = in / group;
  for (std::int64_t m = 0; m < rows; ++m)
    for (std::int64_t g = 0; g < groups; ++g) {
      std::int32_t* o = offsets + (m * groups + g) * 8;
      std::fill(o, o + 8, 0);
      const std::int8_t* x = qx + m * in + g * group;
      for (std::int64_t k = 0; k < group; ++k) o[(k % kBlock) / 4] -= 8 * x[k];
    }
}

// A tile's operands: rows m0.. of the input, features n0.. of the weights.
struct Tile {
  const std::int8_t* x;         // row m0
  const std::int32_t* offsets;  // row m0's
  const float* sx;              // row m0's scale
  const std::uint8_t* nibbles;  // feature n0's
  const float* scales;          // the tile's F features' scales as floats, [group][F]
  float* y;                     // y[m0 * out + n0]
  std::int64_t in, out, group;
};

// ---- AVX2 ----------------------------------------------------------------------------------

#define MASQUE_AVX2 __attribute__((target("avx2,fma")))
// The tiles' loops over rows and features have constant trip counts; unrolled, their sums live
// in registers (GCC 12 kept them in memory otherwise).
#define MASQUE_UNROLL _Pragma("GCC unroll 16")

// 32 weights as bytes q + 8, in input order: the 16 bytes of a block in both halves, the second
// shifted down a nibble.
MASQUE_AVX2 inline __m256i unpack_block(const std::uint8_t* p) {
  const __m256i both =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0)),
                          _mm256_set1_epi8(0x0f));
}

MASQUE_AVX2 inline float sum_lanes(__m256 acc) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// R rows by F features: each weight block is unpacked once for the R rows, each input block
// loaded once for the F features. kOneBlock: groups of 32 (the default), whose sums need no
// registers across blocks.
template <int R, int F, bool kOneBlock>
MASQUE_AVX2 void tile_avx2(const Tile& t) {
  const std::int64_t groups = t.in / t.group, per_feature = t.in / 2;
  const std::int64_t group = kOneBlock ? kBlock : t.group;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][F];
  MASQUE_UNROLL
  for (int r = 0; r < R; ++r) MASQUE_UNROLL
  for (int f = 0; f < F; ++f) acc[r][f] = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g) {
    __m256i d[R][F];
    MASQUE_UNROLL
    for (int r = 0; r < R; ++r) {
      const __m256i o =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.offsets + (r * groups + g) * 8));
      MASQUE_UNROLL
      for (int f = 0; f < F; ++f) d[r][f] = o;
    }
    for (std::int64_t k = g * group; k < (g + 1) * group; k += kBlock) {
      __m256i w[F];
      MASQUE_UNROLL
      for (int f = 0; f < F; ++f) w[f] = unpack_block(t.nibbles + f * per_feature + k / 2);
      MASQUE_UNROLL
      for (int r = 0; r < R; ++r) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.x + r * t.in + k));
        MASQUE_UNROLL
        for (int f = 0; f < F; ++f)
          d[r][f] =
              _mm256_add_epi32(d[r][f], _mm256_madd_epi16(_mm256_maddubs_epi16(w[f], x), ones));
      }
    }
    MASQUE_UNROLL
    for (int f = 0; f < F; ++f) {
      const __m256 s = _mm256_broadcast_ss(t.scales + g * F + f);
      MASQUE_UNROLL
      for (int r = 0; r < R; ++r)
        acc[r][f] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[r][f]), s, acc[r][f]);
    }
  }
  MASQUE_UNROLL
  for (int r = 0; r < R; ++r) MASQUE_UNROLL
  for (int f = 0; f < F; ++f) t.y[r * t.out + f] = sum_lanes(acc[r][f]) * t.sx[r];
}

// ---- AVX-512 VNNI --------------------------------------------------------------------------
//
// A 512-bit register holds two features' eight lanes (the low half feature n, the high n + 1)
// against the same input block in both halves, so each feature keeps its own eight sums in the
// documented order.

#define MASQUE_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

// GCC 12's AVX-512 headers start some intrinsics from an undefined register, which it then
// reports as uninitialized where they are inlined (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

MASQUE_VNNI inline __m512i unpack_pair(const std::uint8_t* a, const std::uint8_t* b) {
  const __m256i va =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  const __m256i vb =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  const __m512i both = _mm512_inserti64x4(_mm512_zextsi256_si512(va), vb, 1);
  return _mm512_and_si512(_mm512_srlv_epi64(both, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)),
                          _mm512_set1_epi8(0x0f));
}

MASQUE_VNNI inline __m512i twice(const void* p) {  // 32 bytes in both halves
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}

// R rows by 2P features (P <= 4).
template <int R, int P, bool kOneBlock>
MASQUE_VNNI void tile_vnni(const Tile& t) {
  const std::int64_t groups = t.in / t.group, per_feature = t.in / 2;
  const std::int64_t group = kOneBlock ? kBlock : t.group;
  // Lanes 0-7 take feature 2p's scale, lanes 8-15 feature 2p + 1's.
  __m512i pick[P];
  MASQUE_UNROLL
  for (int p = 0; p < P; ++p)
    pick[p] = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
  __m512 acc[R][P];
  MASQUE_UNROLL
  for (int r = 0; r < R; ++r) MASQUE_UNROLL
  for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g) {
    __m512i d[R][P];
    MASQUE_UNROLL
    for (int r = 0; r < R; ++r) {
      const __m512i o = twice(t.offsets + (r * groups + g) * 8);
      MASQUE_UNROLL
      for (int p = 0; p < P; ++p) d[r][p] = o;
    }
    for (std::int64_t k = g * group; k < (g + 1) * group; k += kBlock) {
      __m512i w[P];
      MASQUE_UNROLL
      for (int p = 0; p < P; ++p)
        w[p] = unpack_pair(t.nibbles + 2 * p * per_feature + k / 2,
                           t.nibbles + (2 * p + 1) * per_feature + k / 2);
      MASQUE_UNROLL
      for (int r = 0; r < R; ++r) {
        const __m512i x = twice(t.x + r * t.in + k);
        MASQUE_UNROLL
        for (int p = 0; p < P; ++p) d[r][p] = _mm512_dpbusd_epi32(d[r][p], w[p], x);
      }
    }
    const __m512 scales = _mm512_zextps256_ps512(_mm256_loadu_ps(t.scales + g * 2 * P));
    MASQUE_UNROLL
    for (int p = 0; p < P; ++p) {
      const __m512 s = _mm512_permutexvar_ps(pick[p], scales);
      MASQUE_UNROLL
      for (int r = 0; r < R; ++r)
        acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[r][p]), s, acc[r][p]);
    }
  }
  MASQUE_UNROLL
  for (int r = 0; r < R; ++r) MASQUE_UNROLL
  for (int p = 0; p < P; ++p) {
    t.y[r * t.out + 2 * p] = sum_lanes(_mm512_castps512_ps256(acc[r][p])) * t.sx[r];
    t.y[r * t.out + 2 * p + 1] =
        sum_lanes(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][p]), 1))) *
        t.sx[r];
  }
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool cpu_has(Int4Kernel kernel) {
  switch (kernel) {
    case Int4Kernel::portable:
      return true;
    case Int4Kernel::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Int4Kernel::avx512_vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
             cpu_has(Int4Kernel::avx2);
  }
  return false;
}

using TileFn = void (*)(const Tile&);

// One ISA's tiles: kWide features by 4 rows or 1 row, and one feature by 4 or 1, each for
// groups of one block and of more.
struct Tiles {
  std::int64_t wide;
  TileFn wide4[2], wide1[2], one4[2], one1[2];  // [kOneBlock]
};

constexpr Tiles kVnniTiles{8,
                           {tile_vnni<4, 4, false>, tile_vnni<4, 4, true>},
                           {tile_vnni<1, 4, false>, tile_vnni<1, 4, true>},
                           {tile_avx2<4, 1, false>, tile_avx2<4, 1, true>},
                           {tile_avx2<1, 1, false>, tile_avx2<1, 1, true>}};
// Four rows by two features use 8 of AVX2's 16 registers for sums (four by four spilled).
constexpr Tiles kAvx2Tiles{2,
                           {tile_avx2<4, 2, false>, tile_avx2<4, 2, true>},
                           {tile_avx2<1, 2, false>, tile_avx2<1, 2, true>},
                           {tile_avx2<4, 1, false>, tile_avx2<4, 1, true>},
                           {tile_avx2<1, 1, false>, tile_avx2<1, 1, true>}};

// Rows [m0, m1) by features [n0, n1): feature tiles outside (their weights stay in L1 while the
// rows pass), 4 rows at a time inside.
void tiles(const Tiles& kind, Tile t, std::int64_t m0, std::int64_t m1, std::int64_t n0,
           std::int64_t n1, const std::uint16_t* scales) {
  const std::int64_t groups = t.in / t.group, per_feature = t.in / 2;
  const int one_block = t.group == kBlock ? 1 : 0;
  thread_local std::vector<float> table;  // the feature tile's scales, [group][feature]
  table.resize(static_cast<std::size_t>(groups * kind.wide));
  for (std::int64_t n = n0; n < n1;) {
    const std::int64_t width = n + kind.wide <= n1 ? kind.wide : 1;
    for (std::int64_t f = 0; f < width; ++f)
      for (std::int64_t g = 0; g < groups; ++g)
        table[g * width + f] = widen(scales[(n + f) * groups + g]);
    for (std::int64_t m = m0; m < m1;) {
      const bool four = m + 4 <= m1;
      const Tile tile{.x = t.x + m * t.in,
                      .offsets = t.offsets + m * groups * 8,
                      .sx = t.sx + m,
                      .nibbles = t.nibbles + n * per_feature,
                      .scales = table.data(),
                      .y = t.y + m * t.out + n,
                      .in = t.in,
                      .out = t.out,
                      .group = t.group};
      const TileFn* fn =
          width > 1 ? (four ? kind.wide4 : kind.wide1) : (four ? kind.one4 : kind.one1);
      fn[one_block](tile);
      m += four ? 4 : 1;
    }
    n += width;
  }
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

Int4Weights quantize_int4(const Tensor& w, WeightLayout layout, std::int64_t group,
                          const SourceRelease& release) {
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
  ReleaseInOrder done(release, static_cast<std::size_t>(in) * sizeof(std::uint16_t));
  for (std::int64_t n = 0; n < out; ++n) {
    if (w.dtype() == DType::bf16)
      widen_bf16(bits + n * in, in, row.data());
    else
      widen_f16(bits + n * in, in, row.data());
    check(row.data(), in);
    quantize_feature(row.data(), in, group, q.nibbles.data() + n * in / 2,
                     q.scales.data() + n * (in / group));
    done.row(n);
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

Int4Kernel Int4Product::best_kernel() {
  static const Int4Kernel best = cpu_has(Int4Kernel::avx512_vnni) ? Int4Kernel::avx512_vnni
                                 : cpu_has(Int4Kernel::avx2)      ? Int4Kernel::avx2
                                                                  : Int4Kernel::portable;
  return best;
}

bool Int4Product::runs_here(Int4Kernel kernel) {
  return cpu_has(kernel);
}

void Int4Product::features(Int4Kernel kernel, const std::int8_t* qx, const std::int32_t* offsets,
                           const float* sx, std::int64_t rows, std::int64_t n_begin,
                           std::int64_t n_end, float* y) const {
  const std::int64_t in = weights_.in, out = weights_.out, group = weights_.group;
  const std::int64_t per_feature = in / 2, groups = in / group;
  const Tile t{qx, offsets, sx, weights_.nibbles.data(), nullptr, y, in, out, group};
  // Up to 64 rows at a time stay in cache while every feature of the range passes over them.
  constexpr std::int64_t kRowTile = 64;
  for (std::int64_t m0 = 0; m0 < rows; m0 += kRowTile) {
    const std::int64_t m1 = std::min(rows, m0 + kRowTile);
    switch (kernel) {
      case Int4Kernel::avx512_vnni:
        tiles(kVnniTiles, t, m0, m1, n_begin, n_end, weights_.scales.data());
        break;
      case Int4Kernel::avx2:
        tiles(kAvx2Tiles, t, m0, m1, n_begin, n_end, weights_.scales.data());
        break;
      case Int4Kernel::portable:
        for (std::int64_t m = m0; m < m1; ++m)
          for (std::int64_t n = n_begin; n < n_end; ++n)
            y[m * out + n] = dot_portable(qx + m * in, weights_.nibbles.data() + n * per_feature,
                                          weights_.scales.data() + n * groups, in, group) *
                             sx[m];
        break;
    }
  }
}

void Int4Product::run(const std::int8_t* qx, const float* sx, std::int64_t rows, float* y) const {
  run(best_kernel(), qx, sx, rows, y);
}

void Int4Product::run(Int4Kernel kernel, const std::int8_t* qx, const float* sx, std::int64_t rows,
                      float* y) const {
  if (!cpu_has(kernel))
    throw RuntimeError("int4: this CPU cannot run the " + std::string(kernel_name(kernel)) +
                       " kernel");
  const std::int64_t out = weights_.out;
  thread_local std::vector<std::int32_t> offsets;  // kept between calls
  offsets.resize(static_cast<std::size_t>(rows * (weights_.in / weights_.group) * 8));
  if (kernel != Int4Kernel::portable)
    group_offsets(qx, rows, weights_.in, weights_.group, offsets.data());
  const std::int32_t* o = offsets.data();
  // Few rows stream the weights (memory-bound): a second thread pays for large layers only.
  const double work = 2.0 * rows * weights_.in * out / 4.0;
  const int threads = rows < 16 ? (bytes() >= (1u << 19) ? thread_count() : 1) : threads_for(work);
  // Blocks of 16 features per chunk keep each thread's weights contiguous.
  const std::int64_t chunks = (out + 15) / 16;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (std::int64_t c = 0; c < chunks; ++c)
    features(kernel, qx, o, sx, rows, c * 16, std::min(out, (c + 1) * 16), y);
  if (!bias_.empty())
    for (std::int64_t m = 0; m < rows; ++m)
      for (std::int64_t n = 0; n < out; ++n) y[m * out + n] += bias_[n];
  if (activation_ != Activation::none) {
    Tensor view = Tensor::view(y, {rows, out}, DType::f32);
    activate(activation_, view);
  }
}

const char* kernel_name(Int4Kernel kernel) {
  switch (kernel) {
    case Int4Kernel::portable:
      return "portable";
    case Int4Kernel::avx2:
      return "avx2";
    case Int4Kernel::avx512_vnni:
      return "avx512_vnni";
  }
  return "?";
}

}  // namespace masque::numerics
