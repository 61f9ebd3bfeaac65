// The settings of a Hugging Face GPT-2 folder (config.json, generation_config.json).
#pragma once

#include <cstdint>
#include <filesystem>

#include "masque/ops.hpp"
#include "masque/tokenizer.hpp"

namespace masque::gpt2 {

struct Gpt2Config {
  std::int32_t vocab_size = 0;
  std::int32_t hidden = 0;         // n_embd
  std::int32_t layers = 0;         // n_layer
  std::int32_t heads = 0;          // n_head
  std::int32_t inner = 0;          // n_inner (null: 4 * n_embd)
  std::int32_t max_positions = 0;  // n_positions
  float layer_norm_eps = 1e-5f;
  Activation activation = Activation::gelu_tanh;
  bool scale_attn_weights = true;
  bool scale_by_inverse_layer_idx = false;
  bool tie_word_embeddings = true;
  // From config.json, overridden by generation_config.json; the first id of a list; -1 = none.
  TokenId bos = -1, eos = -1, pad = -1;

  std::int32_t head_dim() const { return hidden / heads; }
  // 1/sqrt(head_dim) (when scale_attn_weights), and 1/(layer+1) on top when
  // scale_attn_by_inverse_layer_idx, as HF GPT2Attention does.
  float attention_scale(std::int32_t layer) const;

  // Reads `dir`/config.json (and generation_config.json when present). ConfigError naming the
  // file and the key for a missing or inconsistent setting.
  static Gpt2Config load(const std::filesystem::path& dir);
};

}  // namespace masque::gpt2
