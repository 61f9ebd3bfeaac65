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

std::string kind_of(const nlohmann::json& config) {
  for (const char* key : {"model_type", "architecture"}) {
    const auto it = config.find(key);
    if (it != config.end() && it->is_string()) return it->get<std::string>();
  }
  return "";
}

}  // namespace

DropoutRates dropout_rates_of(const nlohmann::json& config, float override) {
  if (override >= 0.0f && !(override < 1.0f))
    throw ConfigError("dropout must be in [0, 1), got " + std::to_string(override));
  auto rate = [&](const char* key) { return override >= 0.0f ? override : read_rate(config, key); };
  DropoutRates r;
  const std::string kind = kind_of(config);
  if (kind == "bert") {
    r.embedding = r.residual = rate("hidden_dropout_prob");
    r.attention = rate("attention_probs_dropout_prob");
  } else if (kind == "gpt2") {
    r.embedding = rate("embd_pdrop");
    r.residual = rate("resid_pdrop");
    r.attention = rate("attn_pdrop");
  } else if (kind.find("encoder-decoder") != std::string::npos || kind == "bart" ||
             kind == "mbart" || kind == "m2m_100" || config.contains("num_encoder_layers")) {
    r.embedding = r.residual = rate("dropout");
    r.attention = rate("attention_dropout");
    r.activation = rate("activation_dropout");
  } else {  // llama, qwen2: attention dropout only
    r.attention = rate("attention_dropout");
  }
  return r;
}

DropoutKey dropout_key(const DropoutContext& context, std::size_t row, std::uint32_t site) {
  if (row >= context.records.size())
    throw RuntimeError("dropout: batch row " + std::to_string(row) + " has no record key (" +
                       std::to_string(context.records.size()) + " given)");
  return {
      .seed = mix_seed(context.seed, context.records[row]), .step = context.step, .tensor = site};
}

}  // namespace masque::train
