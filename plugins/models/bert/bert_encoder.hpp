// The BERT computation on rows of tokens: embeddings, post-norm encoder layers, MLM head.
// Batching, validation and caches are the model's business (bert_model.hpp); attention is
// supplied per call, so the same layers serve a full forward and incremental steps.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "bert_config.hpp"
#include "bert_weights.hpp"
#include "masque/attention.hpp"
#include "masque/kv_cache.hpp"
#include "masque/tensor.hpp"

namespace masque::bert {

// Scratch buffers of one computation; tensors keep their buffers between calls.
struct Workspace {
  Tensor h;             // [tokens, hidden]: the hidden states being computed
  Tensor qkv;           // [tokens, 3 * hidden]
  Tensor context;       // [tokens, hidden]: attention output
  Tensor attended;      // [tokens, hidden]: after the attention block
  Tensor intermediate;  // [tokens, intermediate_size]
  Tensor picked;        // [rows, hidden]: the rows that need outputs
  Tensor transformed;   // [rows, hidden]: the MLM head's transform
  std::vector<std::int32_t> ids, positions, token_types;  // inputs with pads neutralised
};

// Computes each layer's attention context [tokens, hidden] from its fused qkv [tokens, 3 hidden].
class SelfAttention {
 public:
  virtual ~SelfAttention() = default;
  virtual void attend(std::int32_t layer, const Tensor& qkv, Tensor& context) = 0;
};

// Attention of a padded batch under its layout (a full forward).
class LayoutAttention final : public SelfAttention {
 public:
  LayoutAttention(const AttentionDims& dims, const AttentionLayout& layout)
      : dims_(dims), layout_(layout) {}
  void attend(std::int32_t layer, const Tensor& qkv, Tensor& context) override;

 private:
  AttentionDims dims_;
  const AttentionLayout& layout_;
};

// Attention of the pending tokens of a KV cache append (`length` per row) to the cache and
// themselves; their keys and values are written to the cache on the way.
class CachedAttention final : public SelfAttention {
 public:
  CachedAttention(const AttentionDims& dims, KvCache& cache, std::int32_t length)
      : dims_(dims), cache_(cache), length_(length) {}
  void attend(std::int32_t layer, const Tensor& qkv, Tensor& context) override;

 private:
  AttentionDims dims_;
  KvCache& cache_;
  std::int32_t length_;
};

class Encoder {
 public:
  Encoder(const BertConfig& config, BertWeights weights);

  const BertConfig& config() const { return config_; }
  AttentionDims dims() const;
  bool has_head() const { return !weights_.head.empty(); }

  // h = LayerNorm(word + position + token-type embeddings), one id of each per token.
  void embed(std::span<const std::int32_t> ids, std::span<const std::int32_t> positions,
             std::span<const std::int32_t> token_types, Tensor& h) const;
  // Runs every encoder layer on ws.h in place.
  void encode(Workspace& ws, SelfAttention& attention) const;
  // MLM logits [rows, vocab] of final hidden states [rows, hidden].
  void predict(const Tensor& hidden, Workspace& ws, Tensor& logits) const;

 private:
  void run_layer(std::int32_t index, Workspace& ws, SelfAttention& attention) const;

  BertConfig config_;
  BertWeights weights_;
};

}  // namespace masque::bert
