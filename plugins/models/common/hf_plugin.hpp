// What every Hugging Face model plugin shares around its config reader: opening the folder,
// building the TransformerModel, the `path` parameter and the plugin descriptor.
#pragma once

#include <filesystem>

#include "hf_config.hpp"
#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "matmul_dtype.hpp"

namespace masque::models {

// A model folder as the parameters name it: config.json parsed, the checkpoint opened.
struct HfFolder {
  explicit HfFolder(const Params& params)
      : dir(params.get_string("path")),
        config(JsonConfig::load(dir / "config.json")),
        weights(transformer::open_checkpoint(dir)) {}
  std::filesystem::path dir;
  JsonConfig config;
  SafeTensors weights;
};

// The network of `spec` over the folder's weights, in the `matmul_dtype` the parameters ask.
inline Plugin* build_model(transformer::TransformerSpec spec, const HfFolder& folder,
                           transformer::ModelTokens tokens, const Params& params) {
  return new transformer::TransformerModel(std::move(spec), folder.weights, tokens,
                                           matmul_dtype(params));
}

// The required `path` parameter of a model plugin.
constexpr ParamSpec path_param(const char* help) {
  return {.name = "path", .type = ParamType::path, .help = help, .flags = kParamRequired};
}

}  // namespace masque::models

// The descriptor of a model plugin: NAME, VERSION, DESCRIPTION, a ParamSpec array and create.
#define MASQUE_MODEL_PLUGIN(NAME, VERSION, DESCRIPTION, PARAMS, CREATE) \
  namespace {                                                           \
  const masque::PluginDescriptor* descriptor() {                        \
    static const masque::PluginDescriptor d{                            \
        .kind = masque::PluginKind::model,                              \
        .name = NAME,                                                   \
        .version = VERSION,                                             \
        .license = "MIT",                                               \
        .description = DESCRIPTION,                                     \
        .params = PARAMS,                                               \
        .num_params = sizeof(PARAMS) / sizeof(PARAMS[0]),               \
        .create = CREATE,                                               \
    };                                                                  \
    return &d;                                                          \
  }                                                                     \
  }                                                                     \
  MASQUE_PLUGIN(descriptor)
