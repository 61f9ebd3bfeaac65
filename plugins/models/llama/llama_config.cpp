#include "llama_config.hpp"

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "masque/config_json.hpp"
#include "masque/error.hpp"
#include "masque/ops.hpp"

namespace masque::llama {

namespace {

[[noreturn]] void fail(const JsonConfig& config, std::string_view key, const std::string& what) {
  throw ConfigError(config.file().string() + ": key '" + std::string(key) + "': " + what);
}

std::int32_t positive(const JsonConfig& config, std::string_view key) {
  const std::int64_t v = config.get_int(key);
  if (v <= 0 || v > INT32_MAX)
    fail(config, key, "must be a positive integer, got " + std::to_string(v));
  return static_cast<std::int32_t>(v);
}

// The first id of an int or a list of ints (eos_token_id may be a list); `fallback` if absent.
TokenId first_id(const JsonConfig& config, std::string_view key, TokenId fallback) {
  if (!config.has(key)) return fallback;
  const auto ids = config.get_int_list(key);
  return ids.empty() ? fallback : static_cast<TokenId>(ids.front());
}

// Only unscaled RoPE is implemented: a scaled checkpoint would silently give wrong numbers.
void check_rope_scaling(const JsonConfig& config) {
  const nlohmann::json& doc = config.json();
  const auto it = doc.find("rope_scaling");
  if (it == doc.end() || it->is_null()) return;
  if (!it->is_object()) fail(config, "rope_scaling", "expected null or an object");
  std::string type = "?";
  for (const char* key : {"rope_type", "type"}) {
    const auto t = it->find(key);
    if (t != it->end() && t->is_string()) {
      type = t->get<std::string>();
      break;
    }
  }
  if (type != "default")
    fail(config, "rope_scaling",
         "unsupported RoPE scaling type '" + type + "' (masque implements plain RoPE only)");
}

void check_activation(const JsonConfig& config) {
  const std::string name = config.get_string("hidden_act", "silu");
  Activation activation = Activation::none;
  try {
    activation = parse_activation(name);
  } catch (const ConfigError& e) {
    fail(config, "hidden_act", e.what());
  }
  if (activation != Activation::silu)
    fail(config, "hidden_act", "the Llama MLP is implemented for silu only, got '" + name + "'");
}

}  // namespace

LlamaConfig LlamaConfig::load(const std::filesystem::path& dir) {
  const JsonConfig config = JsonConfig::load(dir / "config.json");
  const std::string type = config.get_string("model_type", "llama");
  if (type != "llama") fail(config, "model_type", "expected 'llama', got '" + type + "'");

  LlamaConfig c;
  c.vocab_size = positive(config, "vocab_size");
  c.hidden = positive(config, "hidden_size");
  c.layers = positive(config, "num_hidden_layers");
  c.heads = positive(config, "num_attention_heads");
  c.kv_heads =
      config.has("num_key_value_heads") ? positive(config, "num_key_value_heads") : c.heads;
  c.intermediate = positive(config, "intermediate_size");
  c.max_positions =
      config.has("max_position_embeddings") ? positive(config, "max_position_embeddings") : 2048;
  if (config.has("head_dim")) {
    c.head_dim = positive(config, "head_dim");
  } else if (c.hidden % c.heads == 0) {
    c.head_dim = c.hidden / c.heads;
  } else {
    fail(config, "num_attention_heads",
         std::to_string(c.heads) + " heads do not divide hidden_size " + std::to_string(c.hidden));
  }
  if (c.heads % c.kv_heads != 0)
    fail(config, "num_key_value_heads",
         std::to_string(c.kv_heads) + " kv heads do not divide " + std::to_string(c.heads) +
             " attention heads");
  if (c.head_dim % 2 != 0) fail(config, "head_dim", "RoPE needs an even head_dim");
  c.rms_norm_eps = static_cast<float>(config.get_number("rms_norm_eps", 1e-6));
  c.rope_theta = config.get_number("rope_theta", 10000.0);
  if (!(c.rope_theta > 0.0)) fail(config, "rope_theta", "must be positive");
  check_rope_scaling(config);
  check_activation(config);
  c.attention_bias = config.get_bool("attention_bias", false);
  c.mlp_bias = config.get_bool("mlp_bias", false);
  c.tie_word_embeddings = config.get_bool("tie_word_embeddings", false);

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

}  // namespace masque::llama
