// Activation functions and gated units.
#include <cmath>
#include <string>

#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "numerics/parallel.hpp"
#include "numerics/simd.hpp"
#include "numerics/tensor_checks.hpp"

namespace masque {

using namespace numerics;

Activation parse_activation(std::string_view name) {
  if (name == "gelu") return Activation::gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast")
    return Activation::gelu_tanh;
  if (name == "relu") return Activation::relu;
  if (name == "silu" || name == "swish") return Activation::silu;
  if (name == "tanh") return Activation::tanh;
  if (name == "none" || name == "linear" || name == "identity") return Activation::none;
  throw ConfigError(
      "unknown activation '" + std::string(name) +
      "' (known: gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu, swish, tanh)");
}

const char* to_string(Activation activation) {
  switch (activation) {
    case Activation::none:
      return "none";
    case Activation::relu:
      return "relu";
    case Activation::gelu:
      return "gelu";
    case Activation::gelu_tanh:
      return "gelu_tanh";
    case Activation::silu:
      return "silu";
    case Activation::tanh:
      return "tanh";
  }
  return "?";
}

namespace {

MASQUE_VECTORIZE void relu_loop(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
MASQUE_VECTORIZE void gelu_loop(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = gelu_erf_scalar(x[i]);
}
MASQUE_VECTORIZE void gelu_tanh_loop(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = gelu_tanh_scalar(x[i]);
}
MASQUE_VECTORIZE void silu_loop(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = silu_scalar(x[i]);
}
MASQUE_VECTORIZE void tanh_loop(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = fast_tanh(x[i]);
}
MASQUE_VECTORIZE void swiglu_loop(const float* __restrict gate, const float* __restrict up,
                                  float* __restrict out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = silu_scalar(gate[i]) * up[i];
}

float* data_of(Tensor& x, const char* op) {
  features(x, op);
  return x.f32();
}

}  // namespace

void relu(Tensor& x) {
  relu_loop(data_of(x, "relu"), x.numel());
}
void gelu(Tensor& x) {
  gelu_loop(data_of(x, "gelu"), x.numel());
}
void gelu_tanh(Tensor& x) {
  gelu_tanh_loop(data_of(x, "gelu_tanh"), x.numel());
}
void silu(Tensor& x) {
  silu_loop(data_of(x, "silu"), x.numel());
}

void activate(Activation activation, Tensor& x) {
  switch (activation) {
    case Activation::none:
      return;
    case Activation::relu:
      return relu(x);
    case Activation::gelu:
      return gelu(x);
    case Activation::gelu_tanh:
      return gelu_tanh(x);
    case Activation::silu:
      return silu(x);
    case Activation::tanh:
      return tanh_loop(data_of(x, "tanh"), x.numel());
  }
}

void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  require_same_numel(gate, up, "swiglu");
  features(gate, "swiglu");
  if (&out == &up || &out == &gate) {
    swiglu_loop(gate.f32(), up.f32(), out.f32(), gate.numel());
    return;
  }
  shape_like(out, gate);
  swiglu_loop(gate.f32(), up.f32(), out.f32(), gate.numel());
}

void swiglu_fused(const Tensor& gate_up, Tensor& out) {
  const std::int64_t width = features(gate_up, "swiglu_fused");
  if (width % 2 != 0)
    throw RuntimeError("swiglu_fused: feature dimension " + std::to_string(width) + " is odd");
  const std::int64_t n = width / 2, rows = numerics::rows(gate_up, width);
  if (&out == &gate_up) throw RuntimeError("swiglu_fused: out must not alias the input");
  Shape shape = gate_up.shape();
  shape.back() = n;
  resize_f32(out, std::move(shape));
  const float* in = gate_up.f32();
  float* o = out.f32();
  // A prefill's rows (a memory-bound loop, but exp costs) on the intra-op threads.
  numerics::parallel_range(rows, 10.0 * rows * n, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r)
      swiglu_loop(in + r * width, in + r * width + n, o + r * n, n);
  });
}

}  // namespace masque
