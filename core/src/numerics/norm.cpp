// Layer norm and RMS norm over the feature dimension.
#include <cmath>

#include "masque/ops.hpp"
#include "numerics/simd.hpp"
#include "numerics/tensor_checks.hpp"

namespace masque {

using namespace numerics;

namespace {

// Two passes (mean, then centred variance) in float with vector reductions: stable for the
// activations transformers produce.
// x and y may be the same row (in-place use), so they are not __restrict.
MASQUE_VECTORIZE void layer_norm_row(const float* x, const float* w, const float* b, float eps,
                                     std::int64_t n, float* y) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (std::int64_t i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const float inv = 1.0f / std::sqrt(sq / static_cast<float>(n) + eps);
  if (b) {
    for (std::int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * w[i] + b[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * w[i];
  }
}

MASQUE_VECTORIZE void rms_norm_row(const float* x, const float* w, float eps, std::int64_t n,
                                   float* y) {
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (std::int64_t i = 0; i < n; ++i) sq += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sq / static_cast<float>(n) + eps);
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y) {
  const std::int64_t n = features(x, "layer_norm");
  require_vector(weight, n, "layer_norm", "weight");
  if (!bias.empty() || bias.raw()) require_vector(bias, n, "layer_norm", "bias");
  shape_like(y, x);
  const std::int64_t rows = numerics::rows(x, n);
  const float* px = x.f32();
  const float* pb = bias.empty() ? nullptr : bias.f32();
  float* py = y.f32();
  // y may be x: each row is reduced before it is written, and written index by index.
  for (std::int64_t r = 0; r < rows; ++r)
    layer_norm_row(px + r * n, weight.f32(), pb, eps, n, py + r * n);
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) {
  const std::int64_t n = features(x, "rms_norm");
  require_vector(weight, n, "rms_norm", "weight");
  shape_like(y, x);
  const std::int64_t rows = numerics::rows(x, n);
  const float* px = x.f32();
  float* py = y.f32();
  for (std::int64_t r = 0; r < rows; ++r)
    rms_norm_row(px + r * n, weight.f32(), eps, n, py + r * n);
}

}  // namespace masque
