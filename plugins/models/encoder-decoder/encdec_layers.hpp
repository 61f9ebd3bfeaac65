// The layers of a Transformer encoder-decoder (CTranslate2's layering: attention, feed-forward,
// residual blocks, encoder and decoder layers), bound to their weights at load time.
//
// Activations live in a Workspace that the caller owns: one per encoder run, one per decoding
// state, so that steps reuse their buffers and never allocate once warm. Every Linear computes
// in the `compute` type its layer was built with (LinearOptions::compute).
#pragma once

#include <cstdint>
#include <string>

#include "encdec_config.hpp"
#include "encdec_weights.hpp"
#include "masque/attention.hpp"
#include "masque/kv_cache.hpp"
#include "masque/layers.hpp"

namespace masque::encdec {

struct Workspace {
  Tensor x;     // the residual stream [rows, d_model]
  Tensor h;     // a sub-layer's (normalised) input
  Tensor y;     // a sub-layer's output [rows, d_model]
  Tensor proj;  // fused projections (q|k|v, q, or k|v of the memory)
  Tensor ctx;   // attention output [rows, heads * head_dim]
  Tensor ffn;   // [rows, ffn_dim]
};

// x = x + f(norm(x)) (pre-norm) or x = norm(x + f(x)) (post-norm), on ws.x.
class ResidualBlock {
 public:
  ResidualBlock() = default;
  ResidualBlock(LayerNorm norm, bool pre_norm) : norm_(std::move(norm)), pre_norm_(pre_norm) {}

  template <typename Sublayer>
  void apply(Workspace& ws, Sublayer&& sublayer) const {
    if (pre_norm_) {
      norm_.forward(ws.x, ws.h);
      sublayer(ws.h, ws.y);
      add(ws.x, ws.y);
    } else {
      sublayer(ws.x, ws.y);
      add(ws.x, ws.y);
      norm_.forward(ws.x, ws.x);
    }
  }

 private:
  LayerNorm norm_;
  bool pre_norm_ = true;
};

// Multi-head self-attention with one fused q|k|v projection.
class SelfAttention {
 public:
  SelfAttention() = default;
  SelfAttention(const Checkpoint& w, const std::string& prefix, const EncDecConfig& c,
                DType compute = DType::f32);

  // Every token of a batch of `length`-token rows under `mask` (the encoder).
  void forward(const Tensor& h, const MaskView& mask, std::int32_t length, Workspace& ws,
               Tensor& y) const;
  // The pending token of every row of `cache`: its k and v join layer `layer`, and it attends
  // to what the cache's mask allows (a decoder step).
  void step(const Tensor& h, KvCache& cache, std::int32_t layer, Workspace& ws, Tensor& y) const;

 private:
  AttentionDims dims_;
  std::int64_t width_ = 0;  // heads * head_dim
  Linear qkv_, out_;
};

// Attention from the decoder to the encoder memory; k|v of the memory are projected once.
class CrossAttention {
 public:
  CrossAttention() = default;
  CrossAttention(const Checkpoint& w, const std::string& prefix, const EncDecConfig& c,
                 DType compute = DType::f32);

  // Projects the memory (rows of `length` tokens) and stores k, v as the cache's cross
  // memory of `layer` (after cache.set_source). `scratch` holds the projection.
  void remember(const Tensor& memory, std::int32_t length, KvCache& cache, std::int32_t layer,
                Tensor& scratch) const;
  // One query per row of `cache` against its memory of `layer`.
  void step(const Tensor& h, const KvCache& cache, std::int32_t layer, Workspace& ws,
            Tensor& y) const;

 private:
  AttentionDims dims_;
  std::int64_t width_ = 0;
  Linear q_, kv_, out_;
};

// fc2(act(fc1(h))), the activation fused into fc1.
class FeedForward {
 public:
  FeedForward() = default;
  FeedForward(const Checkpoint& w, const std::string& prefix, const EncDecConfig& c,
              DType compute = DType::f32);
  void forward(const Tensor& h, Workspace& ws, Tensor& y) const;

 private:
  Linear fc1_, fc2_;
};

class EncoderLayer {
 public:
  EncoderLayer(const Checkpoint& w, const std::string& prefix, const EncDecConfig& c,
               DType compute = DType::f32);
  // ws.x: rows of `length` tokens, attending under `mask`.
  void forward(Workspace& ws, const MaskView& mask, std::int32_t length) const;

 private:
  ResidualBlock attention_block_, ffn_block_;
  SelfAttention attention_;
  FeedForward ffn_;
};

class DecoderLayer {
 public:
  DecoderLayer(const Checkpoint& w, const std::string& prefix, const EncDecConfig& c,
               DType compute = DType::f32);
  const CrossAttention& cross_attention() const { return cross_; }
  // ws.x: one token per row of `cache` (within its begin_step / end).
  void step(Workspace& ws, KvCache& cache, std::int32_t layer) const;

 private:
  ResidualBlock self_block_, cross_block_, ffn_block_;
  SelfAttention self_;
  CrossAttention cross_;
  FeedForward ffn_;
};

}  // namespace masque::encdec
