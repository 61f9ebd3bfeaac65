// Reading a Hugging Face config.json into a TransformerSpec: the checks every model plugin
// makes (positive sizes, token ids, generation_config.json overrides), with ConfigErrors that
// name the file and the key. Header-only, compiled into each plugin (plugins share no library).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "masque/config_json.hpp"
#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "masque/transformer/model.hpp"

namespace masque::models {

[[noreturn]] inline void fail(const JsonConfig& config, std::string_view key,
                              const std::string& what) {
  throw ConfigError(config.file().string() + ": key '" + std::string(key) + "': " + what);
}

// A positive int32 setting, read under `key` or, when only that is present, `alias` (HF's
// attribute_map); `fallback` (> 0) when neither is present, else the key is required.
inline std::int32_t positive(const JsonConfig& config, std::string_view key,
                             std::string_view alias = {}, std::int64_t fallback = 0) {
  const std::string_view name =
      config.has(key) || alias.empty() || !config.has(alias) ? key : alias;
  if (fallback > 0 && !config.has(name)) return static_cast<std::int32_t>(fallback);
  const std::int64_t v = config.get_int(name);
  if (v <= 0 || v > INT32_MAX)
    fail(config, name, "must be a positive integer, got " + std::to_string(v));
  return static_cast<std::int32_t>(v);
}

inline float positive_number(const JsonConfig& config, std::string_view key, double fallback) {
  const double v = config.get_number(key, fallback);
  if (!(v > 0.0) || v > 1e300) fail(config, key, "must be a positive number");
  return static_cast<float>(v);
}

inline Activation activation(const JsonConfig& config, std::string_view key,
                             std::string_view fallback) {
  try {
    return parse_activation(config.get_string(key, std::string(fallback)));
  } catch (const ConfigError& e) {
    fail(config, key, e.what());
  }
}

inline void expect_model_type(const JsonConfig& config, std::string_view type) {
  const std::string got = config.get_string("model_type", std::string(type));
  if (got != type)
    fail(config, "model_type", "expected '" + std::string(type) + "', got '" + got + "'");
}

// The first id of an int or a list of ints (eos_token_id may be a list); `fallback` if absent.
// -1 is Hugging Face's "none" (old Llama configs have pad_token_id -1); other negatives are
// mistakes that would silently leave the model without the token.
inline TokenId first_id(const JsonConfig& config, std::string_view key, TokenId fallback) {
  if (!config.has(key)) return fallback;
  const auto ids = config.get_int_list(key);
  for (const auto id : ids)
    if (id < -1 || id > INT32_MAX)
      fail(config, key,
           "must be a token id (0 or more, or -1 for none), got " + std::to_string(id));
  return ids.empty() ? fallback : static_cast<TokenId>(ids.front());
}

// The ids after the first of an eos_token_id list (the other ids that end generation).
inline std::vector<TokenId> other_ids(const JsonConfig& config, std::string_view key) {
  std::vector<TokenId> out;
  if (!config.has(key)) return out;
  const auto ids = config.get_int_list(key);
  for (std::size_t i = 1; i < ids.size(); ++i)
    if (ids[i] >= 0) out.push_back(static_cast<TokenId>(ids[i]));
  return out;
}

// bos/eos/pad of config.json, overridden by generation_config.json when present; every id of
// the eos_token_id list ends generation, the first is the model's eos.
inline transformer::ModelTokens hf_tokens(const std::filesystem::path& dir,
                                          const JsonConfig& config) {
  transformer::ModelTokens t{.bos = first_id(config, "bos_token_id", -1),
                             .eos = first_id(config, "eos_token_id", -1),
                             .pad = first_id(config, "pad_token_id", -1),
                             .other_end_ids = other_ids(config, "eos_token_id")};
  if (std::filesystem::is_regular_file(dir / "generation_config.json")) {
    const JsonConfig generation = JsonConfig::load(dir / "generation_config.json");
    t.bos = first_id(generation, "bos_token_id", t.bos);
    t.eos = first_id(generation, "eos_token_id", t.eos);
    t.pad = first_id(generation, "pad_token_id", t.pad);
    if (generation.has("eos_token_id")) t.other_end_ids = other_ids(generation, "eos_token_id");
  }
  return t;
}

// The output head: the token table when tied, else `lm_head.weight`, which must exist.
inline transformer::LinearSpec lm_head(const JsonConfig& config, const SafeTensors& weights,
                                       const transformer::TensorSpec& tokens, bool tied) {
  if (tied) return {.weight = tokens};
  if (weights.size() > 0 && !weights.contains("lm_head.weight"))
    throw ConfigError(config.file().string() + ": key 'tie_word_embeddings': false, but " +
                      weights.path().string() + " has no tensor 'lm_head.weight'");
  return {.weight = {"lm_head.weight", tokens.shape}};
}

}  // namespace masque::models
