// Model plugin `encoder-decoder`: Transformer encoder-decoders (OpenNMT / CTranslate2, Marian,
// fairseq, BART-like) whose architecture config.json describes (see README.md).
#include "encdec_model.hpp"
#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "matmul_dtype.hpp"

namespace {

masque::Plugin* create(const masque::Params& params) {
  return new masque::encdec::EncoderDecoderModel(params.get_string("path"),
                                                 masque::models::matmul_dtype(params));
}

const masque::ParamSpec kParams[] = {
    {.name = "path",
     .type = masque::ParamType::path,
     .help = "the model folder: config.json (architecture and special tokens, keys listed in the "
             "plugin's README.md) and model.safetensors (or a sharded "
             "model.safetensors.index.json) with Hugging Face BART-style tensor names "
             "(encoder.layers.N.self_attn.q_proj.weight, ..., lm_head.weight)",
     .flags = masque::kParamRequired},
    masque::models::kMatmulDtypeParam,
};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::model,
      .name = "encoder-decoder",
      .version = "1.0.0",
      .license = "MIT",
      .description =
          "Transformer encoder-decoder (translation, transliteration): encodes a "
          "source once, then decodes step by step with KV caches",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)
