// The fields of a Hugging Face BertConfig (config.json) that the BERT model plugin uses.
#pragma once

#include <cstdint>
#include <filesystem>

#include "masque/ops.hpp"

namespace masque::bert {

struct BertConfig {
  std::int32_t vocab_size = 0;
  std::int32_t hidden_size = 0;
  std::int32_t num_layers = 0;
  std::int32_t num_heads = 0;
  std::int32_t intermediate_size = 0;
  std::int32_t max_positions = 0;
  std::int32_t type_vocab_size = 2;
  float layer_norm_eps = 1e-12f;
  Activation hidden_act = Activation::gelu;
  bool tie_word_embeddings = true;
  std::int32_t pad_token_id = -1, bos_token_id = -1, eos_token_id = -1;

  std::int32_t head_dim() const { return hidden_size / num_heads; }
};

// Reads `folder`/config.json. Every problem is a ConfigError naming the file and the key.
BertConfig load_config(const std::filesystem::path& folder);

}  // namespace masque::bert
