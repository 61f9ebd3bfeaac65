// Tensor ops: the stateless numerics the layers (layers.hpp) and models are built from.
//
// Conventions: activations are row-major f32 tensors whose last dimension is the feature
// dimension; every other dimension counts rows (a [B, T, C] tensor is B*T rows of C). Outputs
// are resized to fit (an owned output tensor keeps its buffer when it is large enough, so a
// model can reuse workspaces). Every op is a pure function of its arguments and safe to call
// from several threads at once.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "masque/tensor.hpp"

namespace masque {

// ---- activations ---------------------------------------------------------------------------

enum class Activation : std::uint8_t {
  none,
  relu,
  gelu,       // exact: 0.5 x (1 + erf(x / sqrt 2))  (HF "gelu", BERT)
  gelu_tanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (HF "gelu_new", GPT-2)
  silu,       // x * sigmoid(x)  (HF "silu" / "swish", Llama)
  tanh,       // BERT's pooler (sequence classification)
};

// Maps a Hugging Face `hidden_act` / `activation_function` name to an Activation: gelu,
// gelu_new / gelu_pytorch_tanh / gelu_fast, relu, silu / swish. ConfigError for anything else.
Activation parse_activation(std::string_view name);
const char* to_string(Activation activation);

void activate(Activation activation, Tensor& x);  // in place
void relu(Tensor& x);
void gelu(Tensor& x);
void gelu_tanh(Tensor& x);
void silu(Tensor& x);

// out = silu(gate) * up (Llama's MLP); gate and up have the same shape.
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out);
// The same on one fused projection: each row of `gate_up` is [gate (n) | up (n)]; out is [rows, n].
void swiglu_fused(const Tensor& gate_up, Tensor& out);

// ---- element-wise arithmetic ---------------------------------------------------------------

void add(Tensor& y, const Tensor& x);                      // y += x (same numel)
void scaled_add(Tensor& y, const Tensor& x, float alpha);  // y += alpha * x
void scale(Tensor& y, float alpha);                        // y *= alpha
void add_bias(Tensor& y, const Tensor& bias);              // each row of y += bias
// x = cap * tanh(x / cap) (Gemma 2's soft-capping of attention scores and logits); cap > 0.
void soft_cap(float* x, std::int64_t n, float cap);
void soft_cap(Tensor& y, float cap);

// ---- normalisation -------------------------------------------------------------------------

// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance).
// `bias` may be empty (no bias). y may be x.
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& y);
// y = x / sqrt(mean(x^2) + eps) * weight (Llama / T5). y may be x.
void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& y);

// ---- softmax -------------------------------------------------------------------------------

void softmax(Tensor& x);      // over the last dimension, in place
void log_softmax(Tensor& x);  // over the last dimension, in place

// ---- embeddings ----------------------------------------------------------------------------

// out[i] = table[ids[i]] * scale; out is [ids.size(), dim] f32. The table is F32, BF16 or F16
// (e.g. a view of a checkpoint's mapping: rows are widened as they are read). An id outside
// [0, rows) is a RecordError naming the id.
void embedding(const Tensor& table, std::span<const std::int32_t> ids, Tensor& out,
               float scale = 1.0f);
// out[i] += table[ids[i]] (position and token-type embeddings; any table type as above).
void add_embedding(const Tensor& table, std::span<const std::int32_t> ids, Tensor& out);

// ---- rows ----------------------------------------------------------------------------------

// out[i] = x[rows[i]] (rows of the last dimension); RuntimeError for a row outside x.
void gather_rows(const Tensor& x, std::span<const std::int32_t> rows, Tensor& out);

}  // namespace masque
