// The architecture of an encoder-decoder checkpoint, read from its config.json.
//
// Every choice that differs between Transformer encoder-decoders (OpenNMT / CTranslate2,
// Marian, fairseq, BART-like) is a setting here, not a code path of its own; README.md lists
// the keys, their meaning and defaults.
#pragma once

#include <cstdint>
#include <filesystem>

#include "masque/ops.hpp"
#include "masque/tokenizer.hpp"

namespace masque::encdec {

enum class PositionKind : std::uint8_t { sinusoidal, learned };

// Where the sines and cosines of a sinusoidal encoding go.
enum class SinusoidLayout : std::uint8_t {
  concat_sin_cos,  // [sin(p w_0) .. sin(p w_{h-1}) | cos(p w_0) .. cos(p w_{h-1})]
  interleaved,     // [sin(p w_0), cos(p w_0), sin(p w_1), cos(p w_1), ...]
};

struct PositionConfig {
  PositionKind kind = PositionKind::sinusoidal;
  // Sinusoidal: w_j = max_timescale^(-j / denominator) with denominator half - 1 (tensor2tensor,
  // OpenNMT, fairseq, CTranslate2) or half (Vaswani et al., Marian); token t gets p = t + first.
  SinusoidLayout layout = SinusoidLayout::concat_sin_cos;
  std::int32_t first_position = 0;
  double max_timescale = 10000.0;
  bool denominator_half_minus_one = true;
  // Learned: token t reads row t + offset of `{encoder,decoder}.embed_positions.weight` (BART: 2).
  std::int32_t offset = 0;
  // Positions a sequence may use; for learned tables also bounded by the table.
  std::int32_t max_positions = 1024;
};

struct EncDecConfig {
  std::int32_t encoder_layers = 0, decoder_layers = 0;
  std::int32_t d_model = 0, heads = 0, head_dim = 0, ffn_dim = 0;
  std::int32_t source_vocab = 0, target_vocab = 0;
  Activation activation = Activation::relu;
  bool pre_norm = true;
  bool encoder_final_norm = true, decoder_final_norm = true;
  float layer_norm_eps = 1e-5f;
  float attention_scale = 0.0f;  // resolved: 1/sqrt(head_dim) unless configured
  bool attention_bias = true, ffn_bias = true, output_bias = false;
  float embedding_scale = 1.0f;    // resolved: sqrt(d_model) unless configured
  bool shared_embeddings = false;  // one table for source and target tokens
  bool tie_output = false;         // the output projection is the target embedding table
  PositionConfig positions;
  TokenId decoder_start = -1, eos = -1, pad = -1, bos = -1;

  std::int32_t attention_width() const { return heads * head_dim; }

  // Reads and validates `dir`/config.json; ConfigError naming the file and the key otherwise.
  static EncDecConfig load(const std::filesystem::path& dir);
};

}  // namespace masque::encdec
