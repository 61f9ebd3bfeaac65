#include "encdec_layers.hpp"

#include <algorithm>
#include <array>

namespace masque::encdec {

namespace {

AttentionDims attention_dims(const EncDecConfig& c) {
  return {c.heads, c.heads, c.head_dim, c.attention_scale};
}

// The named projections of `prefix` (prefix.NAME_proj.{weight,bias}) fused into one Linear.
template <std::size_t N>
Linear projections(const Checkpoint& w, const std::string& prefix,
                   const std::array<const char*, N>& names, std::int64_t out, std::int64_t in,
                   bool bias, DType compute) {
  std::array<Tensor, N> weights, biases;
  for (std::size_t i = 0; i < N; ++i) {
    const std::string name = prefix + "." + names[i] + "_proj";
    weights[i] = w.matrix(name + ".weight", out, in);
    if (bias) biases[i] = w.vector(name + ".bias", out);
  }
  return Linear::concat(weights, bias ? std::span<const Tensor>(biases) : std::span<const Tensor>(),
                        {.compute = compute});
}

// prefix.out_proj: attention heads back to d_model.
Linear out_projection(const Checkpoint& w, const std::string& prefix, const EncDecConfig& c,
                      DType compute) {
  return Linear(w.matrix(prefix + ".out_proj.weight", c.d_model, c.attention_width()),
                w.bias(prefix + ".out_proj.bias", c.d_model, c.attention_bias),
                {.compute = compute});
}

// Makes `t` an f32 [rows, cols] tensor, keeping its buffer when it is large enough.
void shape(Tensor& t, std::int64_t rows, std::int64_t cols) {
  if (t.dtype() != DType::f32) t = Tensor();
  t.resize({rows, cols});
}

}  // namespace

SelfAttention::SelfAttention(const Checkpoint& w, const std::string& prefix, const EncDecConfig& c,
                             DType compute)
    : dims_(attention_dims(c)),
      width_(c.attention_width()),
      qkv_(
          projections<3>(w, prefix, {"q", "k", "v"}, width_, c.d_model, c.attention_bias, compute)),
      out_(out_projection(w, prefix, c, compute)) {}

void SelfAttention::forward(const Tensor& h, const MaskView& mask, std::int32_t length,
                            Workspace& ws, Tensor& y) const {
  qkv_.forward(h, ws.proj);
  shape(ws.ctx, h.dim(0), width_);
  attention(dims_, mask, seq_view(ws.proj, length, 0), seq_view(ws.proj, length, width_),
            seq_view(ws.proj, length, 2 * width_), mutable_seq_view(ws.ctx, length));
  out_.forward(ws.ctx, y);
}

void SelfAttention::step(const Tensor& h, KvCache& cache, std::int32_t layer, Workspace& ws,
                         Tensor& y) const {
  qkv_.forward(h, ws.proj);
  cache.write(layer, seq_view(ws.proj, 1, width_), seq_view(ws.proj, 1, 2 * width_));
  shape(ws.ctx, h.dim(0), width_);
  attention(dims_, cache.mask(), seq_view(ws.proj, 1, 0), cache.keys(layer), cache.values(layer),
            mutable_seq_view(ws.ctx, 1));
  out_.forward(ws.ctx, y);
}

CrossAttention::CrossAttention(const Checkpoint& w, const std::string& prefix,
                               const EncDecConfig& c, DType compute)
    : dims_(attention_dims(c)),
      width_(c.attention_width()),
      q_(projections<1>(w, prefix, {"q"}, width_, c.d_model, c.attention_bias, compute)),
      kv_(projections<2>(w, prefix, {"k", "v"}, width_, c.d_model, c.attention_bias, compute)),
      out_(out_projection(w, prefix, c, compute)) {}

void CrossAttention::remember(const Tensor& memory, std::int32_t length, KvCache& cache,
                              std::int32_t layer, Tensor& scratch) const {
  kv_.forward(memory, scratch);
  cache.set_cross(layer, seq_view(scratch, length, 0), seq_view(scratch, length, width_));
}

void CrossAttention::step(const Tensor& h, const KvCache& cache, std::int32_t layer, Workspace& ws,
                          Tensor& y) const {
  q_.forward(h, ws.proj);
  shape(ws.ctx, h.dim(0), width_);
  if (cache.source_length() == 0) {  // every source is empty: nothing to attend to
    std::fill(ws.ctx.f32(), ws.ctx.f32() + ws.ctx.numel(), 0.0f);
  } else {
    attention(dims_, cache.cross_mask(1), seq_view(ws.proj, 1), cache.cross_keys(layer),
              cache.cross_values(layer), mutable_seq_view(ws.ctx, 1));
  }
  out_.forward(ws.ctx, y);
}

FeedForward::FeedForward(const Checkpoint& w, const std::string& prefix, const EncDecConfig& c,
                         DType compute)
    : fc1_(w.matrix(prefix + ".fc1.weight", c.ffn_dim, c.d_model),
           w.bias(prefix + ".fc1.bias", c.ffn_dim, c.ffn_bias),
           {.activation = c.activation, .compute = compute}),
      fc2_(w.matrix(prefix + ".fc2.weight", c.d_model, c.ffn_dim),
           w.bias(prefix + ".fc2.bias", c.d_model, c.ffn_bias), {.compute = compute}) {}

void FeedForward::forward(const Tensor& h, Workspace& ws, Tensor& y) const {
  fc1_.forward(h, ws.ffn);
  fc2_.forward(ws.ffn, y);
}

EncoderLayer::EncoderLayer(const Checkpoint& w, const std::string& prefix, const EncDecConfig& c,
                           DType compute)
    : attention_block_(w.layer_norm(prefix + ".self_attn_layer_norm", c.d_model, c.layer_norm_eps),
                       c.pre_norm),
      ffn_block_(w.layer_norm(prefix + ".final_layer_norm", c.d_model, c.layer_norm_eps),
                 c.pre_norm),
      attention_(w, prefix + ".self_attn", c, compute),
      ffn_(w, prefix, c, compute) {}

void EncoderLayer::forward(Workspace& ws, const MaskView& mask, std::int32_t length) const {
  attention_block_.apply(
      ws, [&](const Tensor& h, Tensor& y) { attention_.forward(h, mask, length, ws, y); });
  ffn_block_.apply(ws, [&](const Tensor& h, Tensor& y) { ffn_.forward(h, ws, y); });
}

DecoderLayer::DecoderLayer(const Checkpoint& w, const std::string& prefix, const EncDecConfig& c,
                           DType compute)
    : self_block_(w.layer_norm(prefix + ".self_attn_layer_norm", c.d_model, c.layer_norm_eps),
                  c.pre_norm),
      cross_block_(w.layer_norm(prefix + ".encoder_attn_layer_norm", c.d_model, c.layer_norm_eps),
                   c.pre_norm),
      ffn_block_(w.layer_norm(prefix + ".final_layer_norm", c.d_model, c.layer_norm_eps),
                 c.pre_norm),
      self_(w, prefix + ".self_attn", c, compute),
      cross_(w, prefix + ".encoder_attn", c, compute),
      ffn_(w, prefix, c, compute) {}

void DecoderLayer::step(Workspace& ws, KvCache& cache, std::int32_t layer) const {
  self_block_.apply(ws, [&](const Tensor& h, Tensor& y) { self_.step(h, cache, layer, ws, y); });
  cross_block_.apply(ws, [&](const Tensor& h, Tensor& y) { cross_.step(h, cache, layer, ws, y); });
  ffn_block_.apply(ws, [&](const Tensor& h, Tensor& y) { ffn_.forward(h, ws, y); });
}

}  // namespace masque::encdec
