#include "encdec_config.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>

#include "masque/config_json.hpp"
#include "masque/error.hpp"

namespace masque::encdec {

namespace {

[[noreturn]] void fail(const JsonConfig& config, std::string_view key, const std::string& what) {
  throw ConfigError(config.file().string() + ": key '" + std::string(key) + "': " + what);
}

std::int32_t int_in(const JsonConfig& config, std::string_view key, std::int64_t lo,
                    std::int64_t hi, std::int64_t value) {
  if (value < lo || value > hi)
    fail(config, key,
         "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
             std::to_string(value));
  return static_cast<std::int32_t>(value);
}

constexpr std::int64_t kIntMax = std::numeric_limits<std::int32_t>::max();

std::int32_t positive(const JsonConfig& config, std::string_view key) {
  return int_in(config, key, 1, kIntMax, config.get_int(key));
}

std::int32_t positive(const JsonConfig& config, std::string_view key, std::int32_t fallback) {
  return int_in(config, key, 1, kIntMax, config.get_int(key, fallback));
}

float positive_number(const JsonConfig& config, std::string_view key, double fallback) {
  const double v = config.get_number(key, fallback);
  if (!(v > 0.0) || !std::isfinite(v))
    fail(config, key, "must be a positive number, got " + std::to_string(v));
  return static_cast<float>(v);
}

// The index of `value` (the setting `key`) among `choices`.
int choice(const JsonConfig& config, std::string_view key, const std::string& value,
           std::initializer_list<std::string_view> choices) {
  int i = 0;
  std::string known;
  for (std::string_view c : choices) {
    if (value == c) return i;
    known += (i++ ? ", " : "") + std::string(c);
  }
  fail(config, key, "unsupported value '" + value + "' (supported: " + known + ")");
}

// A token id (first of a list) that must be inside the vocabulary.
TokenId token_id(const JsonConfig& config, std::string_view key, std::int32_t vocab) {
  const auto ids = config.get_int_list(key);
  if (ids.empty()) fail(config, key, "no token id given");
  return int_in(config, key, 0, vocab - 1, ids.front());
}

TokenId optional_token_id(const JsonConfig& config, std::string_view key, std::int32_t vocab) {
  return config.has(key) ? token_id(config, key, vocab) : -1;
}

// Keys that describe what the file is; they must not contradict what this plugin runs.
void check_informative(const JsonConfig& config) {
  choice(config, "architecture", config.get_string("architecture", "transformer-encoder-decoder"),
         {"transformer-encoder-decoder"});
  choice(config, "normalization", config.get_string("normalization", "layernorm"), {"layernorm"});
  for (const char* key : {"add_source_bos", "add_source_eos"})
    if (config.get_bool(key, false))
      fail(config, key,
           "true is not supported: the model takes the source ids as given (let the tokenizer "
           "add special tokens)");
}

PositionConfig read_positions(const JsonConfig& config) {
  PositionConfig p;
  p.kind = static_cast<PositionKind>(choice(config, "position_encoding",
                                            config.get_string("position_encoding"),
                                            {"sinusoidal", "learned"}));
  const bool learned = p.kind == PositionKind::learned;
  if (config.has("position_encoding_learned") &&
      config.get_bool("position_encoding_learned") != learned)
    fail(config, "position_encoding_learned", "contradicts position_encoding");
  p.max_positions = positive(config, "max_position_embeddings", p.max_positions);
  if (learned) {
    p.offset = int_in(config, "position_encoding_offset", 0, kIntMax,
                      config.get_int("position_encoding_offset", 0));
    return p;
  }
  p.layout = static_cast<SinusoidLayout>(
      choice(config, "position_encoding_layout",
             config.get_string("position_encoding_layout", "concat_sin_cos"),
             {"concat_sin_cos", "interleaved"}));
  p.first_position = int_in(config, "position_encoding_first_position", 0, kIntMax,
                            config.get_int("position_encoding_first_position", 0));
  p.max_timescale = positive_number(config, "position_encoding_max_timescale", 10000.0);
  p.denominator_half_minus_one =
      choice(config, "position_encoding_timescale_denominator",
             config.get_string("position_encoding_timescale_denominator", "half_minus_one"),
             {"half_minus_one", "half"}) == 0;
  return p;
}

}  // namespace

EncDecConfig EncDecConfig::load(const std::filesystem::path& dir) {
  const JsonConfig config = JsonConfig::load(dir / "config.json");
  check_informative(config);

  EncDecConfig c;
  c.encoder_layers =
      int_in(config, "num_encoder_layers", 0, kIntMax, config.get_int("num_encoder_layers"));
  c.decoder_layers = positive(config, "num_decoder_layers");
  c.d_model = positive(config, "d_model");
  c.heads = positive(config, "num_heads");
  if (!config.has("head_dim") && c.d_model % c.heads != 0)
    fail(config, "num_heads",
         std::to_string(c.heads) + " heads do not divide d_model " + std::to_string(c.d_model) +
             " (give head_dim)");
  c.head_dim = positive(config, "head_dim", c.d_model / c.heads);
  c.ffn_dim = positive(config, "ffn_dim");
  c.source_vocab = positive(config, "source_vocab_size");
  c.target_vocab = positive(config, "target_vocab_size");

  try {
    c.activation = parse_activation(config.get_string("activation"));
  } catch (const ConfigError& e) {
    if (!config.has("activation")) throw;
    fail(config, "activation", e.what());
  }
  if (c.activation == Activation::none) fail(config, "activation", "an activation is required");

  c.pre_norm = config.get_bool("pre_norm");
  c.encoder_final_norm = config.get_bool("encoder_final_layer_norm", c.pre_norm);
  c.decoder_final_norm = config.get_bool("decoder_final_layer_norm", c.pre_norm);
  c.layer_norm_eps = positive_number(config, "layer_norm_eps", 1e-5);
  c.attention_scale =
      positive_number(config, "attention_scale", 1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  c.attention_bias = config.get_bool("attention_bias", true);
  c.ffn_bias = config.get_bool("ffn_bias", true);
  c.output_bias = config.get_bool("output_projection_bias", false);
  c.embedding_scale =
      positive_number(config, "embedding_scale", std::sqrt(static_cast<double>(c.d_model)));
  c.shared_embeddings = config.get_bool("shared_embeddings", false);
  if (c.shared_embeddings && c.source_vocab != c.target_vocab)
    fail(config, "shared_embeddings",
         "a shared table needs source_vocab_size == target_vocab_size (" +
             std::to_string(c.source_vocab) + " vs " + std::to_string(c.target_vocab) + ")");
  c.tie_output = config.get_bool("tie_output_projection", false);
  c.positions = read_positions(config);
  if (c.positions.kind == PositionKind::sinusoidal && c.d_model % 2 != 0)
    fail(config, "d_model", "sinusoidal positions need an even d_model");
  if (c.positions.kind == PositionKind::sinusoidal && c.positions.denominator_half_minus_one &&
      c.d_model < 4)
    fail(config, "d_model", "sinusoidal positions with half_minus_one need d_model >= 4");

  c.decoder_start = token_id(config, "decoder_start_token_id", c.target_vocab);
  c.eos = token_id(config, "eos_token_id", c.target_vocab);
  c.pad = token_id(config, "pad_token_id", std::min(c.source_vocab, c.target_vocab));
  c.bos = optional_token_id(config, "bos_token_id", c.target_vocab);
  optional_token_id(config, "source_unk_token_id", c.source_vocab);
  optional_token_id(config, "target_unk_token_id", c.target_vocab);
  return c;
}

}  // namespace masque::encdec
