#include "bert_encoder.hpp"

#include <cmath>
#include <utility>

#include "masque/ops.hpp"

namespace masque::bert {

namespace {

// q, k and v are column blocks of the fused projection: views, no copies.
struct QkvViews {
  SeqView q, k, v;
};
QkvViews split_qkv(const Tensor& qkv, std::int64_t length, std::int64_t hidden) {
  return {seq_view(qkv, length, 0), seq_view(qkv, length, hidden),
          seq_view(qkv, length, 2 * hidden)};
}

void size_context(const Tensor& qkv, Tensor& context) {
  context.resize({qkv.dim(0), qkv.dim(1) / 3});
}

}  // namespace

void LayoutAttention::attend(std::int32_t, const Tensor& qkv, Tensor& context) {
  const std::int64_t hidden = std::int64_t{dims_.heads} * dims_.head_dim;
  size_context(qkv, context);
  const QkvViews in = split_qkv(qkv, layout_.length, hidden);
  attention(dims_, MaskView::self(layout_), in.q, in.k, in.v,
            mutable_seq_view(context, layout_.length));
}

void CachedAttention::attend(std::int32_t layer, const Tensor& qkv, Tensor& context) {
  const std::int64_t hidden = std::int64_t{dims_.heads} * dims_.head_dim;
  size_context(qkv, context);
  const QkvViews in = split_qkv(qkv, length_, hidden);
  cache_.write(layer, in.k, in.v);
  attention(dims_, cache_.mask(), in.q, cache_.keys(layer), cache_.values(layer),
            mutable_seq_view(context, length_));
}

Encoder::Encoder(const BertConfig& config, BertWeights weights)
    : config_(config), weights_(std::move(weights)) {}

AttentionDims Encoder::dims() const {
  const std::int32_t d = config_.head_dim();
  return {.heads = config_.num_heads,
          .kv_heads = config_.num_heads,
          .head_dim = d,
          .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)))};
}

void Encoder::embed(std::span<const std::int32_t> ids, std::span<const std::int32_t> positions,
                    std::span<const std::int32_t> token_types, Tensor& h) const {
  const Embeddings& e = weights_.embeddings;
  e.words.forward(ids, h);
  e.positions.add_to(positions, h);
  e.token_types.add_to(token_types, h);
  e.norm.forward(h, h);
}

void Encoder::encode(Workspace& ws, SelfAttention& attention) const {
  for (std::int32_t l = 0; l < config_.num_layers; ++l) run_layer(l, ws, attention);
}

// Post-norm: h = LN(a + FFN(a)) with a = LN(h + Attention(h)).
void Encoder::run_layer(std::int32_t index, Workspace& ws, SelfAttention& attention) const {
  const EncoderLayer& l = weights_.layers[index];
  l.qkv.forward(ws.h, ws.qkv);
  attention.attend(index, ws.qkv, ws.context);
  l.attention_output.forward(ws.context, ws.attended);
  add(ws.attended, ws.h);
  l.attention_norm.forward(ws.attended, ws.attended);
  l.intermediate.forward(ws.attended, ws.intermediate);
  l.output.forward(ws.intermediate, ws.h);
  add(ws.h, ws.attended);
  l.output_norm.forward(ws.h, ws.h);
}

void Encoder::predict(const Tensor& hidden, Workspace& ws, Tensor& logits) const {
  const MlmHead& head = weights_.head;
  head.transform.forward(hidden, ws.transformed);
  head.norm.forward(ws.transformed, ws.transformed);
  head.decoder.forward(ws.transformed, logits);
}

}  // namespace masque::bert
