// Mlp: down(act(up(x))) or down(act(gate(x)) * up(x)).
#include <cstring>

#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "masque/transformer/network.hpp"

namespace masque::transformer {

namespace {

// out = act(gate) * up for rows of [gate | up] (gated GELU and friends; SiLU has swiglu_fused).
void gated(const Tensor& gate_up, Activation activation, Tensor& out) {
  const std::int64_t n = gate_up.dim(-1) / 2, rows = gate_up.numel() / (2 * n);
  out.resize({rows, n});
  for (std::int64_t r = 0; r < rows; ++r)
    std::memcpy(out.f32() + r * n, gate_up.f32() + r * 2 * n, sizeof(float) * n);
  activate(activation, out);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* up = gate_up.f32() + r * 2 * n + n;
    float* o = out.f32() + r * n;
    for (std::int64_t c = 0; c < n; ++c) o[c] *= up[c];
  }
}

}  // namespace

Mlp::Mlp(const MlpSpec& spec, const WeightReader& weights)
    : kind_(spec.kind),
      activation_(spec.activation),
      // A plain MLP's activation is fused into its first matmul.
      in_(weights.fused(spec.in, spec.kind == MlpKind::plain ? spec.activation : Activation::none)),
      out_(weights.linear(spec.out)) {
  // A gated MLP's gate and up are fused into one matmul anyway: two tensors, or one [gate|up]
  // as the checkpoint stores it (Phi-3's gate_up_proj).
  if (spec.kind == MlpKind::plain ? spec.in.size() != 1 : spec.in.empty() || spec.in.size() > 2)
    throw ConfigError(
        "mlp: a plain MLP has one input projection, a gated one two (gate, up) or one fused");
}

void Mlp::forward(const Tensor& h, Workspace& ws, Tensor& y) const {
  in_.forward(h, ws.inner);
  if (kind_ == MlpKind::plain) return out_.forward(ws.inner, y);
  if (activation_ == Activation::silu)
    swiglu_fused(ws.inner, ws.gated);
  else
    gated(ws.inner, activation_, ws.gated);
  out_.forward(ws.gated, y);
}

void Mlp::list_linears(const std::string& prefix, LinearList& out) const {
  out.emplace_back(prefix + (kind_ == MlpKind::plain ? "in" : "gate_up"), &in_);
  out.emplace_back(prefix + "out", &out_);
}

}  // namespace masque::transformer
