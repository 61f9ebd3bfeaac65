// Model plugin `bart`: Hugging Face BART folders (BartForConditionalGeneration, or BartModel
// without the head). Post-norm LayerNorm blocks with biases everywhere, learned positions read
// at offset 2 (BartLearnedPositionalEmbedding: max_position_embeddings + 2 rows), token
// embeddings times sqrt(d_model) with scale_embedding, then layernorm_embedding; one token table
// for both stacks and a head tied to it (or lm_head.weight) plus final_logits_bias. Decoding
// starts from decoder_start_token_id (eos, 2) and, where the config says so, forced_bos_token_id.
// A config reader over the Transformer tier (the common parts: bart_family.hpp).
#include "bart_family.hpp"

namespace masque::bart {

using namespace transformer;

TransformerSpec read_spec(const JsonConfig& config, const SafeTensors& w) {
  static constexpr models::bart::Family kBart{.architecture = "bart",
                                              .activation = "gelu",
                                              .pre_norm = false,
                                              .embedding_norm = true,
                                              .final_norm = false,
                                              .scale_embedding = false};
  return models::bart::read_spec(config, w, kBart, models::bart::offset_positions(config));
}

}  // namespace masque::bart

namespace {

masque::Plugin* create(const masque::Params& params) {
  return masque::models::bart::create(params, masque::bart::read_spec, 2);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "model folder: config.json (model_type bart; d_model, encoder_/decoder_layers, "
        "_attention_heads, _ffn_dim, vocab_size, max_position_embeddings (default 1024), "
        "scale_embedding (default false), activation_function (default gelu), "
        "tie_word_embeddings (default true), pad/bos/eos_token_id (defaults 1, 0, 2), "
        "decoder_start_token_id (default 2), forced_bos_token_id; generation_config.json's "
        "token ids first) and model.safetensors (or model.safetensors.index.json and its "
        "shards) with BartForConditionalGeneration tensor names (model.shared.weight, "
        "model.encoder.embed_positions.weight, model.encoder.layernorm_embedding.weight, "
        "model.encoder.layers.N.self_attn.q_proj.weight, ..., final_logits_bias, lm_head.weight "
        "when untied) or BartModel's (no model. prefix: loads without the head). Unlike HF's "
        "generate(), forced_eos_token_id is not applied at the length limit"),
    masque::models::bart::kForcedBosParam,
    masque::models::kInitSeedParam,
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("bart", "1.0.0",
                    "BART encoder-decoder (Hugging Face BartForConditionalGeneration / BartModel "
                    "folder): learned positions at offset 2, post-norm blocks, "
                    "layernorm_embedding, final_logits_bias",
                    "model_type=bart", kParams, masque::models::kTrainableFairseqDropout, create)
