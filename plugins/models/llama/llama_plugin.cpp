// Model plugin `llama`: Hugging Face Llama folders (LlamaForCausalLM / LlamaModel checkpoints).
#include "llama_model.hpp"
#include "masque/params.hpp"
#include "matmul_dtype.hpp"

namespace {

masque::Plugin* create(const masque::Params& params) {
  return new masque::llama::LlamaModel(params.get_string("path"),
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
      .name = "llama",
      .version = "1.0.0",
      .license = "MIT",
      .description = "Llama causal language model (Hugging Face LlamaForCausalLM folder)",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)
