// The settings of a Hugging Face Llama folder (config.json, generation_config.json).
#pragma once

#include <cstdint>
#include <filesystem>

#include "masque/tokenizer.hpp"

namespace masque::llama {

struct LlamaConfig {
  std::int32_t vocab_size = 0;
  std::int32_t hidden = 0;         // hidden_size
  std::int32_t layers = 0;         // num_hidden_layers
  std::int32_t heads = 0;          // num_attention_heads
  std::int32_t kv_heads = 0;       // num_key_value_heads (default: heads)
  std::int32_t head_dim = 0;       // head_dim (default: hidden / heads)
  std::int32_t intermediate = 0;   // intermediate_size
  std::int32_t max_positions = 0;  // max_position_embeddings
  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000.0;
  bool attention_bias = false;  // q/k/v/o biases
  bool mlp_bias = false;        // gate/up/down biases
  bool tie_word_embeddings = false;
  // From config.json, overridden by generation_config.json; the first id of a list; -1 = none.
  TokenId bos = -1, eos = -1, pad = -1;

  std::int32_t q_width() const { return heads * head_dim; }
  std::int32_t kv_width() const { return kv_heads * head_dim; }

  // Reads `dir`/config.json (and generation_config.json when present). ConfigError naming the
  // file and the key for a missing, inconsistent or unsupported setting (e.g. rope_scaling).
  static LlamaConfig load(const std::filesystem::path& dir);
};

}  // namespace masque::llama
