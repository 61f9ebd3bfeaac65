// Model plugin `qwen2`: Hugging Face Qwen2 / Qwen2.5 causal LMs (Qwen2ForCausalLM): the Llama
// network with biases on q, k and v only, RoPE theta from the config, optionally tied
// embeddings, and a sliding window on the layers the config selects (use_sliding_window,
// max_window_layers, layer_types). A config reader over the Transformer tier.
#include "llama_family.hpp"

namespace {

masque::Plugin* create(const masque::Params& params) {
  using namespace masque::models;
  const HfFolder folder(params);
  expect_model_type(folder.config, "qwen2");
  const LlamaFamily family{.architecture = "qwen2",
                           .default_positions = 32768,
                           .qkv_bias = true,
                           .windows = qwen_sliding_windows(folder.config)};
  return build_llama_family(folder, family, params);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "model folder: config.json (model_type qwen2) and model.safetensors (or "
        "model.safetensors.index.json and its shards) with Qwen2ForCausalLM tensor names; "
        "generation_config.json, when present, overrides bos/eos/pad (every id of an eos_token_id "
        "list ends generation). With use_sliding_window, "
        "the layers max_window_layers.. (or those layer_types marks sliding_attention) see only "
        "keys ranked less than sliding_window below the query"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
    masque::models::kInitSeedParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("qwen2", "1.0.0",
                    "Qwen2 / Qwen2.5 causal language model (Hugging Face Qwen2ForCausalLM folder)",
                    "model_type=qwen2", kParams, masque::models::kTrainableAttentionDropout, create)
