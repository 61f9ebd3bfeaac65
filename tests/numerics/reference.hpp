// Plain double-precision reference implementations and helpers for the numerics tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "masque/attention.hpp"
#include "masque/mask.hpp"
#include "masque/ops.hpp"
#include "masque/tensor.hpp"

namespace masque::test {

inline Tensor random_tensor(Shape shape, std::uint32_t seed, float scale = 1.0f) {
  Tensor t(std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
  return t;
}

inline std::vector<double> to_double(const Tensor& t) {
  return std::vector<double>(t.f32(), t.f32() + t.numel());
}

// max |a - b| / max(1, max |b|): the error relative to the magnitude of the reference values.
inline double relative_error(const float* got, const std::vector<double>& want) {
  double diff = 0.0, scale = 1.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return diff / scale;
}
inline double relative_error(const Tensor& got, const std::vector<double>& want) {
  return relative_error(got.f32(), want);
}

inline double activation_reference(Activation a, double x) {
  switch (a) {
    case Activation::none:
      return x;
    case Activation::relu:
      return x > 0 ? x : 0;
    case Activation::gelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::gelu_tanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::silu:
      return x / (1.0 + std::exp(-x));
    case Activation::tanh:
      return std::tanh(x);
  }
  return x;
}

// y = act(x W^T + b) with W stored [out, in], in double.
inline std::vector<double> reference_linear(const Tensor& x, const Tensor& w_out_in,
                                            const Tensor& bias, Activation a) {
  const std::int64_t in = w_out_in.dim(1), out = w_out_in.dim(0), rows = x.numel() / in;
  std::vector<double> y;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = bias.empty() ? 0.0 : bias.f32()[o];
      for (std::int64_t i = 0; i < in; ++i)
        s += static_cast<double>(x.f32()[r * in + i]) * w_out_in.f32()[o * in + i];
      y.push_back(activation_reference(a, s));
    }
  return y;
}

// W [r, c] -> [c, r] (nn.Linear <-> Conv1D layout).
inline Tensor transpose(const Tensor& w) {
  Tensor t({w.dim(1), w.dim(0)});
  for (std::int64_t r = 0; r < w.dim(0); ++r)
    for (std::int64_t c = 0; c < w.dim(1); ++c)
      t.f32()[c * w.dim(0) + r] = w.f32()[r * w.dim(1) + c];
  return t;
}

// Attention in double with the rule taken from MaskView::allowed; q [B, Tq, H*d],
// k/v [B, Tk, Hkv*d] contiguous, result [B, Tq, H*d].
inline std::vector<double> reference_attention(const AttentionDims& dims, const MaskView& mask,
                                               const Tensor& q, const Tensor& k, const Tensor& v,
                                               std::int64_t q_stride, std::int64_t k_stride) {
  const int H = dims.heads, G = dims.heads / dims.kv_heads, d = dims.head_dim;
  const std::int64_t qw = std::int64_t{H} * d, kw = std::int64_t{dims.kv_heads} * d;
  std::vector<double> out(static_cast<std::size_t>(mask.batch) * mask.q_len * qw, 0.0);
  for (int b = 0; b < mask.batch; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < mask.q_len; ++i) {
        const float* qi = q.f32() + (std::int64_t{b} * mask.q_len + i) * q_stride + h * d;
        std::vector<double> s(mask.k_len, 0.0);
        std::vector<bool> ok(mask.k_len, false);
        double mx = -INFINITY;
        for (int j = 0; j < mask.k_len; ++j) {
          if (!mask.allowed(b, i, j)) continue;
          ok[j] = true;
          const float* kj = k.f32() + (std::int64_t{b} * mask.k_len + j) * k_stride + (h / G) * d;
          double dot = 0.0;
          for (int c = 0; c < d; ++c) dot += static_cast<double>(qi[c]) * kj[c];
          s[j] = dot * dims.scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (int j = 0; j < mask.k_len; ++j)
          if (ok[j]) sum += (s[j] = std::exp(s[j] - mx));
        double* o = out.data() + (std::int64_t{b} * mask.q_len + i) * qw + h * d;
        for (int j = 0; j < mask.k_len; ++j) {
          if (!ok[j]) continue;
          const float* vj = v.f32() + (std::int64_t{b} * mask.k_len + j) * k_stride + (h / G) * d;
          for (int c = 0; c < d; ++c) o[c] += s[j] / sum * vj[c];
        }
      }
  (void)kw;
  return out;
}

}  // namespace masque::test
