// Backward passes of norms, activations, gated MLPs, rotary and embeddings; seeded dropout.
#include "masque/train/grad_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "masque/error.hpp"
#include "numerics/parallel.hpp"
#include "numerics/simd.hpp"
#include "numerics/tensor_checks.hpp"

namespace masque::train {

using numerics::fast_erf;
using numerics::fast_exp;

namespace {

void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw RuntimeError(std::string(op) + ": " + what);
}

void require_like(const Tensor& a, const Tensor& b, const char* op, const char* what) {
  require(
      a.dtype() == DType::f32 && a.numel() == b.numel(), op,
      std::string(what) + " " + to_string(a.shape()) + " does not match " + to_string(b.shape()));
}

// ---- norms ---------------------------------------------------------------------------------

// One row of LayerNorm's backward; xhat = (x - mean) * inv, g = dy * w:
//   dx = inv * (g - mean(g) - xhat * mean(g * xhat)); dw += dy * xhat; db += dy.
MASQUE_VECTORIZE void layer_norm_row_backward(const float* __restrict x, const float* __restrict w,
                                              const float* __restrict dy, float eps, std::int64_t n,
                                              float* __restrict dx, double* __restrict dw,
                                              double* __restrict db) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (std::int64_t i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const float inv = 1.0f / std::sqrt(sq / static_cast<float>(n) + eps);
  float g_sum = 0.0f, gx_sum = 0.0f;
#pragma omp simd reduction(+ : g_sum, gx_sum)
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = dy[i] * w[i];
    g_sum += g;
    gx_sum += g * (x[i] - mean) * inv;
  }
  const float g_mean = g_sum / static_cast<float>(n), gx_mean = gx_sum / static_cast<float>(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const float xhat = (x[i] - mean) * inv;
    dx[i] = inv * (dy[i] * w[i] - g_mean - xhat * gx_mean);
    dw[i] += static_cast<double>(dy[i]) * xhat;
  }
  if (db)
    for (std::int64_t i = 0; i < n; ++i) db[i] += dy[i];
}

// One row of RMSNorm's backward; xhat = x * inv, g = dy * w:
//   dx = inv * (g - xhat * mean(g * xhat)); dw += dy * xhat.
MASQUE_VECTORIZE void rms_norm_row_backward(const float* __restrict x, const float* __restrict w,
                                            const float* __restrict dy, float eps, std::int64_t n,
                                            float* __restrict dx, double* __restrict dw) {
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (std::int64_t i = 0; i < n; ++i) sq += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sq / static_cast<float>(n) + eps);
  float gx_sum = 0.0f;
#pragma omp simd reduction(+ : gx_sum)
  for (std::int64_t i = 0; i < n; ++i) gx_sum += dy[i] * w[i] * x[i] * inv;
  const float gx_mean = gx_sum / static_cast<float>(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const float xhat = x[i] * inv;
    dx[i] = inv * (dy[i] * w[i] - xhat * gx_mean);
    dw[i] += static_cast<double>(dy[i]) * xhat;
  }
}

void add_to(Tensor& t, const std::vector<double>& acc) {
  float* p = t.f32();
  for (std::size_t i = 0; i < acc.size(); ++i) p[i] += static_cast<float>(acc[i]);
}

// Norm backward rows in blocks of kNormBlock: each block sums its rows' weight (and bias)
// gradients in double, in row order; the blocks' sums are then added in block order. Blocks
// run on the intra-op threads, and the result does not depend on how many there are.
constexpr std::int64_t kNormBlock = 64;

template <typename Row>
void norm_rows(std::int64_t rows, std::int64_t n, bool with_bias, std::vector<double>& dw,
               std::vector<double>& db, Row row) {
  const std::int64_t blocks = (rows + kNormBlock - 1) / kNormBlock;
  std::vector<double> pw(static_cast<std::size_t>(blocks * n), 0.0);
  std::vector<double> pb(with_bias ? static_cast<std::size_t>(blocks * n) : 0, 0.0);
  numerics::parallel_range(blocks, 12.0 * rows * n, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b)
      for (std::int64_t r = b * kNormBlock; r < std::min(rows, (b + 1) * kNormBlock); ++r)
        row(r, pw.data() + b * n, with_bias ? pb.data() + b * n : nullptr);
  });
  for (std::int64_t b = 0; b < blocks; ++b)
    for (std::int64_t i = 0; i < n; ++i) {
      dw[i] += pw[b * n + i];
      if (with_bias) db[i] += pb[b * n + i];
    }
}

// ---- activations ---------------------------------------------------------------------------

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluCubic = 0.044715f;

inline float sigmoid(float x) {
  return 1.0f / (1.0f + fast_exp(-x));
}

inline float activation_slope(Activation a, float x) {
  switch (a) {
    case Activation::relu:
      return x > 0.0f ? 1.0f : 0.0f;
    case Activation::gelu:  // Phi(x) + x phi(x)
      return 0.5f * (1.0f + fast_erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * fast_exp(-0.5f * x * x);
    case Activation::gelu_tanh: {
      // tanh u and sech^2 u from e = exp(-2|u|): 1 - tanh^2 would cancel for large |u|.
      const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
      const float e = fast_exp(-2.0f * std::fabs(u));
      const float t = std::copysign((1.0f - e) / (1.0f + e), u);
      const float sech2 = 4.0f * e / ((1.0f + e) * (1.0f + e));
      return 0.5f * (1.0f + t) +
             0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    }
    case Activation::silu: {
      const float s = sigmoid(x);
      return s * (1.0f + x * (1.0f - s));
    }
    case Activation::tanh: {  // 1 - tanh^2 x = sech^2 x, from e = exp(-2|x|) as above
      const float e = fast_exp(-2.0f * std::fabs(x));
      return 4.0f * e / ((1.0f + e) * (1.0f + e));
    }
    case Activation::none:
      break;
  }
  return 1.0f;
}

template <Activation A>
MASQUE_VECTORIZE void slope_times(const float* __restrict x, const float* dy, std::int64_t n,
                                  float* dx) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = dy[i] * activation_slope(A, x[i]);
}

// dgate = dout * up * silu'(gate); dup = dout * silu(gate).
MASQUE_VECTORIZE void swiglu_row_backward(const float* __restrict gate, const float* __restrict up,
                                          const float* __restrict dout, std::int64_t n,
                                          float* __restrict dgate, float* __restrict dup) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(gate[i]);
    const float silu = gate[i] * s;
    dgate[i] = dout[i] * up[i] * s * (1.0f + gate[i] * (1.0f - s));
    dup[i] = dout[i] * silu;
  }
}

// ---- dropout: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3") --

struct Philox {
  std::uint32_t c[4];
};

inline void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

Philox philox(Philox ctr, std::uint32_t k0, std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, ctr.c[0], hi0, lo0);
    mulhilo(0xCD9E8D57u, ctr.c[2], hi1, lo1);
    ctr = {{hi1 ^ ctr.c[1] ^ k0, lo1, hi0 ^ ctr.c[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// Four draws for elements [4 * block, 4 * block + 4).
Philox draws(const DropoutKey& key, std::uint64_t block) {
  return philox({{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                  static_cast<std::uint32_t>(key.step), static_cast<std::uint32_t>(key.tensor)}},
                static_cast<std::uint32_t>(key.seed), static_cast<std::uint32_t>(key.seed >> 32));
}

inline float to_uniform(std::uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);  // 24 bits: exact in [0, 1)
}

void apply_dropout(const DropoutKey& key, float p, const float* x, std::int64_t n, float* y,
                   const char* op) {
  require(p >= 0.0f && p < 1.0f, op, "the probability must be in [0, 1), got " + std::to_string(p));
  if (p == 0.0f) {
    if (y != x) std::memcpy(y, x, sizeof(float) * n);
    return;
  }
  const float scale = 1.0f / (1.0f - p);
  const std::int64_t blocks = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (n >= (1 << 18))
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const Philox r = draws(key, static_cast<std::uint64_t>(blk));
    for (int l = 0; l < 4; ++l) {
      const std::int64_t i = blk * 4 + l;
      if (i < n) y[i] = to_uniform(r.c[l]) >= p ? x[i] * scale : 0.0f;
    }
  }
}

// f(c, u) for the draws u of elements first .. first + n - 1 (c = 0 .. n - 1).
template <typename F>
void for_each_draw(const DropoutKey& key, std::uint64_t first, std::int64_t n, F&& f) {
  std::int64_t c = 0;
  std::uint64_t block = first / 4;
  int lane = static_cast<int>(first % 4);
  while (c < n) {
    const Philox r = draws(key, block++);
    for (; lane < 4 && c < n; ++lane, ++c) f(c, to_uniform(r.c[lane]));
    lane = 0;
  }
}

}  // namespace

void layer_norm_backward(const Tensor& x, const Tensor& weight, float eps, const Tensor& dy,
                         Tensor& dx, Tensor& dweight, Tensor* dbias) {
  const std::int64_t n = numerics::features(x, "layer_norm_backward");
  numerics::require_vector(weight, n, "layer_norm_backward", "weight");
  numerics::require_vector(dweight, n, "layer_norm_backward", "dweight");
  if (dbias) numerics::require_vector(*dbias, n, "layer_norm_backward", "dbias");
  require_like(dy, x, "layer_norm_backward", "dy");
  require(&dx != &x && &dx != &dy, "layer_norm_backward", "dx must not alias x or dy");
  numerics::shape_like(dx, x);
  const std::int64_t rows = numerics::rows(x, n);
  std::vector<double> dw(n, 0.0), db(dbias ? n : 0, 0.0);
  norm_rows(rows, n, dbias != nullptr, dw, db, [&](std::int64_t r, double* pw, double* pb) {
    layer_norm_row_backward(x.f32() + r * n, weight.f32(), dy.f32() + r * n, eps, n,
                            dx.f32() + r * n, pw, pb);
  });
  add_to(dweight, dw);
  if (dbias) add_to(*dbias, db);
}

void rms_norm_backward(const Tensor& x, const Tensor& weight, float eps, const Tensor& dy,
                       Tensor& dx, Tensor& dweight) {
  const std::int64_t n = numerics::features(x, "rms_norm_backward");
  numerics::require_vector(weight, n, "rms_norm_backward", "weight");
  numerics::require_vector(dweight, n, "rms_norm_backward", "dweight");
  require_like(dy, x, "rms_norm_backward", "dy");
  require(&dx != &x && &dx != &dy, "rms_norm_backward", "dx must not alias x or dy");
  numerics::shape_like(dx, x);
  const std::int64_t rows = numerics::rows(x, n);
  std::vector<double> dw(n, 0.0), unused;
  norm_rows(rows, n, false, dw, unused, [&](std::int64_t r, double* pw, double*) {
    rms_norm_row_backward(x.f32() + r * n, weight.f32(), dy.f32() + r * n, eps, n, dx.f32() + r * n,
                          pw);
  });
  add_to(dweight, dw);
}

void activation_backward(Activation activation, const Tensor& x, const Tensor& dy, Tensor& dx) {
  require_like(dy, x, "activation_backward", "dy");
  require(&dx != &x, "activation_backward", "dx must not alias x");
  if (&dx != &dy) numerics::shape_like(dx, x);
  const float *px = x.f32(), *pdy = dy.f32();
  float* pdx = dx.f32();
  if (activation == Activation::none) {
    if (&dx != &dy) std::memcpy(pdx, pdy, dy.bytes());
    return;
  }
  numerics::parallel_range(x.numel(), 30.0 * x.numel(), [&](std::int64_t b, std::int64_t e) {
    switch (activation) {
      case Activation::relu:
        return slope_times<Activation::relu>(px + b, pdy + b, e - b, pdx + b);
      case Activation::gelu:
        return slope_times<Activation::gelu>(px + b, pdy + b, e - b, pdx + b);
      case Activation::gelu_tanh:
        return slope_times<Activation::gelu_tanh>(px + b, pdy + b, e - b, pdx + b);
      case Activation::silu:
        return slope_times<Activation::silu>(px + b, pdy + b, e - b, pdx + b);
      case Activation::tanh:
        return slope_times<Activation::tanh>(px + b, pdy + b, e - b, pdx + b);
      case Activation::none:
        return;
    }
  });
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate,
                     Tensor& dup) {
  require_like(up, gate, "swiglu_backward", "up");
  require_like(dout, gate, "swiglu_backward", "dout");
  numerics::shape_like(dgate, gate);
  numerics::shape_like(dup, gate);
  swiglu_row_backward(gate.f32(), up.f32(), dout.f32(), gate.numel(), dgate.f32(), dup.f32());
}

void swiglu_fused_backward(const Tensor& gate_up, const Tensor& dout, Tensor& dgate_up) {
  const std::int64_t n2 = numerics::features(gate_up, "swiglu_fused_backward");
  require(n2 % 2 == 0, "swiglu_fused_backward", "gate_up has an odd width");
  const std::int64_t n = n2 / 2, rows = numerics::rows(gate_up, n2);
  require(dout.dtype() == DType::f32 && dout.numel() == rows * n, "swiglu_fused_backward",
          "dout " + to_string(dout.shape()) + " is not " + std::to_string(rows) + " x " +
              std::to_string(n));
  numerics::shape_like(dgate_up, gate_up);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up.f32() + r * n2;
    float* dg = dgate_up.f32() + r * n2;
    swiglu_row_backward(g, g + n, dout.f32() + r * n, n, dg, dg + n);
  }
}

void rotary_backward(const Rotary& rotary, float* dx, std::int64_t rows, std::int64_t row_stride,
                     std::int32_t heads, std::span<const std::int32_t> positions) {
  // R^T (a, b) = (a', -b') where (a', b') = R (a, -b): negate the second halves, rotate
  // forward, negate again (exact: negation does not round).
  const std::int32_t d = rotary.head_dim(), half = rotary.rotary_dim() / 2;
  auto negate_second_halves = [&] {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int32_t h = 0; h < heads; ++h) {
        float* x2 = dx + r * row_stride + std::int64_t{h} * d + half;
        for (std::int32_t i = 0; i < half; ++i) x2[i] = -x2[i];
      }
  };
  negate_second_halves();
  rotary.apply(dx, rows, row_stride, heads, positions);
  negate_second_halves();
}

void rotary_backward(const Rotary& rotary, Tensor& dx, std::int32_t heads,
                     std::span<const std::int32_t> positions) {
  const std::int64_t width = std::int64_t{heads} * rotary.head_dim();
  require(
      dx.dtype() == DType::f32 && dx.rank() > 0 && dx.dim(-1) == width, "rotary_backward",
      "expected F32 rows of " + std::to_string(width) + " features, got " + to_string(dx.shape()));
  rotary_backward(rotary, dx.f32(), dx.numel() / width, width, heads, positions);
}

void embedding_backward(std::span<const std::int32_t> ids, const Tensor& dy, Tensor& dtable) {
  require(dtable.dtype() == DType::f32 && dtable.rank() == 2, "embedding_backward",
          "dtable must be a 2-D F32 tensor, got " + to_string(dtable.shape()));
  const std::int64_t rows = dtable.dim(0), dim = dtable.dim(1);
  require(dy.dtype() == DType::f32 && dy.numel() == static_cast<std::int64_t>(ids.size()) * dim,
          "embedding_backward",
          "dy " + to_string(dy.shape()) + " is not " + std::to_string(ids.size()) + " x " +
              std::to_string(dim));
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= rows)
      throw RecordError("embedding_backward: id " + std::to_string(ids[i]) +
                        " is outside the table of " + std::to_string(rows) + " rows");
  float* table = dtable.f32();
  const float* g = dy.f32();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    float* row = table + ids[i] * dim;
    const float* src = g + static_cast<std::int64_t>(i) * dim;
#pragma omp simd
    for (std::int64_t c = 0; c < dim; ++c) row[c] += src[c];
  }
}

float dropout_uniform(const DropoutKey& key, std::uint64_t index) {
  return to_uniform(draws(key, index / 4).c[index % 4]);
}

void dropout_span(const DropoutKey& key, float p, std::uint64_t first, const float* x,
                  std::int64_t n, float* y) {
  require(p >= 0.0f && p < 1.0f, "dropout_span",
          "the probability must be in [0, 1), got " + std::to_string(p));
  if (p == 0.0f) {
    if (y != x) std::memcpy(y, x, sizeof(float) * n);
    return;
  }
  const float scale = 1.0f / (1.0f - p);
  for_each_draw(key, first, n,
                [&](std::int64_t c, float u) { y[c] = u >= p ? x[c] * scale : 0.0f; });
}

void dropout_factors(const DropoutKey& key, float p, std::uint64_t first, std::int64_t n,
                     float* factors) {
  require(p >= 0.0f && p < 1.0f, "dropout_factors",
          "the probability must be in [0, 1), got " + std::to_string(p));
  const float scale = 1.0f / (1.0f - p);
  for_each_draw(key, first, n,
                [&](std::int64_t c, float u) { factors[c] = u >= p ? scale : 0.0f; });
}

void dropout_forward(const DropoutKey& key, float p, const Tensor& x, Tensor& y) {
  require(x.dtype() == DType::f32, "dropout_forward", "expected an F32 tensor");
  numerics::shape_like(y, x);
  apply_dropout(key, p, x.f32(), x.numel(), y.f32(), "dropout_forward");
}

void dropout_backward(const DropoutKey& key, float p, const Tensor& dy, Tensor& dx) {
  require(dy.dtype() == DType::f32, "dropout_backward", "expected an F32 tensor");
  numerics::shape_like(dx, dy);
  apply_dropout(key, p, dy.f32(), dy.numel(), dx.f32(), "dropout_backward");
}

}  // namespace masque::train
