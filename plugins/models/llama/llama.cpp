// Model plugin `llama`: Hugging Face Llama folders (LlamaForCausalLM), with a Mistral-style
// sliding_window when the config has one. A config reader over the Transformer tier
// (common/llama_family.hpp).
#include "llama_family.hpp"

namespace {

masque::Plugin* create(const masque::Params& params) {
  using namespace masque::models;
  const HfFolder folder(params);
  expect_model_type(folder.config, "llama");
  const bool attention_bias = folder.config.get_bool("attention_bias", false);
  const bool mlp_bias = folder.config.get_bool("mlp_bias", false);
  // A sliding_window (Mistral-style; null: none) holds in every layer.
  const LlamaFamily family{
      .architecture = "llama",
      .default_positions = 2048,
      .qkv_bias = attention_bias,
      .o_bias = attention_bias,
      .mlp_bias = mlp_bias,
      .windows = sliding_windows(folder.config, positive(folder.config, "num_hidden_layers"), 0)};
  return build_llama_family(folder, family, params);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "model folder: config.json and model.safetensors (or model.safetensors.index.json and its "
        "shards); generation_config.json, when present, overrides bos/eos/pad; of an id list "
        "(eos_token_id) every id ends generation, the first is the model's eos. A sliding_window "
        "in config.json (as "
        "Mistral's) "
        "makes every layer's attention windowed: key j is visible to query i only when rank(i) - "
        "rank(j) < sliding_window, under any mask"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
    masque::models::kInitSeedParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("llama", "1.1.0",
                    "Llama causal language model (Hugging Face LlamaForCausalLM folder)",
                    "model_type=llama", kParams, masque::models::kTrainableAttentionDropout, create)
