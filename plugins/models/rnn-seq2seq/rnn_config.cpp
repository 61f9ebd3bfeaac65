#include "rnn_config.hpp"

#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>

#include "masque/config_json.hpp"
#include "masque/error.hpp"

namespace masque::rnn {

namespace {

[[noreturn]] void fail(const JsonConfig& config, std::string_view key, const std::string& what) {
  throw ConfigError(config.file().string() + ": key '" + std::string(key) + "': " + what);
}

constexpr std::int64_t kIntMax = std::numeric_limits<std::int32_t>::max();

std::int32_t in_range(const JsonConfig& config, std::string_view key, std::int64_t lo,
                      std::int64_t hi, std::int64_t value) {
  if (value < lo || value > hi)
    fail(config, key,
         "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
             std::to_string(value));
  return static_cast<std::int32_t>(value);
}

std::int32_t positive(const JsonConfig& config, std::string_view key) {
  return in_range(config, key, 1, kIntMax, config.get_int(key));
}

// The index of the setting `key` among `choices` (`fallback` when absent).
int choice(const JsonConfig& config, std::string_view key, std::string_view fallback,
           std::initializer_list<std::string_view> choices) {
  const std::string value =  // an empty fallback: the key is required
      fallback.empty() ? config.get_string(key) : config.get_string(key, std::string(fallback));
  int i = 0;
  std::string known;
  for (std::string_view c : choices) {
    if (value == c) return i;
    known += (i++ ? ", " : "") + std::string(c);
  }
  fail(config, key, "unsupported value '" + value + "' (supported: " + known + ")");
}

TokenId token_id(const JsonConfig& config, std::string_view key, std::int32_t vocab) {
  const auto ids = config.get_int_list(key);
  if (ids.empty()) fail(config, key, "no token id given");
  return in_range(config, key, 0, vocab - 1, ids.front());
}

}  // namespace

RnnConfig RnnConfig::load(const std::filesystem::path& dir) {
  const JsonConfig config = JsonConfig::load(dir / "config.json");
  choice(config, "architecture", "rnn-seq2seq", {"rnn-seq2seq"});

  RnnConfig c;
  c.cell = static_cast<Cell>(choice(config, "cell", "", {"lstm", "gru"}));
  c.source_vocab = positive(config, "source_vocab_size");
  c.target_vocab = positive(config, "target_vocab_size");
  c.embedding_size = positive(config, "embedding_size");
  c.encoder_layers = positive(config, "encoder_layers");
  c.encoder_hidden = positive(config, "encoder_hidden_size");
  c.bridge = static_cast<Bridge>(choice(config, "bridge", "dense", {"dense", "zeros"}));
  c.decoder_layers = positive(config, "decoder_layers");
  c.decoder_hidden = positive(config, "decoder_hidden_size");
  c.attention = static_cast<AttentionKind>(choice(config, "attention", "", {"bahdanau", "luong"}));
  c.attention_size = c.attention == AttentionKind::luong
                         ? c.decoder_hidden
                         : in_range(config, "attention_size", 1, kIntMax,
                                    config.get_int("attention_size", c.decoder_hidden));
  c.attention_output_bias = config.get_bool("attention_output_bias", false);
  c.input_feeding = config.get_bool("input_feeding", true);
  c.tie_output = config.get_bool("tie_output_projection", false);
  c.output_bias = config.get_bool("output_bias", true);
  if (c.tie_output && c.embedding_size != c.decoder_hidden)
    fail(config, "tie_output_projection",
         "needs embedding_size (" + std::to_string(c.embedding_size) + ") = decoder_hidden_size (" +
             std::to_string(c.decoder_hidden) + ")");

  c.decoder_start = token_id(config, "decoder_start_token_id", c.target_vocab);
  c.eos = token_id(config, "eos_token_id", c.target_vocab);
  c.pad = token_id(config, "pad_token_id", c.target_vocab);
  if (config.has("bos_token_id")) c.bos = token_id(config, "bos_token_id", c.target_vocab);
  return c;
}

}  // namespace masque::rnn
