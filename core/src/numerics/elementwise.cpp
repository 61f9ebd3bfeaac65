// Element-wise arithmetic on activations.
#include <cmath>

#include "masque/ops.hpp"
#include "numerics/simd.hpp"
#include "numerics/tensor_checks.hpp"

namespace masque {

using namespace numerics;

namespace {

MASQUE_VECTORIZE void axpy(float* __restrict y, const float* __restrict x, float alpha,
                           std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
MASQUE_VECTORIZE void add_loop(float* __restrict y, const float* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += x[i];
}
MASQUE_VECTORIZE void scale_loop(float* y, float alpha, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

}  // namespace

void add(Tensor& y, const Tensor& x) {
  require_same_numel(y, x, "add");
  if (y.raw() == x.raw()) return scale(y, 2.0f);
  add_loop(y.f32(), x.f32(), y.numel());
}

void scaled_add(Tensor& y, const Tensor& x, float alpha) {
  require_same_numel(y, x, "scaled_add");
  if (y.raw() == x.raw()) return scale(y, 1.0f + alpha);
  axpy(y.f32(), x.f32(), alpha, y.numel());
}

void scale(Tensor& y, float alpha) {
  features(y, "scale");
  scale_loop(y.f32(), alpha, y.numel());
}

void soft_cap(float* x, std::int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (std::int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void soft_cap(Tensor& y, float cap) {
  features(y, "soft_cap");
  soft_cap(y.f32(), y.numel(), cap);
}

void add_bias(Tensor& y, const Tensor& bias) {
  const std::int64_t n = features(y, "add_bias");
  require_vector(bias, n, "add_bias", "bias");
  const std::int64_t rows = numerics::rows(y, n);
  float* py = y.f32();
  for (std::int64_t r = 0; r < rows; ++r) add_loop(py + r * n, bias.f32(), n);
}

}  // namespace masque
