// Model plugin `gpt2`: Hugging Face GPT-2 folders (GPT2LMHeadModel / GPT2Model checkpoints):
// learned positions, pre-LayerNorm blocks with a fused q/k/v projection (Conv1D, [in, out]),
// a GELU MLP and a (usually tied) head, or GPT2ForSequenceClassification's `score` label head. A
// config reader over the Transformer tier.
#include <cmath>
#include <string>

#include "hf_plugin.hpp"
#include "sequence_classification.hpp"

namespace masque::gpt2 {

using namespace transformer;
using models::positive;

TransformerSpec read_spec(const JsonConfig& config, const SafeTensors& weights) {
  models::expect_model_type(config, "gpt2");
  const std::int32_t vocab = positive(config, "vocab_size");
  const std::int32_t c = positive(config, "n_embd", "hidden_size");
  const std::int32_t layers = positive(config, "n_layer", "num_hidden_layers");
  const std::int32_t heads = positive(config, "n_head", "num_attention_heads");
  const std::int32_t max_positions = positive(config, "n_positions", "max_position_embeddings");
  const std::int32_t inner = positive(config, "n_inner", {}, 4 * std::int64_t{c});
  if (c % heads != 0)
    models::fail(config, "n_head",
                 std::to_string(heads) + " heads do not divide n_embd " + std::to_string(c));
  const float eps = models::positive_number(config, "layer_norm_epsilon", 1e-5);
  const Activation act = models::activation(config, "activation_function", "gelu_new");
  // 1/sqrt(head_dim) (scale_attn_weights), and 1/(layer+1) on top when
  // scale_attn_by_inverse_layer_idx, as HF GPT2Attention does.
  const float base = config.get_bool("scale_attn_weights", true)
                         ? 1.0f / std::sqrt(static_cast<float>(c / heads))
                         : 1.0f;
  const bool by_layer = config.get_bool("scale_attn_by_inverse_layer_idx", false);

  // Checkpoints saved from GPT2LMHeadModel prefix the body with "transformer."; GPT2Model's not.
  const std::string prefix =
      weights.contains("transformer.wte.weight") || weights.size() == 0 ? "transformer." : "";
  auto conv1d = [&](const std::string& name, std::int64_t in, std::int64_t out) {
    return linear(name, out, in, true, WeightLayout::in_out);
  };
  TransformerSpec s{.architecture = "gpt2", .positions_key = "n_positions", .vocab_size = vocab};
  s.decoder.hidden = c;
  s.decoder.embeddings.tokens = {prefix + "wte.weight", {vocab, c}};
  s.decoder.embeddings.positions = {.kind = PositionKind::learned,
                                    .max_positions = max_positions,
                                    .table = {prefix + "wpe.weight", {max_positions, c}}};
  for (std::int32_t l = 0; l < layers; ++l) {
    const std::string p = prefix + "h." + std::to_string(l) + ".";
    BlockSpec& b = s.decoder.blocks.emplace_back();
    b.attention_norm = norm(NormKind::layer_norm, p + "ln_1", c, eps);
    b.attention = {.heads = heads,
                   .kv_heads = heads,
                   .head_dim = c / heads,
                   .scale = by_layer ? base / static_cast<float>(l + 1) : base,
                   .projections = {conv1d(p + "attn.c_attn", c, 3 * std::int64_t{c})},
                   .output = conv1d(p + "attn.c_proj", c, c)};
    b.mlp_norm = norm(NormKind::layer_norm, p + "ln_2", c, eps);
    b.mlp = {.kind = MlpKind::plain,
             .activation = act,
             .in = {conv1d(p + "mlp.c_fc", c, inner)},
             .out = conv1d(p + "mlp.c_proj", inner, c)};
  }
  s.decoder.final_norm = norm(NormKind::layer_norm, prefix + "ln_f", c, eps);
  if (models::is_sequence_classifier(config))
    s.head = models::score_head(config, c);  // GPT2ForSequenceClassification
  else
    s.head.output = models::lm_head(config, weights, s.decoder.embeddings.tokens,
                                    config.get_bool("tie_word_embeddings", true));
  return s;
}

}  // namespace masque::gpt2

namespace {

masque::Plugin* create(const masque::Params& params) {
  const masque::models::HfFolder folder(params);
  return masque::models::build_model(masque::gpt2::read_spec(folder.config, folder.weights), folder,
                                     masque::models::hf_tokens(folder.dir, folder.config), params);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "model folder: config.json and model.safetensors (or model.safetensors.index.json and its "
        "shards); generation_config.json, when present, overrides bos/eos/pad; of an id list "
        "(eos_token_id) every id ends generation, the first is the model's eos"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
    masque::models::kInitSeedParam,
};

}  // namespace

// GPT2Config's names.
constexpr masque::ModelTraits kGpt2Traits{.trainable = true,
                                          .embedding_dropout = "embd_pdrop",
                                          .residual_dropout = "resid_pdrop",
                                          .attention_dropout = "attn_pdrop"};

MASQUE_MODEL_PLUGIN("gpt2", "1.1.0",
                    "GPT-2 causal language model (Hugging Face GPT2LMHeadModel folder)",
                    "model_type=gpt2", kParams, kGpt2Traits, create)
