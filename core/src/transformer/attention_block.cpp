// Attention: projections, rotary positions, the attention kernel over a batch layout, a KV
// cache or the encoder memory, and the output projection.
#include <algorithm>
#include <array>

#include "masque/error.hpp"
#include "masque/transformer/network.hpp"

namespace masque::transformer {

namespace {

// `norm` over each head's slice of columns [offset, offset + heads * head_dim) of every row of
// x, in place (through `scratch`, one row per row and head).
void norm_heads(const Norm& norm, std::int32_t head_dim, std::int64_t offset, std::int32_t heads,
                Tensor& x, Tensor& scratch) {
  if (norm.empty()) return;
  const std::int64_t rows = x.dim(0), width = x.dim(1);
  const std::int64_t span = std::int64_t{heads} * head_dim;
  scratch.resize({rows * heads, head_dim});
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(x.f32() + r * width + offset, span, scratch.f32() + r * span);
  norm.forward(scratch, scratch);
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(scratch.f32() + r * span, span, x.f32() + r * width + offset);
}

}  // namespace

Attention::Attention(const AttentionSpec& spec, const WeightReader& weights, const Rotary* rotary)
    : dims_{spec.heads, spec.kv_heads, spec.head_dim, spec.scale, spec.softcap},
      window_(spec.window),
      band_(spec.band),
      rotary_(spec.rotary ? rotary : nullptr),
      out_(weights.linear(spec.output)) {
  if (spec.rotary && !rotary) throw ConfigError("attention: rotary positions without a table");
  if (spec.cross && spec.projections.size() != 3)
    throw ConfigError("attention: cross-attention needs q, k and v projections");
  if (spec.cross && (spec.q_norm.present() || spec.k_norm.present()))
    throw ConfigError("attention: per-head q/k norms are implemented for self-attention only");
  if (spec.q_norm.present()) q_norm_ = Norm(spec.q_norm, weights);
  if (spec.k_norm.present()) k_norm_ = Norm(spec.k_norm, weights);
  const auto groups = projection_groups(spec);
  qkv_ = weights.fused(groups.front());
  if (spec.cross) kv_ = weights.fused(groups.back());
  const RelativeBiasSpec& rb = spec.relative_bias;
  if (rb.kind != RelativeBiasKind::none) {
    bias_table_ = std::make_shared<const Tensor>(weights.tensor(rb.table));
    bias_ = {.kind = rb.kind == RelativeBiasKind::t5_buckets ? PositionBias::Kind::t5_buckets
                                                             : PositionBias::Kind::alibi,
             .table = bias_table_->f32(),
             .heads = spec.heads,
             .num_buckets = rb.num_buckets,
             .max_distance = rb.max_distance,
             .bidirectional = rb.bidirectional};
  }
}

// The network's own window (a config's sliding_window) and the layout's (the windowed-causal
// mask strategy) both hold: the narrower wins.
MaskView Attention::windowed(MaskView mask) const {
  if (window_ > 0) mask.window = mask.window > 0 ? std::min(mask.window, window_) : window_;
  if (band_ > 0) mask.band = mask.band > 0 ? std::min(mask.band, band_) : band_;
  if (bias_.kind != PositionBias::Kind::none) mask.bias = &bias_;
  return mask;
}

void Attention::forward(const Tensor& h, Workspace& ws, const AttentionTarget& target,
                        std::int32_t layer, Tensor& y) const {
  const std::int64_t q_width = dims_.heads * std::int64_t{dims_.head_dim};
  const std::int64_t kv_width = dims_.kv_heads * std::int64_t{dims_.head_dim};
  qkv_.forward(h, ws.qkv);
  const std::int64_t rows = ws.qkv.dim(0), width = ws.qkv.dim(1);
  norm_heads(q_norm_, dims_.head_dim, 0, dims_.heads, ws.qkv, ws.heads);
  norm_heads(k_norm_, dims_.head_dim, q_width, dims_.kv_heads, ws.qkv, ws.heads);
  if (rotary_) {
    rotary_->apply(ws.qkv.f32(), rows, width, dims_.heads, target.positions);
    rotary_->apply(ws.qkv.f32() + q_width, rows, width, dims_.kv_heads, target.positions);
  }
  // q, k, v are column ranges of the fused projection: no copies.
  const SeqView q = seq_view(ws.qkv, target.length, 0);
  const SeqView k = seq_view(ws.qkv, target.length, q_width);
  const SeqView v = seq_view(ws.qkv, target.length, q_width + kv_width);
  ws.context.resize({rows, q_width});
  const MutableSeqView out = mutable_seq_view(ws.context, target.length);
  AttentionProbs probs;
  if (!target.cache) {
    const MaskView mask = windowed(MaskView::self(*target.layout));
    attention(dims_, mask, q, k, v, out, capture(target.record, false, layer, mask, probs));
  } else {
    target.cache->write(layer, k, v);
    const MaskView mask = windowed(target.cache->mask());
    attention(dims_, mask, q, target.cache->keys(layer), target.cache->values(layer), out,
              capture(target.record, false, layer, mask, probs));
  }
  out_.forward(ws.context, y);
}

const AttentionProbs* Attention::capture(const AttentionRecording* record, bool cross,
                                         std::int32_t layer, const MaskView& mask,
                                         AttentionProbs& out) {
  if (!record || record->cross != cross || record->layer != layer) return nullptr;
  record->probs->resize({record->heads, mask.batch, mask.q_len, mask.k_len});
  std::fill(record->probs->f32(), record->probs->f32() + record->probs->numel(), 0.0f);
  out = {.head = record->first_head, .data = record->probs->f32(), .heads = record->heads};
  return &out;
}

void Attention::remember(const Tensor& memory, std::int32_t length, KvCache& cache,
                         std::int32_t layer, Tensor& scratch) const {
  const std::int64_t kv_width = dims_.kv_heads * std::int64_t{dims_.head_dim};
  kv_.forward(memory, scratch);
  cache.set_cross(layer, seq_view(scratch, length, 0), seq_view(scratch, length, kv_width));
}

void Attention::attend_memory(const Tensor& h, Workspace& ws, const KvCache& cache,
                              std::int32_t layer, const AttentionRecording* record,
                              Tensor& y) const {
  qkv_.forward(h, ws.qkv);
  ws.context.resize({h.dim(0), dims_.heads * std::int64_t{dims_.head_dim}});
  // A step's tokens per row (StepInput::length): h holds rows x that many.
  const auto queries = static_cast<std::int32_t>(h.dim(0) / std::max(cache.rows(), 1));
  const MaskView mask = cache.cross_mask(queries);
  AttentionProbs probs;
  const AttentionProbs* kept = capture(record, true, layer, mask, probs);
  if (cache.source_length() == 0) {  // every source is empty: nothing to attend to
    std::fill(ws.context.f32(), ws.context.f32() + ws.context.numel(), 0.0f);
  } else {
    attention(dims_, mask, seq_view(ws.qkv, queries), cache.cross_keys(layer),
              cache.cross_values(layer), mutable_seq_view(ws.context, queries), kept);
  }
  out_.forward(ws.context, y);
}

void Attention::list_linears(const std::string& prefix, LinearList& out) const {
  // Cross-attention's first projection is the query alone (its keys and values are kv_).
  out.emplace_back(prefix + (kv_.empty() ? "qkv" : "q"), &qkv_);
  if (!kv_.empty()) out.emplace_back(prefix + "kv", &kv_);
  out.emplace_back(prefix + "out", &out_);
}

}  // namespace masque::transformer
