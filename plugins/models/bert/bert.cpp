// Model plugin `bert`: Hugging Face BertForMaskedLM (or BertModel) checkpoints under any mask
// strategy: bidirectional MLM, causal LM, UniLM seq2seq, permutation LM with query tokens.
#include "bert_model.hpp"
#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "matmul_dtype.hpp"

namespace {

masque::Plugin* create(const masque::Params& params) {
  return new masque::bert::BertModel({
      .path = params.get_string("path"),
      .mlm_head = params.get_bool("mlm_head"),
      .compute = masque::models::matmul_dtype(params),
  });
}

const masque::ParamSpec kParams[] = {
    {.name = "path",
     .type = masque::ParamType::path,
     .help = "the model folder: config.json and model.safetensors (or a sharded "
             "model.safetensors.index.json) with Hugging Face BertForMaskedLM tensor names, with "
             "or without the `bert.` prefix",
     .flags = masque::kParamRequired},
    {.name = "mlm_head",
     .type = masque::ParamType::boolean,
     .default_value = "true",
     .help = "load the masked-LM head (cls.predictions) and compute logits; false loads the "
             "encoder only (e.g. a BertModel checkpoint) for hidden states"},
    masque::models::kMatmulDtypeParam,
};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::model,
      .name = "bert",
      .version = "1.0.0",
      .license = "MIT",
      .description = "BERT with its MLM head: encodings and token predictions under any mask",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)
