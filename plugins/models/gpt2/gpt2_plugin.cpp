// Model plugin `gpt2`: Hugging Face GPT-2 folders (GPT2LMHeadModel / GPT2Model checkpoints).
#include "gpt2_model.hpp"
#include "masque/params.hpp"
#include "matmul_dtype.hpp"

namespace {

masque::Plugin* create(const masque::Params& params) {
  return new masque::gpt2::Gpt2Model(params.get_string("path"),
                                     masque::models::matmul_dtype(params));
}

const masque::ParamSpec kParams[] = {
    {.name = "path",
     .type = masque::ParamType::path,
     .help = "model folder: config.json and model.safetensors (or model.safetensors.index.json "
             "and its shards); generation_config.json, when present, overrides bos/eos/pad; "
             "of an id list (eos_token_id) the first id is the model's",
     .flags = masque::kParamRequired},
    masque::models::kMatmulDtypeParam,
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
