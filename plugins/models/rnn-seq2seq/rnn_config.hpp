// The architecture of an `rnn-seq2seq` model folder, read from its config.json (README.md).
#pragma once

#include <cstdint>
#include <filesystem>

#include "masque/tokenizer.hpp"

namespace masque::rnn {

enum class Cell : std::uint8_t { lstm, gru };
enum class AttentionKind : std::uint8_t { bahdanau, luong };
enum class Bridge : std::uint8_t { dense, zeros };

struct RnnConfig {
  Cell cell = Cell::lstm;
  std::int32_t source_vocab = 0, target_vocab = 0;
  std::int32_t embedding_size = 0;
  std::int32_t encoder_layers = 0, encoder_hidden = 0;  // per direction
  Bridge bridge = Bridge::dense;
  std::int32_t decoder_layers = 0, decoder_hidden = 0;
  AttentionKind attention = AttentionKind::bahdanau;
  std::int32_t attention_size = 0;  // Bahdanau's v and projections; Luong: decoder_hidden
  bool attention_output_bias = false;
  bool input_feeding = true;
  bool tie_output = false;
  bool output_bias = true;
  TokenId decoder_start = -1, eos = -1, pad = -1, bos = -1;

  std::int32_t memory_size() const { return 2 * encoder_hidden; }  // both directions
  std::int32_t decoder_input_size() const {
    return embedding_size + (input_feeding ? decoder_hidden : 0);
  }

  // ConfigError naming the file and the key for anything missing, mistyped or unsupported.
  static RnnConfig load(const std::filesystem::path& dir);
};

}  // namespace masque::rnn
