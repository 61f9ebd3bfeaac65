// Model plugin `phi3`: Hugging Face Phi-3 folders (Phi3ForCausalLM): the Llama network with q, k
// and v in one qkv_proj and gate and up in one gate_up_proj (as the checkpoint stores them; the
// tier runs both as one matmul anyway), no biases, an untied head, and Phi3Config's
// sliding_window in every layer (Phi-3-mini-4k: 2047). rope_scaling as llama_family reads it:
// the 128k folders' longrope is refused by name. A config reader over the Transformer tier
// (common/llama_family.hpp).
#include "llama_family.hpp"

namespace {

masque::Plugin* create(const masque::Params& params) {
  using namespace masque::models;
  const HfFolder folder(params);
  expect_model_type(folder.config, "phi3");
  if (folder.config.get_number("partial_rotary_factor", 1.0) != 1.0)
    fail(folder.config, "partial_rotary_factor",
         "only 1.0 (every feature of a head rotates, as Phi-3 does) is supported");
  const std::int32_t layers = positive(folder.config, "num_hidden_layers");
  const LlamaFamily family{.architecture = "phi3",
                           .default_positions = 4096,
                           .fused = true,
                           .windows = sliding_windows(folder.config, layers, 0)};
  return build_llama_family(folder, family, params);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "model folder: config.json (model_type phi3) and model.safetensors (or "
        "model.safetensors.index.json and its shards) with Phi3ForCausalLM tensor names "
        "(self_attn.qkv_proj, mlp.gate_up_proj); generation_config.json, when present, overrides "
        "bos/eos/pad (every id of an eos_token_id list ends generation). With a sliding_window "
        "every layer attends within it: key j is visible to query i only when rank(i) - rank(j) "
        "< sliding_window, under any mask"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
    masque::models::kInitSeedParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("phi3", "1.0.0",
                    "Phi-3 causal language model (Hugging Face Phi3ForCausalLM folder)",
                    "model_type=phi3", kParams, masque::models::kTrainableAttentionDropout, create)
