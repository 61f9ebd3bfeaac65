// The Transformer tier, part 1: a network described as plain data.
//
// A model plugin reads its config.json and writes a TransformerSpec: the dimensions, every
// architectural choice (norm kind, pre/post norm, positions, fused or separate projections,
// biases, MLP kind, tied head, scales) and the checkpoint name and shape of every parameter.
// Building layers from a spec is a separate step (network.hpp builds the inference network;
// a trainer builds a trainable one from the same spec and writes its weights back under the
// same names). Nothing here computes; everything here can be printed, compared and copied.
//
//   TransformerSpec
//     encoder        StackSpec (encoder-decoder models only)
//     decoder        StackSpec (the one stack of decoder-only and encoder-only models)
//       embeddings   EmbeddingSpec: token table (scaled?), positions, token types, norm
//       blocks[]     BlockSpec: pre/post norm; self AttentionSpec; cross AttentionSpec
//                    (decoders of encoder-decoders); MlpSpec; a NormSpec per residual
//       final_norm   NormSpec (absent: weight.name empty)
//     head           HeadSpec: optional transform (BERT's MLM head), output LinearSpec
//                    (tied: its weight names the token table), logit scale
//
// parameters(spec) lists every distinct tensor once, as (name, shape, role).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "masque/layers.hpp"
#include "masque/model.hpp"
#include "masque/ops.hpp"
#include "masque/tensor.hpp"

namespace masque::transformer {

// A checkpoint tensor: its name (empty: absent) and the shape the config implies.
struct TensorSpec {
  std::string name{};
  Shape shape{};
  bool present() const { return !name.empty(); }
};

// y = act(x W^T + b). `weight` is [out, in] (out_in) or [in, out] (in_out, GPT-2's Conv1D).
struct LinearSpec {
  TensorSpec weight{};
  TensorSpec bias{};  // absent: no bias
  WeightLayout layout = WeightLayout::out_in;
  std::int64_t in_features() const;
  std::int64_t out_features() const;
};

enum class NormKind : std::uint8_t { layer_norm, rms_norm };

struct NormSpec {
  NormKind kind = NormKind::layer_norm;
  float eps = 1e-5f;
  TensorSpec weight{};  // [dim]; absent: no norm here
  TensorSpec bias{};    // [dim] (layer_norm with bias), else absent
  // Gemma's RMSNorm scales by (1 + weight): the checkpoint stores the offset from one.
  bool unit_offset = false;
  bool present() const { return weight.present(); }
};

enum class PositionKind : std::uint8_t {
  none,        // no absolute positions (e.g. relative-bias models)
  learned,     // a table added to the token embeddings
  sinusoidal,  // a computed table added to the token embeddings
  rotary,      // q and k rotated in every attention block
};

// Where the sines and cosines of a sinusoidal encoding go.
enum class SinusoidLayout : std::uint8_t {
  concat_sin_cos,  // [sin(p w_0) .. sin(p w_{h-1}) | cos(p w_0) .. cos(p w_{h-1})]
  interleaved,     // [sin(p w_0), cos(p w_0), sin(p w_1), cos(p w_1), ...]
};

struct PositionSpec {
  PositionKind kind = PositionKind::none;
  std::int32_t max_positions = 0;  // positions a sequence may use (0: unlimited)
  // learned: token at position t reads row t + offset of `table` (BART: offset 2).
  TensorSpec table{};
  std::int32_t offset = 0;
  // sinusoidal: w_j = max_timescale^(-j / denominator), denominator half - 1 or half; the angle
  // of position t is (t + first_position) w_j, all in float32 as CTranslate2 computes it.
  SinusoidLayout layout = SinusoidLayout::concat_sin_cos;
  std::int32_t first_position = 0;
  double max_timescale = 10000.0;
  bool denominator_half_minus_one = true;
  // rotary (HF rotate_half): the first rotary_dim features of each head (0: all) rotate by
  // position * theta^(-2i/rotary_dim), rescaled as rope_scaling says.
  double rope_theta = 10000.0;
  std::int32_t rotary_dim = 0;
  RopeScaling rope_scaling = {};  // (= {}: GCC warns of designated initializers that omit it)
  // Gemma 3: attention blocks marked local_rotary rotate by this base instead, unscaled (0: none).
  double local_rope_theta = 0.0;
};

// An additive per-head score bias from relative positions (T5) or distances (ALiBi); see
// masque/attention.hpp (PositionBias) for how the kernel evaluates it.
enum class RelativeBiasKind : std::uint8_t { none, t5_buckets, alibi };
struct RelativeBiasSpec {
  RelativeBiasKind kind = RelativeBiasKind::none;
  TensorSpec table{};  // t5_buckets: [num_buckets, heads] (HF relative_attention_bias.weight)
  std::int32_t num_buckets = 32, max_distance = 128;
  bool bidirectional = true;
};

struct AttentionSpec {
  std::int32_t heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;  // on q.k, usually 1/sqrt(head_dim)
  bool cross = false;  // keys and values from the encoder memory
  // The projections in the checkpoint: self-attention one fused [q|k|v] tensor (GPT-2's
  // c_attn) or q, k, v; cross-attention q, k, v (k and v applied to the memory). At inference
  // self-attention always runs q|k|v as one matmul, cross-attention q alone and k|v as one.
  std::vector<LinearSpec> projections{};
  LinearSpec output{};
  bool rotary = false;        // rotate q and k (the stack's PositionSpec)
  bool local_rotary = false;  // ... by its local_rope_theta (Gemma 3's sliding layers)
  std::int32_t window = 0;    // sliding window (Mistral): keys ranked < window below the query
  float softcap = 0.0f;       // > 0: scores become softcap * tanh(score / softcap) (Gemma 2)
  std::int32_t band = 0;      // > 0: keys more than band tokens away hidden (ModernBERT local)
  RelativeBiasSpec relative_bias{};
  // Per-head norms of q and k after the projection, before rotation (Qwen3's q_norm/k_norm):
  // [head_dim] weights, one norm over each head's slice of a row. Absent: none.
  NormSpec q_norm{}, k_norm{};

  std::int64_t q_width() const { return std::int64_t{heads} * head_dim; }
  std::int64_t kv_width() const { return std::int64_t{kv_heads} * head_dim; }
};

enum class MlpKind : std::uint8_t {
  plain,  // down(act(up(x)))
  gated,  // down(act(gate(x)) * up(x))  (SwiGLU: Llama; gated GELU: T5 v1.1)
};

struct MlpSpec {
  MlpKind kind = MlpKind::plain;
  Activation activation = Activation::gelu;
  std::vector<LinearSpec> in{};  // plain: {up}; gated: {gate, up}
  LinearSpec out{};              // down
};

struct BlockSpec {
  bool pre_norm = true;  // x + f(norm(x)); post-norm: norm(x + f(x))
  NormSpec attention_norm{};
  AttentionSpec attention{};
  NormSpec cross_norm{};  // with cross_attention
  AttentionSpec cross_attention{};
  bool has_cross() const { return !cross_attention.projections.empty(); }
  NormSpec mlp_norm{};
  MlpSpec mlp{};
  // Sandwich norms (Gemma 2/3, pre-norm only): x + norm_out(f(norm(x))). Absent: none.
  NormSpec attention_out_norm{}, mlp_out_norm{};
};

struct EmbeddingSpec {
  TensorSpec tokens{};  // [vocab, dim]
  float scale = 1.0f;   // the token table is multiplied by it (at load)
  PositionSpec positions{};
  TensorSpec token_types{};  // [types, dim], or absent
  NormSpec norm{};           // after the sum (BERT), or absent
};

struct StackSpec {
  std::int32_t hidden = 0;
  EmbeddingSpec embeddings{};
  std::vector<BlockSpec> blocks{};
  NormSpec final_norm{};  // absent: none
};

struct HeadSpec {
  // BERT's MLM transform: act(dense(x)), then norm; absent when transform.weight is.
  LinearSpec transform{};
  Activation transform_activation = Activation::none;
  NormSpec transform_norm{};
  LinearSpec output{};  // [vocab, hidden]; tied: the weight names the token table
  float logit_scale = 1.0f;
  float softcap = 0.0f;         // > 0: logits become softcap * tanh(logit / softcap) (Gemma 2)
  std::string absent_reason{};  // for the error when logits are asked of a model without a head
  bool present() const { return output.weight.present(); }
};

struct TransformerSpec {
  std::string architecture{};  // the family as the model plugin names it (ModelInfo::architecture)
  ModelKind kind = ModelKind::decoder_only;
  std::string positions_key{};  // the config key of the context length, for messages
  StackSpec encoder{};          // encoder-decoder only (blocks empty otherwise)
  StackSpec decoder{};
  HeadSpec head{};
  std::int32_t vocab_size = 0;         // output vocabulary
  std::int32_t source_vocab_size = 0;  // encoder input vocabulary (encoder-decoder)
  // The standard deviation of the normal a from-scratch run draws matrices and embeddings from
  // (the config's initializer_range; Hugging Face's default 0.02).
  double initializer_range = 0.02;

  bool encoder_decoder() const { return encoder.embeddings.tokens.present(); }
};

// ---- builders for config readers ------------------------------------------------------------

// `name`.weight [out, in] (or [in, out] for in_out) and, with bias, `name`.bias [out].
LinearSpec linear(const std::string& name, std::int64_t out, std::int64_t in, bool bias,
                  WeightLayout layout = WeightLayout::out_in);
// `name`.weight and (layer_norm with bias) `name`.bias, both [dim].
NormSpec norm(NormKind kind, const std::string& name, std::int64_t dim, float eps,
              bool bias = true);

// What a parameter is, for a trainer (weight decay applies to matrices and embeddings).
// norm_offset: a (1 + w) norm's w (NormSpec::unit_offset), initialised to zero.
enum class ParameterRole : std::uint8_t {
  embedding,
  matrix,
  bias,
  norm_weight,
  norm_bias,
  table,
  norm_offset
};

struct Parameter {
  std::string name{};
  Shape shape{};
  ParameterRole role;
};

// Every distinct parameter of the spec (a tied head's weight is listed once, as the
// embedding), in a stable order: encoder, decoder, head.
std::vector<Parameter> parameters(const TransformerSpec& spec);

// The projections each Linear of an attention block fuses, outputs in this order: {q, k, v}
// (or the one fused tensor) for self-attention; {q} and {k, v} for cross-attention.
std::vector<std::span<const LinearSpec>> projection_groups(const AttentionSpec& attention);

// Every matmul the tier builds for the spec, each as the LinearSpecs one Linear fuses (outputs
// concatenated in order): attention projections and outputs, MLP inputs and outputs, the head.
std::vector<std::vector<LinearSpec>> matmuls(const TransformerSpec& spec);

const char* to_string(NormKind kind);
const char* to_string(PositionKind kind);
const char* to_string(MlpKind kind);

}  // namespace masque::transformer
