#include "gpt2_config.hpp"

#include <cmath>
#include <string>
#include <string_view>

#include "masque/config_json.hpp"
#include "masque/error.hpp"

namespace masque::gpt2 {

namespace {

[[noreturn]] void fail(const JsonConfig& config, std::string_view key, const std::string& what) {
  throw ConfigError(config.file().string() + ": key '" + std::string(key) + "': " + what);
}

// A positive int32 setting; GPT2Config also answers to the generic names (attribute_map).
std::int32_t positive(const JsonConfig& config, std::string_view key, std::string_view alias) {
  const std::string_view name = config.has(key) || !config.has(alias) ? key : alias;
  const std::int64_t v = config.get_int(name);
  if (v <= 0 || v > INT32_MAX)
    fail(config, name, "must be a positive integer, got " + std::to_string(v));
  return static_cast<std::int32_t>(v);
}

// The first id of an int or a list of ints (eos_token_id may be a list); `fallback` if absent.
TokenId first_id(const JsonConfig& config, std::string_view key, TokenId fallback) {
  if (!config.has(key)) return fallback;
  const auto ids = config.get_int_list(key);
  return ids.empty() ? fallback : static_cast<TokenId>(ids.front());
}

}  // namespace

float Gpt2Config::attention_scale(std::int32_t layer) const {
  float scale = scale_attn_weights ? 1.0f / std::sqrt(static_cast<float>(head_dim())) : 1.0f;
  if (scale_by_inverse_layer_idx) scale /= static_cast<float>(layer + 1);
  return scale;
}

Gpt2Config Gpt2Config::load(const std::filesystem::path& dir) {
  const JsonConfig config = JsonConfig::load(dir / "config.json");
  const std::string type = config.get_string("model_type", "gpt2");
  if (type != "gpt2") fail(config, "model_type", "expected 'gpt2', got '" + type + "'");

  Gpt2Config c;
  c.vocab_size = positive(config, "vocab_size", "vocab_size");
  c.hidden = positive(config, "n_embd", "hidden_size");
  c.layers = positive(config, "n_layer", "num_hidden_layers");
  c.heads = positive(config, "n_head", "num_attention_heads");
  c.max_positions = positive(config, "n_positions", "max_position_embeddings");
  c.inner = config.has("n_inner") ? positive(config, "n_inner", "n_inner") : 4 * c.hidden;
  if (c.hidden % c.heads != 0)
    fail(config, "n_head",
         std::to_string(c.heads) + " heads do not divide n_embd " + std::to_string(c.hidden));
  c.layer_norm_eps = static_cast<float>(config.get_number("layer_norm_epsilon", 1e-5));
  try {
    c.activation = parse_activation(config.get_string("activation_function", "gelu_new"));
  } catch (const ConfigError& e) {
    fail(config, "activation_function", e.what());
  }
  c.scale_attn_weights = config.get_bool("scale_attn_weights", true);
  c.scale_by_inverse_layer_idx = config.get_bool("scale_attn_by_inverse_layer_idx", false);
  c.tie_word_embeddings = config.get_bool("tie_word_embeddings", true);

  c.bos = first_id(config, "bos_token_id", -1);
  c.eos = first_id(config, "eos_token_id", -1);
  c.pad = first_id(config, "pad_token_id", -1);
  if (std::filesystem::is_regular_file(dir / "generation_config.json")) {
    const JsonConfig generation = JsonConfig::load(dir / "generation_config.json");
    c.bos = first_id(generation, "bos_token_id", c.bos);
    c.eos = first_id(generation, "eos_token_id", c.eos);
    c.pad = first_id(generation, "pad_token_id", c.pad);
  }
  return c;
}

}  // namespace masque::gpt2
