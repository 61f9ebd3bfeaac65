// Model plugin `mistral`: Hugging Face Mistral folders (MistralForCausalLM): the Llama network
// without biases, a head_dim of its own, and a sliding window in every layer (MistralConfig's
// default 4096 when config.json has no sliding_window; null for none, as v0.2 and later say).
// A config reader over the Transformer tier (common/llama_family.hpp).
#include "llama_family.hpp"

namespace {

constexpr std::int32_t kDefaultWindow = 4096;  // MistralConfig.sliding_window

masque::Plugin* create(const masque::Params& params) {
  using namespace masque::models;
  const HfFolder folder(params);
  expect_model_type(folder.config, "mistral");
  const std::int32_t layers = positive(folder.config, "num_hidden_layers");
  std::vector<std::int32_t> windows = sliding_windows(folder.config, layers, 0);
  if (!folder.config.json().contains("sliding_window")) windows.assign(layers, kDefaultWindow);
  const LlamaFamily family{
      .architecture = "mistral", .default_positions = 4096 * 32, .windows = std::move(windows)};
  return build_llama_family(folder, family, params);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "model folder: config.json (model_type mistral) and model.safetensors (or "
        "model.safetensors.index.json and its shards) with MistralForCausalLM tensor names; "
        "generation_config.json, when present, overrides bos/eos/pad (every id of an eos_token_id "
        "list ends generation). Every layer attends within "
        "sliding_window (4096 when config.json does not say; null: no window): key j is visible "
        "to query i only when rank(i) - rank(j) < sliding_window, under any mask"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
    masque::models::kInitSeedParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("mistral", "1.0.0",
                    "Mistral causal language model (Hugging Face MistralForCausalLM folder)",
                    "model_type=mistral", kParams, masque::models::kTrainableAttentionDropout,
                    create)
