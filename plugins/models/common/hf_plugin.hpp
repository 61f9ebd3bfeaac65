// What every Hugging Face model plugin shares around its config reader: opening the folder,
// building the TransformerModel, the `path` parameter and the plugin descriptor.
#pragma once

#include <filesystem>

#include "hf_config.hpp"
#include "masque/folder_match.hpp"
#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "masque/train/network.hpp"
#include "matmul_dtype.hpp"

namespace masque::models {

// The `init_seed` parameter: a model from its config alone (what `masque train` starts a
// from-scratch run with).
inline constexpr ParamSpec kInitSeedParam{
    .name = "init_seed",
    .type = ParamType::integer,
    .default_value = "-1",
    .help =
        "-1: read the folder's weights. A seed >= 0: ignore any weights (the folder needs only "
        "config.json) and initialise every parameter as the original model does: "
        "normal(0, initializer_range) for matrices and embeddings, zero biases, unit norm "
        "weights (`masque train` with init: scratch)"};

// What the trainer reads of a model plugin (ModelTraits, masque/plugin.hpp): whether it trains
// and the config.json keys of its dropout rates, which follow the family's upstream config.
// One rate, for the attention probabilities (Llama and its kin).
inline constexpr ModelTraits kTrainableAttentionDropout{.trainable = true,
                                                        .attention_dropout = "attention_dropout"};
// fairseq's names: BART, mBART, M2M-100 and the transformer-encoder-decoder folders.
inline constexpr ModelTraits kTrainableFairseqDropout{.trainable = true,
                                                      .embedding_dropout = "dropout",
                                                      .residual_dropout = "dropout",
                                                      .attention_dropout = "attention_dropout",
                                                      .activation_dropout = "activation_dropout"};
// Inference only (no init_seed parameter): masque train refuses the plugin.
inline constexpr ModelTraits kInferenceOnly{};

// A model folder as the parameters name it: config.json parsed, the checkpoint opened (none
// when the model is initialised from init_seed; spec readers then use Hugging Face's names).
struct HfFolder {
  explicit HfFolder(const Params& params)
      : dir(params.get_string("path")),
        config(JsonConfig::load(dir / "config.json")),
        init_seed(params.has("init_seed") ? params.get_int("init_seed") : -1),
        weights(init_seed >= 0 ? SafeTensors{} : transformer::open_checkpoint(dir)) {}
  std::filesystem::path dir;
  JsonConfig config;
  std::int64_t init_seed;
  SafeTensors weights;
};

// The network of `spec` over the folder's weights (or, with init_seed, over fresh ones drawn as
// masque::train::ParameterSet::initialised draws them), in the `matmul_dtype` the parameters ask.
inline Plugin* build_model(transformer::TransformerSpec spec, const HfFolder& folder,
                           transformer::ModelTokens tokens, const Params& params) {
  spec.initializer_range = folder.config.get_number("initializer_range", spec.initializer_range);
  if (folder.init_seed < 0)
    return new transformer::TransformerModel(std::move(spec), folder.weights, tokens,
                                             matmul_dtype(params, &folder.weights, &folder.config),
                                             kv_cache_dtype(params));
  train::ParameterSet initialised = train::ParameterSet::initialised(
      spec, spec.initializer_range, static_cast<std::uint64_t>(folder.init_seed));
  std::map<std::string, Tensor> fresh;
  for (auto& e : initialised.entries()) fresh.emplace(e.name, std::move(e.value));
  const SafeTensors weights = SafeTensors::held(
      std::move(fresh),
      folder.dir / ("(initialised from seed " + std::to_string(folder.init_seed) + ")"));
  return new transformer::TransformerModel(std::move(spec), weights, tokens, matmul_dtype(params),
                                           kv_cache_dtype(params));
}

// The required `path` parameter of a model plugin.
constexpr ParamSpec path_param(const char* help) {
  return {.name = "path", .type = ParamType::path, .help = help, .flags = kParamRequired};
}

}  // namespace masque::models

// The descriptor of a model plugin: NAME, VERSION, DESCRIPTION, the folders it serves
// (masque/folder_match.hpp, e.g. "model_type=gpt2"), a ParamSpec array, its ModelTraits (a
// constant with static storage) and create.
#define MASQUE_MODEL_PLUGIN(NAME, VERSION, DESCRIPTION, FOLDER_MATCH, PARAMS, TRAITS, CREATE) \
  namespace {                                                                                 \
  const masque::PluginDescriptor* descriptor() {                                              \
    static const masque::PluginDescriptor d{                                                  \
        .kind = masque::PluginKind::model,                                                    \
        .name = NAME,                                                                         \
        .version = VERSION,                                                                   \
        .license = "MIT",                                                                     \
        .description = DESCRIPTION,                                                           \
        .params = PARAMS,                                                                     \
        .num_params = sizeof(PARAMS) / sizeof(PARAMS[0]),                                     \
        .create = CREATE,                                                                     \
        .model = &(TRAITS),                                                                   \
    };                                                                                        \
    return &d;                                                                                \
  }                                                                                           \
  }                                                                                           \
  MASQUE_PLUGIN(descriptor)                                                                   \
  MASQUE_FOLDER_MATCH(FOLDER_MATCH)
