#include "bert_config.hpp"

#include <limits>
#include <string>
#include <string_view>

#include "masque/config_json.hpp"
#include "masque/error.hpp"

namespace masque::bert {

namespace {

[[noreturn]] void fail(const JsonConfig& json, std::string_view key, const std::string& what) {
  throw ConfigError(json.file().string() + ": key '" + std::string(key) + "': " + what);
}

// A required integer in [min, int32 max].
std::int32_t positive(const JsonConfig& json, std::string_view key, std::int64_t min = 1) {
  const std::int64_t v = json.get_int(key);
  if (v < min || v > std::numeric_limits<std::int32_t>::max())
    fail(json, key, "expected an integer >= " + std::to_string(min) + ", got " + std::to_string(v));
  return static_cast<std::int32_t>(v);
}

// An optional token id (-1 when missing or null); a list (eos_token_id) gives its first entry.
std::int32_t token_id(const JsonConfig& json, std::string_view key) {
  if (!json.has(key)) return -1;
  const auto ids = json.get_int_list(key);
  return ids.empty() ? -1 : static_cast<std::int32_t>(ids.front());
}

Activation activation(const JsonConfig& json) {
  const std::string name = json.get_string("hidden_act", "gelu");
  try {
    return parse_activation(name);
  } catch (const ConfigError& e) {
    fail(json, "hidden_act", e.what());
  }
}

// BERT's defining choices that masque does not implement are refused, not ignored.
void check_supported(const JsonConfig& json) {
  const std::string model_type = json.get_string("model_type", "bert");
  if (model_type != "bert") fail(json, "model_type", "expected 'bert', got '" + model_type + "'");
  const std::string positions = json.get_string("position_embedding_type", "absolute");
  if (positions != "absolute")
    fail(json, "position_embedding_type",
         "only learned absolute position embeddings ('absolute') are supported, got '" + positions +
             "'");
}

}  // namespace

BertConfig load_config(const std::filesystem::path& folder) {
  const JsonConfig json = JsonConfig::load(folder / "config.json");
  check_supported(json);
  BertConfig c;
  c.vocab_size = positive(json, "vocab_size");
  c.hidden_size = positive(json, "hidden_size");
  c.num_layers = positive(json, "num_hidden_layers");
  c.num_heads = positive(json, "num_attention_heads");
  c.intermediate_size = positive(json, "intermediate_size");
  c.max_positions = positive(json, "max_position_embeddings");
  c.type_vocab_size = json.has("type_vocab_size") ? positive(json, "type_vocab_size") : 2;
  if (c.hidden_size % c.num_heads != 0)
    fail(json, "num_attention_heads",
         std::to_string(c.num_heads) + " heads do not divide hidden_size " +
             std::to_string(c.hidden_size));
  const double eps = json.get_number("layer_norm_eps", 1e-12);
  if (!(eps > 0.0)) fail(json, "layer_norm_eps", "expected a positive number");
  c.layer_norm_eps = static_cast<float>(eps);
  c.hidden_act = activation(json);
  c.tie_word_embeddings = json.get_bool("tie_word_embeddings", true);
  c.pad_token_id = token_id(json, "pad_token_id");
  c.bos_token_id = token_id(json, "bos_token_id");
  c.eos_token_id = token_id(json, "eos_token_id");
  return c;
}

}  // namespace masque::bert
