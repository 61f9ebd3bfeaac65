// Dropout rates from config.json and the keys of the masks (dropout.hpp).
#include "masque/train/dropout.hpp"

#include <string>

#include "masque/error.hpp"
#include "masque/random.hpp"

namespace masque::train {

namespace {

float read_rate(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return 0.0f;
  if (!it->is_number())
    throw ConfigError(std::string(key) + " must be a number, got " + it->dump());
  const double p = it->get<double>();
  if (!(p >= 0.0 && p < 1.0))
    throw ConfigError(std::string(key) + " must be in [0, 1), got " + it->dump());
  return static_cast<float>(p);
}

}  // namespace

DropoutRates dropout_rates_of(const ModelTraits& model, const nlohmann::json& config,
                              float override) {
  if (override >= 0.0f && !(override < 1.0f))
    throw ConfigError("dropout must be in [0, 1), got " + std::to_string(override));
  // A place the model declares no key for has no dropout, whatever the override.
  auto rate = [&](const char* key) {
    if (!key) return 0.0f;
    return override >= 0.0f ? override : read_rate(config, key);
  };
  return {.embedding = rate(model.embedding_dropout),
          .residual = rate(model.residual_dropout),
          .attention = rate(model.attention_dropout),
          .activation = rate(model.activation_dropout)};
}

DropoutKey dropout_key(const DropoutContext& context, std::size_t row, std::uint32_t site) {
  if (row >= context.records.size())
    throw RuntimeError("dropout: batch row " + std::to_string(row) + " has no record key (" +
                       std::to_string(context.records.size()) + " given)");
  return {
      .seed = mix_seed(context.seed, context.records[row]), .step = context.step, .tensor = site};
}

}  // namespace masque::train
