// Block (residual sub-layers), Stack (embeddings, blocks, final norm) and Head.
#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "masque/transformer/network.hpp"

namespace masque::transformer {

Block::Block(const BlockSpec& spec, const WeightReader& weights, const Rotary* rotary)
    : pre_norm_(spec.pre_norm),
      has_cross_(spec.has_cross()),
      attention_norm_(spec.attention_norm, weights),
      cross_norm_(spec.cross_norm, weights),
      mlp_norm_(spec.mlp_norm, weights),
      attention_out_norm_(spec.attention_out_norm, weights),
      mlp_out_norm_(spec.mlp_out_norm, weights),
      attention_(spec.attention, weights, rotary),
      mlp_(spec.mlp, weights) {
  if (has_cross_) cross_ = Attention(spec.cross_attention, weights, nullptr);
  if (!pre_norm_ && (spec.attention_out_norm.present() || spec.mlp_out_norm.present()))
    throw ConfigError("block: sandwich norms (attention_out_norm, mlp_out_norm) need pre-norm");
}

template <typename Sublayer>
void Block::residual(const Norm& norm, const Norm& out_norm, Tensor& x, Workspace& ws,
                     Sublayer&& f) const {
  if (pre_norm_) {
    const Tensor* h = &x;  // no norm (ModernBERT's first attention): the sub-layer reads x
    if (!norm.empty()) {
      norm.forward(x, ws.normed);
      h = &ws.normed;
    }
    f(*h, ws.sublayer);
    if (!out_norm.empty()) out_norm.forward(ws.sublayer, ws.sublayer);
    add(x, ws.sublayer);
  } else {
    f(x, ws.sublayer);
    add(x, ws.sublayer);
    norm.forward(x, x);
  }
}

void Block::forward(Tensor& x, Workspace& ws, const AttentionTarget& target,
                    std::int32_t layer) const {
  residual(attention_norm_, attention_out_norm_, x, ws,
           [&](const Tensor& h, Tensor& y) { attention_.forward(h, ws, target, layer, y); });
  if (has_cross_)
    residual(cross_norm_, Norm(), x, ws, [&](const Tensor& h, Tensor& y) {
      cross_.attend_memory(h, ws, *target.cache, layer, target.record, y);
    });
  residual(mlp_norm_, mlp_out_norm_, x, ws,
           [&](const Tensor& h, Tensor& y) { mlp_.forward(h, ws, y); });
}

Stack::Stack(const StackSpec& spec, const WeightReader& weights)
    : embeddings_(spec.embeddings, weights), final_norm_(spec.final_norm, weights) {
  const PositionSpec& p = spec.embeddings.positions;
  const std::int32_t rows = p.max_positions > 0 ? p.max_positions : kRotaryTableRows;
  if (p.kind == PositionKind::rotary && !spec.blocks.empty()) {
    const std::int32_t head_dim = spec.blocks.front().attention.head_dim;
    rotary_ = std::make_unique<Rotary>(head_dim, p.rope_theta, rows, p.rotary_dim, p.rope_scaling);
    if (p.local_rope_theta > 0.0)
      local_rotary_ = std::make_unique<Rotary>(head_dim, p.local_rope_theta, rows, p.rotary_dim);
  }
  blocks_.reserve(spec.blocks.size());
  for (const BlockSpec& b : spec.blocks)
    blocks_.emplace_back(b, weights,
                         b.attention.local_rotary ? local_rotary_.get() : rotary_.get());
}

void Stack::run(Workspace& ws, const AttentionTarget& target) const {
  embeddings_.forward(ws.ids, ws.positions, ws.token_types, ws.hidden);
  if (ws.ids.empty()) return;
  for (std::size_t l = 0; l < blocks_.size(); ++l)
    blocks_[l].forward(ws.hidden, ws, target, static_cast<std::int32_t>(l));
}

const Tensor& Stack::finish(const Tensor& x, Tensor& y) const {
  if (final_norm_.empty()) return x;
  final_norm_.forward(x, y);
  return y;
}

Head::Head(const HeadSpec& spec, const WeightReader& weights)
    : transform_(spec.transform.weight.present()
                     ? weights.linear(spec.transform, spec.transform_activation)
                     : Linear()),
      transform_norm_(spec.transform_norm, weights),
      output_(spec.output.weight.present() ? weights.linear(spec.output) : Linear()),
      logit_scale_(spec.logit_scale),
      softcap_(spec.softcap) {}

void Head::forward(const Tensor& hidden, Workspace& ws, Tensor& logits) const {
  const Tensor* x = &hidden;
  if (!transform_.empty()) {
    transform_.forward(hidden, ws.transformed);
    if (!transform_norm_.empty()) transform_norm_.forward(ws.transformed, ws.transformed);
    x = &ws.transformed;
  }
  output_.forward(*x, logits);
  if (logit_scale_ != 1.0f) scale(logits, logit_scale_);
  if (softcap_ > 0.0f) soft_cap(logits, softcap_);
}

void Block::list_linears(const std::string& prefix, LinearList& out) const {
  attention_.list_linears(prefix + "self_attention.", out);
  if (has_cross_) cross_.list_linears(prefix + "cross_attention.", out);
  mlp_.list_linears(prefix + "mlp.", out);
}

void Stack::list_linears(const std::string& prefix, LinearList& out) const {
  for (std::size_t i = 0; i < blocks_.size(); ++i)
    blocks_[i].list_linears(prefix + std::to_string(i) + ".", out);
}

void Head::list_linears(const std::string& prefix, LinearList& out) const {
  if (!transform_.empty()) out.emplace_back(prefix + "transform", &transform_);
  if (!output_.empty()) out.emplace_back(prefix + "output", &output_);
}

}  // namespace masque::transformer
