// The Transformer tier, part 2: the inference network built from a TransformerSpec (spec.hpp).
//
// CTranslate2's layers/ and llama.cpp's build_attn / build_ffn in one place: Norm, Attention
// (self over a batch layout or a KV cache, or cross over the encoder memory), Mlp (plain or
// gated), Block (pre- or post-norm residuals), Embeddings, Stack and Head. Every layer is built
// once from its spec and the checkpoint (WeightReader: the one way weights are read) and is then
// const; activations live in a Workspace the caller owns (one per thread for a forward, one per
// decoding state for its steps), so warm steps allocate nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "masque/attention.hpp"
#include "masque/kv_cache.hpp"
#include "masque/layers.hpp"
#include "masque/model.hpp"
#include "masque/safetensors.hpp"
#include "masque/transformer/spec.hpp"

namespace masque::transformer {

// Reads the tensors a spec names, each checked against its shape (ConfigError naming the file
// and the tensor otherwise), into Linear layers of one compute type.
class WeightReader {
 public:
  WeightReader(const SafeTensors& checkpoint, MatmulType matmul)
      : checkpoint_(checkpoint), matmul_(matmul) {}
  Tensor tensor(const TensorSpec& spec) const;  // f32; empty Tensor when the spec is absent
  // As stored (F32, F16 or BF16), read in place: for tables looked up by row (embeddings).
  Tensor stored(const TensorSpec& spec) const;
  // A Linear packs (or quantizes) its weights into a copy; the mapped source pages are then
  // released (SafeTensors::release), so a loaded model holds each weight once.
  Linear linear(const LinearSpec& spec, Activation activation = Activation::none) const;
  // Several projections of one input as one matmul, outputs in the order given.
  Linear fused(std::span<const LinearSpec> specs, Activation activation = Activation::none) const;
  // The weight of `spec` as a quantized folder stores it (quantized_folder.hpp), or nullopt when
  // the checkpoint holds it unquantized. ConfigError naming the file and tensor when malformed.
  std::optional<QuantizedWeight> quantized(const LinearSpec& spec) const;

 private:
  const SafeTensors& checkpoint_;
  MatmulType matmul_;
};

// Activations of one call.
struct Workspace {
  std::vector<TokenId> ids;             // pads replaced by 0: their value is arbitrary
  std::vector<std::int32_t> positions;  // likewise
  std::vector<std::int32_t> token_types;
  Tensor hidden, normed, sublayer, qkv, context, inner, gated, selected, transformed;
  Tensor heads;  // one row per (row, head): per-head q/k norms
};

// Where self-attention finds its keys: the batch itself under its layout (a full forward), or a
// KV cache the new tokens are being appended to (start, step). `positions` are the new tokens'.
struct AttentionTarget {
  const AttentionLayout* layout = nullptr;
  KvCache* cache = nullptr;
  std::int32_t length = 0;  // new tokens per row
  std::span<const std::int32_t> positions;
  // The layer whose attention probabilities to keep (layer resolved, heads > 0), or null.
  const AttentionRecording* record = nullptr;
};

class Norm {
 public:
  Norm() = default;
  Norm(const NormSpec& spec, const WeightReader& weights);
  bool empty() const { return weight_.numel() == 0; }
  void forward(const Tensor& x, Tensor& y) const;  // y may be x

 private:
  NormKind kind_ = NormKind::layer_norm;
  Tensor weight_, bias_;
  float eps_ = 1e-5f;
};

// Sinusoidal position encodings (PositionKind::sinusoidal), tabulated for the first positions
// and computed on the fly past them (the same floats): memory does not grow with what a config
// claims. Shared by the inference embeddings and the trainer's.
class BOOST_SYMBOL_VISIBLE Sinusoids {
 public:
  Sinusoids(const PositionSpec& spec, std::int32_t dim);
  // x[r] += encoding of positions[r].
  void add_to(std::span<const std::int32_t> positions, Tensor& x) const;

 private:
  void encode(std::int32_t position, float* row) const;
  PositionSpec spec_;
  std::int32_t dim_;
  std::vector<float> w_;
  std::vector<float> table_;
};

class Attention {
 public:
  Attention() = default;
  Attention(const AttentionSpec& spec, const WeightReader& weights, const Rotary* rotary);
  // Self-attention of h's tokens; y = output projection of the context.
  void forward(const Tensor& h, Workspace& ws, const AttentionTarget& target, std::int32_t layer,
               Tensor& y) const;
  // Cross-attention: projects the memory once into the cache (after cache.set_source) ...
  void remember(const Tensor& memory, std::int32_t length, KvCache& cache, std::int32_t layer,
                Tensor& scratch) const;
  // ... and attends h's queries (the rows of the cache, one or a step's several each) to it.
  void attend_memory(const Tensor& h, Workspace& ws, const KvCache& cache, std::int32_t layer,
                     const AttentionRecording* record, Tensor& y) const;
  std::int32_t heads() const { return dims_.heads; }
  void list_linears(const std::string& prefix, LinearList& out) const;

 private:
  MaskView windowed(MaskView mask) const;
  // The kernel's output for `record` when it asks for this layer's attention of this kind
  // (its tensor sized for `mask`), else null: the one place attention probabilities are kept.
  static const AttentionProbs* capture(const AttentionRecording* record, bool cross,
                                       std::int32_t layer, const MaskView& mask,
                                       AttentionProbs& out);

  AttentionDims dims_;
  std::int32_t window_ = 0, band_ = 0;
  std::shared_ptr<const Tensor> bias_table_;
  PositionBias bias_;
  const Rotary* rotary_ = nullptr;
  Norm q_norm_, k_norm_;  // per head (AttentionSpec::q_norm), or empty
  Linear qkv_;            // self: q|k|v; cross: q
  Linear kv_;             // cross: k|v of the memory
  Linear out_;
};

class Mlp {
 public:
  Mlp() = default;
  Mlp(const MlpSpec& spec, const WeightReader& weights);
  void forward(const Tensor& h, Workspace& ws, Tensor& y) const;
  void list_linears(const std::string& prefix, LinearList& out) const;

 private:
  MlpKind kind_ = MlpKind::plain;
  Activation activation_ = Activation::none;
  Linear in_, out_;  // in_: up (activation fused) or [gate | up]
};

class Block {
 public:
  Block(const BlockSpec& spec, const WeightReader& weights, const Rotary* rotary);
  // x [rows, hidden] updated in place; cross-attention (if any) reads target.cache's memory.
  void forward(Tensor& x, Workspace& ws, const AttentionTarget& target, std::int32_t layer) const;
  const Attention& self_attention() const { return attention_; }
  const Attention& cross_attention() const { return cross_; }
  bool has_cross_attention() const { return has_cross_; }
  void list_linears(const std::string& prefix, LinearList& out) const;

 private:
  // x = x + out_norm(f(norm(x))) (out_norm empty: none) or x = norm(x + f(x)).
  template <typename Sublayer>
  void residual(const Norm& norm, const Norm& out_norm, Tensor& x, Workspace& ws,
                Sublayer&& f) const;

  bool pre_norm_ = true, has_cross_ = false;
  Norm attention_norm_, cross_norm_, mlp_norm_;
  Norm attention_out_norm_, mlp_out_norm_;  // Gemma's sandwich norms, or empty
  Attention attention_, cross_;
  Mlp mlp_;
};

class Embeddings {
 public:
  Embeddings() = default;
  Embeddings(const EmbeddingSpec& spec, const WeightReader& weights);
  std::int64_t vocab() const { return tokens_.dim(0); }
  std::int32_t types() const {
    return types_.numel() ? static_cast<std::int32_t>(types_.dim(0)) : 0;
  }
  const PositionSpec& positions() const { return positions_; }
  // out = tokens (+ positions) (+ token types), normed; ids etc. already checked.
  void forward(std::span<const TokenId> ids, std::span<const std::int32_t> positions,
               std::span<const std::int32_t> token_types, Tensor& out) const;

 private:
  PositionSpec positions_;
  Tensor tokens_;  // as stored in the checkpoint (read in place), rows times scale_ when read
  float scale_ = 1.0f;
  Tensor learned_, types_;
  std::shared_ptr<const Sinusoids> sinusoids_;
  Norm norm_;
};

// Embeddings, blocks and a final norm.
class Stack {
 public:
  Stack() = default;
  Stack(const StackSpec& spec, const WeightReader& weights);
  const Embeddings& embeddings() const { return embeddings_; }
  const std::vector<Block>& blocks() const { return blocks_; }
  std::int32_t max_positions() const { return embeddings_.positions().max_positions; }
  // ws.ids / ws.positions / ws.token_types -> ws.hidden after the last block.
  void run(Workspace& ws, const AttentionTarget& target) const;
  // The final norm of x into y (y = x when there is none, without a copy when it aliases).
  const Tensor& finish(const Tensor& x, Tensor& y) const;
  void list_linears(const std::string& prefix, LinearList& out) const;

 private:
  Embeddings embeddings_;
  std::unique_ptr<Rotary> rotary_;        // shared by the blocks, which keep a pointer
  std::unique_ptr<Rotary> local_rotary_;  // PositionSpec::local_rope_theta's, or null
  std::vector<Block> blocks_;
  Norm final_norm_;
};

class Head {
 public:
  Head() = default;
  Head(const HeadSpec& spec, const WeightReader& weights);
  bool empty() const { return output_.empty(); }
  std::int64_t vocab() const { return output_.out_features(); }
  void forward(const Tensor& hidden, Workspace& ws, Tensor& logits) const;
  void list_linears(const std::string& prefix, LinearList& out) const;

 private:
  Linear transform_;
  Norm transform_norm_;
  Linear output_;
  float logit_scale_ = 1.0f;
  float softcap_ = 0.0f;
};

}  // namespace masque::transformer
