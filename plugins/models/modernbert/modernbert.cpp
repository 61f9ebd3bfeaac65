// Model plugin `modernbert`: Hugging Face ModernBERT checkpoints (ModernBertModel,
// ModernBertForMaskedLM, ModernBertForSequenceClassification with CLS pooling). Pre-norm
// encoder layers without biases (unless the config asks), layer 0 without its attention norm,
// one fused Wqkv, rotary positions at global_rope_theta in every global_attn_every_n_layers-th
// layer and local_rope_theta in the others, which see only keys within local_attention / 2
// tokens (a band of the mask rule), a GeGLU MLP (Wi = [input | gate]), final_norm, and the MLM
// head dense + activation + norm then the decoder tied to the token table.
#include <string>

#include "bert_family.hpp"
#include "hf_plugin.hpp"
#include "sequence_classification.hpp"

namespace masque::modernbert {

using namespace transformer;
using models::fail;
using models::positive;

std::string body_prefix(const SafeTensors& st) {
  if (st.size() == 0 || st.contains("model.embeddings.tok_embeddings.weight")) return "model.";
  if (st.contains("embeddings.tok_embeddings.weight")) return "";
  throw ConfigError(st.path().string() +
                    ": no tensor 'model.embeddings.tok_embeddings.weight' (nor "
                    "'embeddings.tok_embeddings.weight'): not a ModernBERT checkpoint");
}

// RoPE bases: global_rope_theta / local_rope_theta, or rope_parameters.{full,sliding}_attention.
std::pair<double, double> rope_bases(const JsonConfig& config) {
  double global = config.get_number("global_rope_theta", 160000.0);
  double local = config.get_number("local_rope_theta", 10000.0);
  const auto params = config.json().find("rope_parameters");
  if (params != config.json().end() && params->is_object()) {
    auto theta = [&](const char* type, double fallback) {
      const auto t = params->find(type);
      if (t == params->end() || !t->is_object() || !t->contains("rope_theta")) return fallback;
      if (!(*t)["rope_theta"].is_number())
        fail(config, std::string("rope_parameters.") + type + ".rope_theta", "expected a number");
      return (*t)["rope_theta"].get<double>();
    };
    global = theta("full_attention", global);
    local = theta("sliding_attention", local);
  }
  if (!(global > 0.0) || !(local > 0.0))
    fail(config, "global_rope_theta", "RoPE bases must be positive");
  return {global, local};
}

TransformerSpec read_spec(const JsonConfig& config, const SafeTensors& st, bool with_head) {
  models::expect_model_type(config, "modernbert");
  const std::int32_t vocab = positive(config, "vocab_size");
  const std::int32_t h = positive(config, "hidden_size");
  const std::int32_t layers = positive(config, "num_hidden_layers");
  const std::int32_t heads = positive(config, "num_attention_heads");
  const std::int32_t inner = positive(config, "intermediate_size");
  if (h % heads != 0) fail(config, "num_attention_heads", "must divide hidden_size");
  if ((h / heads) % 2 != 0) fail(config, "num_attention_heads", "RoPE needs an even head size");
  const float eps = models::positive_number(config, "norm_eps", 1e-5);
  const bool norm_bias = config.get_bool("norm_bias", false);
  const bool attention_bias = config.get_bool("attention_bias", false);
  const bool mlp_bias = config.get_bool("mlp_bias", false);
  const std::int32_t every = positive(config, "global_attn_every_n_layers", {}, 3);
  const std::int32_t local_attention = positive(config, "local_attention", {}, 128);
  const auto [global_theta, local_theta] = rope_bases(config);
  auto layer_norm = [&](const std::string& name) {
    return norm(NormKind::layer_norm, name, h, eps, norm_bias);
  };

  const std::string p = body_prefix(st);
  TransformerSpec s{.architecture = "modernbert",
                    .kind = ModelKind::encoder_only,
                    .positions_key = "max_position_embeddings",
                    .vocab_size = vocab};
  s.decoder.hidden = h;
  EmbeddingSpec& e = s.decoder.embeddings;
  e.tokens = {p + "embeddings.tok_embeddings.weight", {vocab, h}};
  e.norm = layer_norm(p + "embeddings.norm");
  e.positions = {.kind = PositionKind::rotary,
                 .max_positions = positive(config, "max_position_embeddings", {}, 8192),
                 .rope_theta = global_theta,
                 .local_rope_theta = local_theta};
  const Activation act = models::activation(config, "hidden_activation", "gelu");
  for (std::int32_t l = 0; l < layers; ++l) {
    const std::string q = p + "layers." + std::to_string(l) + ".";
    const bool local = l % every != 0;
    BlockSpec& b = s.decoder.blocks.emplace_back();
    if (l > 0) b.attention_norm = layer_norm(q + "attn_norm");  // layer 0: Identity
    b.attention = {.heads = heads,
                   .kv_heads = heads,
                   .head_dim = h / heads,
                   .scale = 1.0f / std::sqrt(static_cast<float>(h / heads)),
                   .projections = {linear(q + "attn.Wqkv", 3 * std::int64_t{h}, h, attention_bias)},
                   .output = linear(q + "attn.Wo", h, h, attention_bias),
                   .rotary = true,
                   .local_rotary = local,
                   .band = local ? local_attention / 2 : 0};
    b.mlp_norm = layer_norm(q + "mlp_norm");
    b.mlp = {.kind = MlpKind::gated,
             .activation = act,
             .in = {linear(q + "mlp.Wi", 2 * std::int64_t{inner}, h, mlp_bias)},
             .out = linear(q + "mlp.Wo", h, inner, mlp_bias)};
  }
  s.decoder.final_norm = layer_norm(p + "final_norm");

  const bool classifier = models::is_sequence_classifier(config);
  if (!with_head) {
    s.head.absent_reason = "mlm_head: false";
    return s;
  }
  if (models::lacks_head(st, "head.dense.weight", s.head)) return s;
  s.head.transform = linear("head.dense", h, h, config.get_bool("classifier_bias", false));
  s.head.transform_activation = models::activation(config, "classifier_activation", "gelu");
  s.head.transform_norm = layer_norm("head.norm");
  if (classifier) {
    if (config.get_string("classifier_pooling", "cls") != "cls")
      fail(config, "classifier_pooling", "only cls pooling is supported");
    s.head.output = linear("classifier", models::num_labels(config), h, true);
  } else {
    s.head.output.weight = config.get_bool("tie_word_embeddings", true)
                               ? e.tokens
                               : TensorSpec{"decoder.weight", {vocab, h}};
    if (config.get_bool("decoder_bias", true)) s.head.output.bias = {"decoder.bias", {vocab}};
  }
  return s;
}

}  // namespace masque::modernbert

namespace {

masque::Plugin* create(const masque::Params& params) {
  return masque::models::build_encoder(params, masque::modernbert::read_spec);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "the model folder: config.json (model_type modernbert) and model.safetensors (or a "
        "sharded model.safetensors.index.json) with Hugging Face ModernBERT tensor names, with "
        "or without the `model.` prefix. Local layers (all but every "
        "global_attn_every_n_layers-th) see only keys within local_attention / 2 tokens"),
    masque::models::mlm_head_param(
        "load the output head: the masked-LM head (head.dense, head.norm, decoder), or the "
        "classifier of a ModernBertForSequenceClassification folder (cls pooling); a folder "
        "without one (ModernBertModel) loads as the encoder alone either way; false never "
        "loads it"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
    masque::models::kInitSeedParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("modernbert", "1.0.0",
                    "ModernBERT: encodings, token predictions and labels under any mask",
                    "model_type=modernbert", kParams, masque::models::kTrainableAttentionDropout,
                    create)
