// The parameter list of a TransformerSpec (spec.hpp).
#include "masque/transformer/spec.hpp"

#include <set>

namespace masque::transformer {

std::int64_t LinearSpec::in_features() const {
  return weight.shape.size() != 2         ? 0
         : layout == WeightLayout::out_in ? weight.shape[1]
                                          : weight.shape[0];
}

std::int64_t LinearSpec::out_features() const {
  return weight.shape.size() != 2         ? 0
         : layout == WeightLayout::out_in ? weight.shape[0]
                                          : weight.shape[1];
}

LinearSpec linear(const std::string& name, std::int64_t out, std::int64_t in, bool bias,
                  WeightLayout layout) {
  LinearSpec l;
  l.weight = {name + ".weight", layout == WeightLayout::out_in ? Shape{out, in} : Shape{in, out}};
  if (bias) l.bias = {name + ".bias", {out}};
  l.layout = layout;
  return l;
}

NormSpec norm(NormKind kind, const std::string& name, std::int64_t dim, float eps, bool bias) {
  NormSpec n;
  n.kind = kind;
  n.eps = eps;
  n.weight = {name + ".weight", {dim}};
  if (bias && kind == NormKind::layer_norm) n.bias = {name + ".bias", {dim}};
  return n;
}

namespace {

// Collects each named tensor once (a tied head names the token table again).
class Collector {
 public:
  void add(const TensorSpec& t, ParameterRole role) {
    if (t.present() && seen_.insert(t.name).second) out_.push_back({t.name, t.shape, role});
  }
  void linear(const LinearSpec& l) {
    add(l.weight, ParameterRole::matrix);
    add(l.bias, ParameterRole::bias);
  }
  void norm(const NormSpec& n) {
    add(n.weight, n.unit_offset ? ParameterRole::norm_offset : ParameterRole::norm_weight);
    add(n.bias, ParameterRole::norm_bias);
  }
  void attention(const AttentionSpec& a) {
    for (const LinearSpec& l : a.projections) linear(l);
    linear(a.output);
    add(a.relative_bias.table, ParameterRole::table);
    norm(a.q_norm);
    norm(a.k_norm);
  }
  void stack(const StackSpec& s) {
    add(s.embeddings.tokens, ParameterRole::embedding);
    add(s.embeddings.positions.table, ParameterRole::embedding);
    add(s.embeddings.token_types, ParameterRole::embedding);
    norm(s.embeddings.norm);
    for (const BlockSpec& b : s.blocks) {
      norm(b.attention_norm);
      attention(b.attention);
      norm(b.attention_out_norm);
      if (b.has_cross()) {
        norm(b.cross_norm);
        attention(b.cross_attention);
      }
      norm(b.mlp_norm);
      for (const LinearSpec& l : b.mlp.in) linear(l);
      linear(b.mlp.out);
      norm(b.mlp_out_norm);
    }
    norm(s.final_norm);
  }
  std::vector<Parameter> take() { return std::move(out_); }

 private:
  std::set<std::string> seen_;
  std::vector<Parameter> out_;
};

}  // namespace

std::vector<Parameter> parameters(const TransformerSpec& spec) {
  Collector c;
  if (spec.encoder_decoder()) c.stack(spec.encoder);
  c.stack(spec.decoder);
  c.linear(spec.head.transform);
  c.norm(spec.head.transform_norm);
  c.linear(spec.head.output);
  return c.take();
}

std::vector<std::span<const LinearSpec>> projection_groups(const AttentionSpec& a) {
  const std::span<const LinearSpec> all(a.projections);
  if (a.cross && all.size() == 3) return {all.first(1), all.subspan(1)};
  return {all};
}

std::vector<std::vector<LinearSpec>> matmuls(const TransformerSpec& spec) {
  std::vector<std::vector<LinearSpec>> out;
  auto add = [&](std::span<const LinearSpec> group) {
    if (!group.empty() && group.front().weight.present())
      out.emplace_back(group.begin(), group.end());
  };
  auto attention = [&](const AttentionSpec& a) {
    for (const auto& group : projection_groups(a)) add(group);
    add(std::span(&a.output, 1));
  };
  auto stack = [&](const StackSpec& s) {
    for (const BlockSpec& b : s.blocks) {
      attention(b.attention);
      if (b.has_cross()) attention(b.cross_attention);
      add(b.mlp.in);
      add(std::span(&b.mlp.out, 1));
    }
  };
  if (spec.encoder_decoder()) stack(spec.encoder);
  stack(spec.decoder);
  add(std::span(&spec.head.transform, 1));
  add(std::span(&spec.head.output, 1));
  return out;
}

const char* to_string(NormKind kind) {
  return kind == NormKind::layer_norm ? "layer_norm" : "rms_norm";
}

const char* to_string(PositionKind kind) {
  switch (kind) {
    case PositionKind::learned:
      return "learned";
    case PositionKind::sinusoidal:
      return "sinusoidal";
    case PositionKind::rotary:
      return "rotary";
    case PositionKind::none:
      break;
  }
  return "none";
}

const char* to_string(MlpKind kind) {
  return kind == MlpKind::plain ? "plain" : "gated";
}

}  // namespace masque::transformer
