// Model plugin `gpt2`: Hugging Face GPT-2 folders (GPT2LMHeadModel / GPT2Model checkpoints).
#include "gpt2_model.hpp"
#include "masque/params.hpp"

namespace {

masque::Plugin* create(const masque::Params& params) {
  const bool bf16 = params.get_string("matmul_dtype") == "bf16";
  return new masque::gpt2::Gpt2Model(params.get_string("path"),
                                     bf16 ? masque::DType::bf16 : masque::DType::f32);
}

const masque::ParamSpec kParams[] = {
    {.name = "path",
     .type = masque::ParamType::path,
     .help = "model folder: config.json and model.safetensors (or model.safetensors.index.json "
             "and its shards); generation_config.json, when present, overrides bos/eos/pad; "
             "of an id list (eos_token_id) the first id is the model's",
     .flags = masque::kParamRequired},
    {.name = "matmul_dtype",
     .type = masque::ParamType::string,
     .default_value = "f32",
     .help = "type of the weights and inputs of every matmul (attention stays f32): f32, or "
             "bf16 for half the weight memory and AMX / AVX-512 BF16 speed at about 3 "
             "significant digits (logits then differ from f32 by ~1e-2)",
     .choices = "f32|bf16"},
};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::model,
      .name = "gpt2",
      .version = "1.0.0",
      .license = "MIT",
      .description = "GPT-2 causal language model (Hugging Face GPT2LMHeadModel folder)",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)
