// Model plugin `qwen3`: Hugging Face Qwen3 causal LMs (Qwen3ForCausalLM): Qwen2's network with
// a per-head RMSNorm of q and k (q_norm, k_norm over head_dim) before the rotation, a head_dim
// of its own, no q/k/v biases unless attention_bias, and Qwen2's sliding-window rules. A
// config reader over the Transformer tier.
#include "llama_family.hpp"

namespace {

masque::Plugin* create(const masque::Params& params) {
  using namespace masque::models;
  const HfFolder folder(params);
  expect_model_type(folder.config, "qwen3");
  const bool bias = folder.config.get_bool("attention_bias", false);
  const LlamaFamily family{.architecture = "qwen3",
                           .default_positions = 32768,
                           .qkv_bias = bias,
                           .o_bias = bias,
                           .qk_norm = true,
                           .windows = qwen_sliding_windows(folder.config)};
  return build_llama_family(folder, family, params);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "model folder: config.json (model_type qwen3) and model.safetensors (or "
        "model.safetensors.index.json and its shards) with Qwen3ForCausalLM tensor names "
        "(self_attn.q_norm and k_norm per layer); generation_config.json, when present, "
        "overrides bos/eos/pad (every id of an eos_token_id list ends generation). With "
        "use_sliding_window, the layers max_window_layers.. (or those layer_types marks "
        "sliding_attention) see only keys ranked less than sliding_window below the query"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
    masque::models::kInitSeedParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("qwen3", "1.0.0",
                    "Qwen3 causal language model (Hugging Face Qwen3ForCausalLM folder)",
                    "model_type=qwen3", kParams, masque::models::kTrainableAttentionDropout, create)
