// Model plugin `mbart`: Hugging Face mBART folders (MBartForConditionalGeneration, or MBartModel
// without the head: mBART-cc25, mBART-50). BART's network (learned positions at offset 2,
// layernorm_embedding, scale_embedding, a tied head plus final_logits_bias) with pre-norm blocks
// and a final LayerNorm on each stack (encoder.layer_norm, decoder.layer_norm). Decoding starts
// from decoder_start_token_id (mBART-50: eos) and then the target language's token, which the
// config's forced_bos_token_id, the `forced_bos_token_id` parameter or a record's target prefix
// gives. A config reader over the Transformer tier (the common parts: bart_family.hpp).
#include "bart_family.hpp"

namespace masque::mbart {

using namespace transformer;

TransformerSpec read_spec(const JsonConfig& config, const SafeTensors& w) {
  static constexpr models::bart::Family kMbart{.architecture = "mbart",
                                               .activation = "gelu",
                                               .pre_norm = true,
                                               .embedding_norm = true,
                                               .final_norm = true,
                                               .scale_embedding = false};
  return models::bart::read_spec(config, w, kMbart, models::bart::offset_positions(config));
}

}  // namespace masque::mbart

namespace {

// MBartConfig has no decoder_start_token_id: HF's generate() then starts from bos.
masque::Plugin* create(const masque::Params& params) {
  return masque::models::bart::create(params, masque::mbart::read_spec, -1);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "model folder: config.json (model_type mbart; d_model, encoder_/decoder_layers, "
        "_attention_heads, _ffn_dim, vocab_size, max_position_embeddings (default 1024), "
        "scale_embedding (default false), activation_function (default gelu), "
        "tie_word_embeddings (default true), pad/bos/eos_token_id (defaults 1, 0, 2), "
        "decoder_start_token_id (default bos), forced_bos_token_id; generation_config.json's "
        "token ids first) and model.safetensors (or model.safetensors.index.json and its "
        "shards) with MBartForConditionalGeneration tensor names (model.shared.weight, "
        "model.encoder.embed_positions.weight, model.encoder.layernorm_embedding.weight, "
        "model.encoder.layer_norm.weight, model.encoder.layers.N.self_attn.q_proj.weight, ..., "
        "final_logits_bias, lm_head.weight when untied) or MBartModel's (no model. prefix: loads "
        "without the head). Unlike HF's generate(), forced_eos_token_id is not applied at the "
        "length limit"),
    masque::models::bart::kForcedBosParam,
    masque::models::kInitSeedParam,
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("mbart", "1.0.0",
                    "mBART encoder-decoder (Hugging Face MBartForConditionalGeneration / "
                    "MBartModel folder): BART with pre-norm blocks and final layer norms, a "
                    "forced target-language token",
                    "model_type=mbart", kParams, masque::models::kTrainableFairseqDropout, create)
