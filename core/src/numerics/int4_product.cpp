// 4-bit weight products: quantization, the kernels' layout, the AVX-512 VNNI, AVX2 and portable
// kernels (same numbers; the order of every sum is in int4_product.hpp).
#include "numerics/int4_product.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "masque/threading.hpp"
#include "numerics/dnnl_context.hpp"
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

// ---- the kernels' layout ----------------------------------------------------------------
//
// Int4Product holds the weights in tiles of 16 features (the last padded with zero weights and
// scales): per tile, per 8 inputs k0..k0+7, 64 bytes, byte 4f + i = (q[n0+f][k0+i] + 8) |
// (q[n0+f][k0+4+i] + 8) << 4; the scales per tile as [group][16] bf16. One 512-bit load is then
// 16 features' next 8 weights: masked, lane f holds feature f's inputs k0..k0+3, shifted down a
// nibble its k0+4..k0+7, and a dot product instruction against 4 input bytes broadcast sums each
// feature's products in its own lane.
constexpr std::int64_t kTile = 16;

// The portable kernel: row m, feature n (in the kernels' layout), the documented order.
float dot_portable(const std::int8_t* x, const std::uint8_t* tile, const std::uint16_t* scales,
                   int f, std::int64_t in, std::int64_t group) {
  float acc = 0.0f;
  for (std::int64_t g = 0; g < in / group; ++g) {
    std::int32_t d = 0;
    for (std::int64_t k = g * group; k < (g + 1) * group; ++k) {
      const std::uint8_t byte = tile[k / 8 * 64 + f * 4 + k % 4];
      d += ((k % 8 < 4 ? byte & 0x0f : byte >> 4) - 8) * x[k];
    }
    acc = std::fma(static_cast<float>(d), widen(scales[g * kTile + f]), acc);
  }
  return acc;
}

// Per row and group: -8 times the sum of the row's inputs in the group. The vector kernels
// multiply the stored nibbles (q + 8, in [1, 15]) with the signed input bytes, which adds 8 x to
// every product; each group's sums start from this offset and so end at the exact d (no pair of
// products can saturate AVX2's 16-bit sums: 4 * 15 * 127 < 2^15).
void group_offsets(const std::int8_t* qx, std::int64_t rows, std::int64_t in, std::int64_t group,
                   std::int32_t* offsets) {
  const std::int64_t groups = in / group;
  for (std::int64_t m = 0; m < rows; ++m)
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int8_t* x = qx + m * in + g * group;
      std::int32_t sum = 0;
      for (std::int64_t k = 0; k < group; ++k) sum += x[k];
      offsets[m * groups + g] = -8 * sum;
    }
}

// A kernel call's operands: rows m0.. of the input, tiles t0.. of the weights.
struct Tile {
  const std::int8_t* x;         // row m0
  const std::int32_t* offsets;  // row m0's, [groups]
  const float* sx;              // row m0's scale
  const std::uint8_t* nibbles;  // tile t0's
  const std::uint16_t* scales;  // tile t0's, [group][16]
  float* y;                     // y[m0 * out + 16 t0]
  std::int64_t in, out, group;
  std::int64_t valid;  // features of tile t0 onwards that exist (the last tile may be partial)
};

#define MASQUE_AVX2 __attribute__((target("avx2,fma")))
// The kernels' loops over rows and tiles have constant trip counts; unrolled, their sums live in
// registers (GCC 12 kept them in memory otherwise).
#define MASQUE_UNROLL _Pragma("GCC unroll 16")

inline std::int32_t four_bytes(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// ---- AVX2: a tile as two halves of 8 features ---------------------------------------------

MASQUE_AVX2 inline __m256 widen8(const std::uint16_t* bf16) {
  const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bf16)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

// R rows by one tile.
template <int R>
MASQUE_AVX2 void tile_avx2(const Tile& t) {
  const std::int64_t groups = t.in / t.group, steps = t.group / 8;
  const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(0x0f);
  __m256 acc[R][2];
  MASQUE_UNROLL
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const std::uint8_t* w = t.nibbles;
  for (std::int64_t g = 0; g < groups; ++g) {
    __m256i d[R][2];
    MASQUE_UNROLL
    for (int r = 0; r < R; ++r) d[r][0] = d[r][1] = _mm256_set1_epi32(t.offsets[r * groups + g]);
    for (std::int64_t s = 0; s < steps; ++s, w += 64) {
      const std::int64_t k = g * t.group + s * 8;
      MASQUE_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * h));
        const __m256i lo = _mm256_and_si256(v, low);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        MASQUE_UNROLL
        for (int r = 0; r < R; ++r) {
          const __m256i x0 = _mm256_set1_epi32(four_bytes(t.x + r * t.in + k));
          const __m256i x1 = _mm256_set1_epi32(four_bytes(t.x + r * t.in + k + 4));
          const __m256i p =
              _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0), _mm256_maddubs_epi16(hi, x1));
          d[r][h] = _mm256_add_epi32(d[r][h], _mm256_madd_epi16(p, ones));
        }
      }
    }
    MASQUE_UNROLL
    for (int h = 0; h < 2; ++h) {
      const __m256 sc = widen8(t.scales + g * kTile + 8 * h);
      MASQUE_UNROLL
      for (int r = 0; r < R; ++r)
        acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[r][h]), sc, acc[r][h]);
    }
  }
  MASQUE_UNROLL
  for (int r = 0; r < R; ++r) MASQUE_UNROLL
  for (int h = 0; h < 2; ++h) {
    const __m256 y = _mm256_mul_ps(acc[r][h], _mm256_set1_ps(t.sx[r]));
    float* dst = t.y + r * t.out + 8 * h;
    const std::int64_t n = std::clamp<std::int64_t>(t.valid - 8 * h, 0, 8);
    if (n == 8) {
      _mm256_storeu_ps(dst, y);
    } else {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, y);
      std::copy(lanes, lanes + n, dst);
    }
  }
}

// ---- AVX-512 VNNI: a tile in one register -------------------------------------------------

#define MASQUE_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

// GCC 12's AVX-512 headers start some intrinsics from an undefined register, which it then
// reports as uninitialized where they are inlined (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

MASQUE_VNNI inline __m512 widen16(const std::uint16_t* bf16) {
  const __m512i h =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bf16)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

// R rows by T tiles. One row alone keeps two chains of sums a tile (the low and the high
// nibbles'), so that it waits less on the dot products' latency.
template <int R, int T>
MASQUE_VNNI void tile_vnni(const Tile& t) {
  constexpr int C = R == 1 ? 2 : 1;
  const std::int64_t groups = t.in / t.group, steps = t.group / 8, stride = t.in * 8;
  const __m512i low = _mm512_set1_epi8(0x0f);
  __m512 acc[R][T];
  MASQUE_UNROLL
  for (int r = 0; r < R; ++r) MASQUE_UNROLL
  for (int j = 0; j < T; ++j) acc[r][j] = _mm512_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g) {
    __m512i d[R][T][C];
    MASQUE_UNROLL
    for (int r = 0; r < R; ++r) {
      const __m512i o = _mm512_set1_epi32(t.offsets[r * groups + g]);
      MASQUE_UNROLL
      for (int j = 0; j < T; ++j) {
        d[r][j][0] = o;
        if constexpr (C == 2) d[r][j][C - 1] = _mm512_setzero_si512();
      }
    }
    for (std::int64_t s = 0; s < steps; ++s) {
      const std::int64_t k = g * t.group + s * 8;
      __m512i lo[T], hi[T];
      MASQUE_UNROLL
      for (int j = 0; j < T; ++j) {
        const __m512i v = _mm512_loadu_si512(t.nibbles + j * stride + k * 8);
        lo[j] = _mm512_and_si512(v, low);
        hi[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      }
      MASQUE_UNROLL
      for (int r = 0; r < R; ++r) {
        const __m512i x0 = _mm512_set1_epi32(four_bytes(t.x + r * t.in + k));
        const __m512i x1 = _mm512_set1_epi32(four_bytes(t.x + r * t.in + k + 4));
        MASQUE_UNROLL
        for (int j = 0; j < T; ++j) {
          d[r][j][0] = _mm512_dpbusd_epi32(d[r][j][0], lo[j], x0);
          d[r][j][C - 1] = _mm512_dpbusd_epi32(d[r][j][C - 1], hi[j], x1);
        }
      }
    }
    MASQUE_UNROLL
    for (int j = 0; j < T; ++j) {
      const __m512 sc = widen16(t.scales + (j * groups + g) * kTile);
      MASQUE_UNROLL
      for (int r = 0; r < R; ++r) {
        __m512i sum = d[r][j][0];
        if constexpr (C == 2) sum = _mm512_add_epi32(sum, d[r][j][C - 1]);
        acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc, acc[r][j]);
      }
    }
  }
  MASQUE_UNROLL
  for (int r = 0; r < R; ++r) MASQUE_UNROLL
  for (int j = 0; j < T; ++j) {
    const __m512 y = _mm512_mul_ps(acc[r][j], _mm512_set1_ps(t.sx[r]));
    const std::int64_t n = std::clamp<std::int64_t>(t.valid - kTile * j, 0, kTile);
    _mm512_mask_storeu_ps(t.y + r * t.out + kTile * j, static_cast<__mmask16>((1u << n) - 1), y);
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

// One ISA's kernels: `many` rows by `wide_many` tiles or by one, one row by `wide_one` tiles or
// by one.
struct Kernels {
  std::int64_t many, wide_many, wide_one;
  TileFn many_wide, many_one, one_wide, one_one;
};

// Four rows by two tiles hold 8 of AVX-512's 32 registers in sums, one row by four 12.
constexpr Kernels kVnni{
    4, 2, 4, tile_vnni<4, 2>, tile_vnni<4, 1>, tile_vnni<1, 4>, tile_vnni<1, 1>};
// Two rows by a tile fill AVX2's 16 registers (sums, nibbles, inputs).
constexpr Kernels kAvx2{2, 1, 1, tile_avx2<2>, tile_avx2<2>, tile_avx2<1>, tile_avx2<1>};

// Rows [m0, m1) by tiles [t0, t1): blocks of tiles outside (their weights stay in cache while
// the rows pass), rows inside.
void run_tiles(const Kernels& kind, const Tile& all, std::int64_t m0, std::int64_t m1,
               std::int64_t t0, std::int64_t t1) {
  const std::int64_t groups = all.in / all.group;
  const std::int64_t block = std::max(kind.wide_many, kind.wide_one);
  for (std::int64_t b = t0; b < t1; b += block) {
    const std::int64_t b1 = std::min(t1, b + block);
    for (std::int64_t m = m0; m < m1;) {
      const bool many = m + kind.many <= m1;
      const std::int64_t width = many ? kind.wide_many : kind.wide_one;
      for (std::int64_t j = b; j < b1;) {
        const bool wide = j + width <= b1;
        Tile tile = all;
        tile.x = all.x + m * all.in;
        tile.offsets = all.offsets + m * groups;
        tile.sx = all.sx + m;
        tile.nibbles = all.nibbles + j * all.in * 8;
        tile.scales = all.scales + j * groups * kTile;
        tile.y = all.y + m * all.out + j * kTile;
        tile.valid = all.out - j * kTile;
        (many ? (wide ? kind.many_wide : kind.many_one)
              : (wide ? kind.one_wide : kind.one_one))(tile);
        j += wide ? width : 1;
      }
      m += many ? kind.many : 1;
    }
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

namespace {

// Each feature of a weight in its stored type quantized, in order: feature(n, nibbles, scales).
// An [out, in] BF16 or F16 weight goes a stored row at a time (never widened whole).
template <typename Feature>
void quantize_features(const Tensor& w, WeightLayout layout, std::int64_t group,
                       const SourceRelease& release, Feature&& feature) {
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
    const Int4Weights q = quantize_int4(w32.f32(), layout, in, out, group);
    for (std::int64_t n = 0; n < out; ++n)
      feature(n, q.nibbles.data() + n * (in / 2), q.scales.data() + n * (in / group));
    return;
  }
  if (!int4_fits(in, group)) quantize_int4(nullptr, layout, in, out, group);  // throws
  std::vector<float> row(in);
  std::vector<std::uint8_t> nibbles(in / 2);
  std::vector<std::uint16_t> scales(in / group);
  const auto* bits = static_cast<const std::uint16_t*>(w.raw());
  ReleaseInOrder done(release, static_cast<std::size_t>(in) * sizeof(std::uint16_t));
  for (std::int64_t n = 0; n < out; ++n) {
    if (w.dtype() == DType::bf16)
      widen_bf16(bits + n * in, in, row.data());
    else
      widen_f16(bits + n * in, in, row.data());
    check(row.data(), in);
    quantize_feature(row.data(), in, group, nibbles.data(), scales.data());
    feature(n, nibbles.data(), scales.data());
    done.row(n);
  }
}

}  // namespace

Int4Weights quantize_int4(const Tensor& w, WeightLayout layout, std::int64_t group,
                          const SourceRelease& release) {
  const bool out_in = layout == WeightLayout::out_in;
  const std::int64_t in = w.dim(out_in ? 1 : 0), out = w.dim(out_in ? 0 : 1);
  Int4Weights q{in, out, group, std::vector<std::uint8_t>(out * in / 2),
                std::vector<std::uint16_t>(int4_fits(in, group) ? out * (in / group) : 0)};
  quantize_features(w, layout, group, release,
                    [&](std::int64_t n, const std::uint8_t* nibbles, const std::uint16_t* scales) {
                      std::copy(nibbles, nibbles + in / 2, q.nibbles.data() + n * (in / 2));
                      std::copy(scales, scales + in / group, q.scales.data() + n * (in / group));
                    });
  return q;
}

std::unique_ptr<Int4Product> quantize_int4_product(const Tensor& w, WeightLayout layout,
                                                   std::int64_t group, const float* bias,
                                                   Activation activation,
                                                   const SourceRelease& release) {
  const bool out_in = layout == WeightLayout::out_in;
  const std::int64_t in = w.dim(out_in ? 1 : 0), out = w.dim(out_in ? 0 : 1);
  auto product = std::make_unique<Int4Product>(in, out, group, bias, activation);
  quantize_features(w, layout, group, release,
                    [&](std::int64_t n, const std::uint8_t* nibbles, const std::uint16_t* scales) {
                      product->set_feature(n, nibbles, scales);
                    });
  return product;
}

Int4Product::Int4Product(std::int64_t in, std::int64_t out, std::int64_t group, const float* bias,
                         Activation activation)
    : in_(in), out_(out), group_(group), activation_(activation) {
  if (!int4_fits(in, group))
    throw RuntimeError("int4: " + std::to_string(in) + " inputs do not split into groups of " +
                       std::to_string(group) + " (a multiple of 32)");
  if (bias) bias_.assign(bias, bias + out_);
  const std::int64_t tiles = (out_ + kTile - 1) / kTile, groups = in_ / group_;
  nibbles_bytes_ = static_cast<std::size_t>(tiles * in_ * 8);
  // Each of the kernels' loads is one cache line; huge pages for large layers (decoding a 0.5B
  // model read its weights about 7 % faster: fewer TLB misses).
  nibbles_ = static_cast<std::uint8_t*>(weight_buffer(nibbles_bytes_, nibbles_storage_));
  std::memset(nibbles_, 0x88, nibbles_bytes_);  // padding features: q = 0
  scales_.assign(static_cast<std::size_t>(tiles * groups * kTile), 0);
}

Int4Product::Int4Product(const Int4Weights& weights, const float* bias, Activation activation)
    : Int4Product(weights.in, weights.out, weights.group, bias, activation) {
  const std::int64_t groups = in_ / group_;
  for (std::int64_t n = 0; n < out_; ++n)
    set_feature(n, weights.nibbles.data() + n * (in_ / 2), weights.scales.data() + n * groups);
}

void Int4Product::set_feature(std::int64_t n, const std::uint8_t* nibbles,
                              const std::uint16_t* scales) {
  std::uint8_t* dst = nibbles_ + n / kTile * in_ * 8 + n % kTile * 4;
  for (std::int64_t b = 0; b < in_ / kBlock; ++b, nibbles += 16) {
    std::uint8_t v[kBlock];  // the block's 32 weights as q + 8, in input order
    for (int j = 0; j < 16; ++j) {
      v[j] = nibbles[j] & 0x0f;
      v[16 + j] = nibbles[j] >> 4;
    }
    for (int step = 0; step < 4; ++step, dst += 64)
      for (int i = 0; i < 4; ++i)
        dst[i] = static_cast<std::uint8_t>(v[8 * step + i] | v[8 * step + 4 + i] << 4);
  }
  const std::int64_t groups = in_ / group_;
  for (std::int64_t g = 0; g < groups; ++g)
    scales_[(n / kTile * groups + g) * kTile + n % kTile] = scales[g];
}

std::size_t Int4Product::bytes() const {
  return nibbles_bytes_ + scales_.size() * sizeof(std::uint16_t) + bias_.size() * sizeof(float);
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

void Int4Product::tiles(Int4Kernel kernel, const std::int8_t* qx, const std::int32_t* offsets,
                        const float* sx, std::int64_t rows, std::int64_t t0, std::int64_t t1,
                        float* y) const {
  const std::int64_t groups = in_ / group_;
  const Tile all{.x = qx,
                 .offsets = offsets,
                 .sx = sx,
                 .nibbles = nibbles_,
                 .scales = scales_.data(),
                 .y = y,
                 .in = in_,
                 .out = out_,
                 .group = group_,
                 .valid = out_};
  // Up to 64 rows at a time stay in cache while every tile of the range passes over them.
  constexpr std::int64_t kRowTile = 64;
  for (std::int64_t m0 = 0; m0 < rows; m0 += kRowTile) {
    const std::int64_t m1 = std::min(rows, m0 + kRowTile);
    switch (kernel) {
      case Int4Kernel::avx512_vnni:
        run_tiles(kVnni, all, m0, m1, t0, t1);
        break;
      case Int4Kernel::avx2:
        run_tiles(kAvx2, all, m0, m1, t0, t1);
        break;
      case Int4Kernel::portable:
        for (std::int64_t m = m0; m < m1; ++m)
          for (std::int64_t n = t0 * kTile; n < std::min(out_, t1 * kTile); ++n)
            y[m * out_ + n] = dot_portable(qx + m * in_, nibbles_ + n / kTile * in_ * 8,
                                           scales_.data() + n / kTile * groups * kTile,
                                           static_cast<int>(n % kTile), in_, group_) *
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
  thread_local std::vector<std::int32_t> offsets;  // kept between calls
  const std::int64_t groups = in_ / group_;
  offsets.resize(static_cast<std::size_t>(rows * groups));
  std::int32_t* o = offsets.data();  // the calling thread's: the workers' are others
  // Few rows stream the weights (memory-bound): a second thread pays for large layers only.
  const double work = 2.0 * rows * in_ * out_ / 4.0;
  const int threads = rows < 16 ? (bytes() >= (1u << 19) ? thread_count() : 1) : threads_for(work);
  const std::int64_t tiles_total = (out_ + kTile - 1) / kTile;
  // One parallel region: each thread sums the group offsets of a range of rows, then (after
  // the barrier) computes a contiguous range of tiles, its weights one stretch of memory, and
  // adds the bias to its own columns.
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const std::int64_t part = omp_get_thread_num(), parts = omp_get_num_threads();
    if (kernel != Int4Kernel::portable) {
      const std::int64_t m0 = rows * part / parts, m1 = rows * (part + 1) / parts;
      group_offsets(qx + m0 * in_, m1 - m0, in_, group_, o + m0 * groups);
    }
#pragma omp barrier
    const std::int64_t t0 = tiles_total * part / parts, t1 = tiles_total * (part + 1) / parts;
    tiles(kernel, qx, o, sx, rows, t0, t1, y);
    if (!bias_.empty()) {
      const std::int64_t n0 = t0 * kTile, n1 = std::min(out_, t1 * kTile);
      for (std::int64_t m = 0; m < rows; ++m)
        for (std::int64_t n = n0; n < n1; ++n) y[m * out_ + n] += bias_[n];
    }
  }
  if (activation_ != Activation::none) {
    Tensor view = Tensor::view(y, {rows, out_}, DType::f32);
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
