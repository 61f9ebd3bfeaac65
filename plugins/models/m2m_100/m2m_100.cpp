// Model plugin `m2m_100`: Hugging Face M2M-100 and NLLB-200 folders (both model_type m2m_100:
// M2M100ForConditionalGeneration, or M2M100Model without the head). Pre-norm LayerNorm blocks
// with biases, a final LayerNorm on each stack, ReLU, token embeddings times sqrt(d_model), and
// fairseq's sinusoidal positions (M2M100SinusoidalPositionalEmbedding: [sin | cos] of
// t * 10000^(-j / (d/2 - 1)), real tokens numbered from pad_token_id + 1, which for masque's
// right-padded rows is position t + pad + 1); one token table for both stacks and a tied head.
// Decoding starts from decoder_start_token_id (eos) and then the target language's token
// (forced_bos_token_id, the parameter, or a record's target prefix). A config reader over the
// Transformer tier (the common parts: bart_family.hpp).
#include "bart_family.hpp"

namespace masque::m2m_100 {

using namespace transformer;
using models::fail;
using models::positive;

TransformerSpec read_spec(const JsonConfig& config, const SafeTensors& w) {
  static constexpr models::bart::Family kM2m100{.architecture = "m2m_100",
                                                .activation = "relu",
                                                .pre_norm = true,
                                                .embedding_norm = false,
                                                .final_norm = true,
                                                .scale_embedding = true};
  const std::int32_t d = positive(config, "d_model", "hidden_size");
  if (d % 2 != 0 || d < 4)
    fail(config, "d_model", "sinusoidal positions need an even d_model of 4 or more");
  const TokenId pad = models::first_id(config, "pad_token_id", 1);
  if (pad < 0) fail(config, "pad_token_id", "the positions are numbered from it: required");
  const PositionSpec positions{
      .kind = PositionKind::sinusoidal,
      .max_positions = positive(config, "max_position_embeddings", {}, 1024),
      .layout = SinusoidLayout::concat_sin_cos,
      .first_position = pad + 1,
      .max_timescale = 10000.0,
      .denominator_half_minus_one = true};
  return models::bart::read_spec(config, w, kM2m100, [&](const std::string&) { return positions; });
}

}  // namespace masque::m2m_100

namespace {

masque::Plugin* create(const masque::Params& params) {
  return masque::models::bart::create(params, masque::m2m_100::read_spec, 2);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "model folder: config.json (model_type m2m_100, M2M-100 or NLLB-200; d_model, "
        "encoder_/decoder_layers, _attention_heads, _ffn_dim, vocab_size, "
        "max_position_embeddings (default 1024), scale_embedding (default true), "
        "activation_function (default relu), tie_word_embeddings (default true), "
        "pad/bos/eos_token_id (defaults 1, 0, 2), decoder_start_token_id (default 2), "
        "forced_bos_token_id; generation_config.json's token ids first) and model.safetensors "
        "(or model.safetensors.index.json and its shards) with M2M100ForConditionalGeneration "
        "tensor names (model.shared.weight, model.encoder.layer_norm.weight, "
        "model.encoder.layers.N.self_attn.q_proj.weight, ..., lm_head.weight when untied) or "
        "M2M100Model's (no model. prefix: loads without the head). The target language is the "
        "forced first token: forced_bos_token_id or a record's target prefix (e.g. the id of "
        "fra_Latn)"),
    masque::models::bart::kForcedBosParam,
    masque::models::kInitSeedParam,
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("m2m_100", "1.0.0",
                    "M2M-100 / NLLB-200 translation encoder-decoder (Hugging Face "
                    "M2M100ForConditionalGeneration folder): fairseq sinusoidal positions, "
                    "pre-norm blocks, final layer norms, a forced target-language token",
                    "model_type=m2m_100", kParams, masque::models::kTrainableFairseqDropout, create)
