// What BERT, RoBERTa (XLM-R) and DistilBERT share: post-norm encoder layers with biases under
// `<prefix>encoder.layer.N.`, and the masked-LM head's shape (dense + activation + LayerNorm,
// then the vocabulary projection).
#pragma once

#include <cmath>
#include <string>

#include "hf_plugin.hpp"
#include "masque/safetensors.hpp"
#include "masque/transformer/spec.hpp"

namespace masque::models {

struct BertShape {
  std::int32_t hidden = 0, layers = 0, heads = 0, inner = 0;
  Activation activation = Activation::gelu;
  float eps = 1e-12f;
};

// A layer's tensor names after its prefix: BERT's, or DistilBERT's.
struct BertLayerNames {
  const char* layers = "encoder.layer.";  // + N + "."
  const char* query = "attention.self.query";
  const char* key = "attention.self.key";
  const char* value = "attention.self.value";
  const char* attention_out = "attention.output.dense";
  const char* attention_norm = "attention.output.LayerNorm";
  const char* ffn_in = "intermediate.dense";
  const char* ffn_out = "output.dense";
  const char* ffn_norm = "output.LayerNorm";
};

inline void add_bert_layers(transformer::TransformerSpec& s, const std::string& prefix,
                            const BertShape& shape, const BertLayerNames& names = {}) {
  using transformer::linear;
  using transformer::norm;
  const std::int32_t h = shape.hidden, heads = shape.heads;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(h / heads)));
  for (std::int32_t l = 0; l < shape.layers; ++l) {
    const std::string q = prefix + names.layers + std::to_string(l) + ".";
    transformer::BlockSpec& b = s.decoder.blocks.emplace_back();
    b.pre_norm = false;
    b.attention = {
        .heads = heads,
        .kv_heads = heads,
        .head_dim = h / heads,
        .scale = scale,
        .projections = {linear(q + names.query, h, h, true), linear(q + names.key, h, h, true),
                        linear(q + names.value, h, h, true)},
        .output = linear(q + names.attention_out, h, h, true)};
    b.attention_norm =
        norm(transformer::NormKind::layer_norm, q + names.attention_norm, h, shape.eps);
    b.mlp = {.kind = transformer::MlpKind::plain,
             .activation = shape.activation,
             .in = {linear(q + names.ffn_in, shape.inner, h, true)},
             .out = linear(q + names.ffn_out, h, shape.inner, true)};
    b.mlp_norm = norm(transformer::NormKind::layer_norm, q + names.ffn_norm, h, shape.eps);
  }
}

// The MLM head: `dense` (+ activation) and `layer_norm`, then `output` over the vocabulary
// with the bias `bias`.
inline transformer::HeadSpec mlm_head(const std::string& dense, const std::string& layer_norm,
                                      const transformer::TensorSpec& output,
                                      const std::string& bias, const BertShape& shape) {
  const std::int64_t h = shape.hidden;
  transformer::HeadSpec head;
  head.transform = transformer::linear(dense, h, h, true);
  head.transform_activation = shape.activation;
  head.transform_norm =
      transformer::norm(transformer::NormKind::layer_norm, layer_norm, h, shape.eps);
  head.output.weight = output;
  head.output.bias = {bias, {output.shape[0]}};
  return head;
}

// True when a checkpoint lacks its head's first tensor: an encoder alone (a *Model class, a
// sentence-transformers folder), loaded without a head, which a task asking for logits is told
// of by that tensor's name. A fresh model (no checkpoint) has its head.
inline bool lacks_head(const SafeTensors& st, const std::string& first_tensor,
                       transformer::HeadSpec& head) {
  if (st.size() == 0 || st.contains(first_tensor)) return false;
  head.absent_reason = "no tensor '" + first_tensor + "' in " + st.path().filename().string() +
                       ": an encoder-only checkpoint";
  return true;
}

// `mlm_head`: whether to load the head a folder holds (`head`: which, in the family's names).
constexpr ParamSpec mlm_head_param(const char* help) {
  return {.name = "mlm_head", .type = ParamType::boolean, .default_value = "true", .help = help};
}

// The model of a BERT-family folder: the family's spec (`read_spec(config, weights, head)`)
// over the tier, with the config's bos/eos/pad.
template <typename ReadSpec>
Plugin* build_encoder(const Params& params, ReadSpec read_spec) {
  const HfFolder folder(params);
  const transformer::ModelTokens tokens{first_id(folder.config, "bos_token_id", -1),
                                        first_id(folder.config, "eos_token_id", -1),
                                        first_id(folder.config, "pad_token_id", -1)};
  return build_model(read_spec(folder.config, folder.weights, params.get_bool("mlm_head")), folder,
                     tokens, params);
}

}  // namespace masque::models
