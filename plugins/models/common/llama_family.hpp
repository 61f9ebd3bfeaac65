// The Llama family's network (Llama, Qwen2, Qwen3, Phi-3; Mistral-style sliding windows): RMSNorm
// pre-norm blocks, rotary positions (rotate_half), grouped-query attention (Qwen3: q and k
// normed per head first), a SwiGLU MLP. A plugin reads what its config says about biases, q/k
// norms and sliding windows into LlamaFamily; the rest is read here.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hf_config.hpp"
#include "hf_plugin.hpp"
#include "sequence_classification.hpp"

namespace masque::models {

struct LlamaFamily {
  const char* architecture;
  std::int64_t default_positions;  // max_position_embeddings when absent
  bool qkv_bias = false, o_bias = false, mlp_bias = false;
  bool qk_norm = false;  // Qwen3: self_attn.q_norm / k_norm, per head
  bool fused = false;    // Phi-3: one self_attn.qkv_proj [q|k|v] and one mlp.gate_up_proj [gate|up]
  std::vector<std::int32_t> windows;  // per layer, 0 = full attention (empty: all full)
};

// A RoPE scaling object found under `key` (rope_scaling, or one of Gemma 3's rope_parameters):
// none, linear or llama3 (masque/layers.hpp, RopeScaling); other types (dynamic, yarn, longrope)
// are refused, since running them as plain RoPE would silently give other numbers.
inline RopeScaling rope_scaling_of(const JsonConfig& config, const nlohmann::json& scaling,
                                   const std::string& key) {
  if (!scaling.is_object()) fail(config, key, "expected null or an object");
  std::string type = "?";
  for (const char* name : {"rope_type", "type"}) {
    const auto t = scaling.find(name);
    if (t != scaling.end() && t->is_string()) {
      type = t->get<std::string>();
      break;
    }
  }
  auto number = [&](const char* name, std::optional<double> fallback) {
    const auto v = scaling.find(name);
    if (v == scaling.end() || v->is_null()) {
      if (!fallback) fail(config, key + "." + name, "missing (rope_type " + type + ")");
      return *fallback;
    }
    if (!v->is_number() || !(v->get<double>() > 0.0))
      fail(config, key + "." + name, "expected a positive number");
    return v->get<double>();
  };
  RopeScaling s;
  if (type == "default") return s;
  if (type == "linear") {
    s.kind = RopeScaling::Kind::linear;
    s.factor = number("factor", std::nullopt);
    return s;
  }
  if (type == "llama3") {
    s.kind = RopeScaling::Kind::llama3;
    s.factor = number("factor", std::nullopt);
    s.low_freq_factor = number("low_freq_factor", std::nullopt);
    s.high_freq_factor = number("high_freq_factor", std::nullopt);
    s.original_max_positions = number("original_max_position_embeddings", std::nullopt);
    if (!(s.high_freq_factor > s.low_freq_factor))
      fail(config, key + ".high_freq_factor", "must be greater than low_freq_factor");
    return s;
  }
  fail(config, key,
       "unsupported RoPE scaling type '" + type +
           "' (masque implements default, linear and llama3)");
}

// The config's rope_scaling (absent or null: none).
inline RopeScaling rope_scaling(const JsonConfig& config) {
  const nlohmann::json& doc = config.json();
  const auto it = doc.find("rope_scaling");
  if (it == doc.end() || it->is_null()) return {};
  return rope_scaling_of(config, *it, "rope_scaling");
}

inline transformer::TransformerSpec llama_family_spec(const JsonConfig& config,
                                                      const SafeTensors& weights,
                                                      const LlamaFamily& family) {
  using namespace transformer;
  const std::int32_t vocab = positive(config, "vocab_size");
  const std::int32_t c = positive(config, "hidden_size");
  const std::int32_t layers = positive(config, "num_hidden_layers");
  const std::int32_t heads = positive(config, "num_attention_heads");
  const std::int32_t kv_heads = positive(config, "num_key_value_heads", {}, heads);
  const std::int32_t inner = positive(config, "intermediate_size");
  const std::int32_t max_positions =
      positive(config, "max_position_embeddings", {}, family.default_positions);
  if (!config.has("head_dim") && c % heads != 0)
    fail(config, "num_attention_heads",
         std::to_string(heads) + " heads do not divide hidden_size " + std::to_string(c));
  const std::int32_t head_dim = positive(config, "head_dim", {}, c / heads);
  if (heads % kv_heads != 0)
    fail(config, "num_key_value_heads",
         std::to_string(kv_heads) + " kv heads do not divide " + std::to_string(heads) +
             " attention heads");
  if (head_dim % 2 != 0) fail(config, "head_dim", "RoPE needs an even head_dim");
  const float eps = positive_number(config, "rms_norm_eps", 1e-6);
  const double theta = config.get_number("rope_theta", 10000.0);
  if (!(theta > 0.0)) fail(config, "rope_theta", "must be positive");
  if (activation(config, "hidden_act", "silu") != Activation::silu)
    fail(config, "hidden_act",
         "the Llama MLP is implemented for silu only, got '" +
             config.get_string("hidden_act", "silu") + "'");

  // LlamaForCausalLM checkpoints prefix the body with "model."; LlamaModel's do not.
  const std::string prefix =
      weights.contains("model.embed_tokens.weight") || weights.size() == 0 ? "model." : "";
  const std::int64_t q = std::int64_t{heads} * head_dim, kv = std::int64_t{kv_heads} * head_dim;
  TransformerSpec s{.architecture = family.architecture,
                    .positions_key = "max_position_embeddings",
                    .vocab_size = vocab};
  s.decoder.hidden = c;
  s.decoder.embeddings.tokens = {prefix + "embed_tokens.weight", {vocab, c}};
  s.decoder.embeddings.positions = {
      .kind = PositionKind::rotary, .max_positions = max_positions, .rope_theta = theta};
  s.decoder.embeddings.positions.rope_scaling = rope_scaling(config);
  for (std::int32_t l = 0; l < layers; ++l) {
    const std::string p = prefix + "layers." + std::to_string(l) + ".";
    BlockSpec& b = s.decoder.blocks.emplace_back();
    b.attention_norm = norm(NormKind::rms_norm, p + "input_layernorm", c, eps);
    b.attention = {
        .heads = heads,
        .kv_heads = kv_heads,
        .head_dim = head_dim,
        .scale = 1.0f / std::sqrt(static_cast<float>(head_dim)),
        .projections =
            family.fused
                ? std::vector<LinearSpec>{linear(p + "self_attn.qkv_proj", q + 2 * kv, c,
                                                 family.qkv_bias)}
                : std::vector<LinearSpec>{linear(p + "self_attn.q_proj", q, c, family.qkv_bias),
                                          linear(p + "self_attn.k_proj", kv, c, family.qkv_bias),
                                          linear(p + "self_attn.v_proj", kv, c, family.qkv_bias)},
        .output = linear(p + "self_attn.o_proj", c, q, family.o_bias),
        .rotary = true,
        .window = family.windows.empty() ? 0 : family.windows[l]};
    if (family.qk_norm) {
      b.attention.q_norm = norm(NormKind::rms_norm, p + "self_attn.q_norm", head_dim, eps);
      b.attention.k_norm = norm(NormKind::rms_norm, p + "self_attn.k_norm", head_dim, eps);
    }
    b.mlp_norm = norm(NormKind::rms_norm, p + "post_attention_layernorm", c, eps);
    b.mlp = {
        .kind = MlpKind::gated,
        .activation = Activation::silu,
        .in = family.fused
                  ? std::vector<LinearSpec>{linear(p + "mlp.gate_up_proj", 2 * std::int64_t{inner},
                                                   c, family.mlp_bias)}
                  : std::vector<LinearSpec>{linear(p + "mlp.gate_proj", inner, c, family.mlp_bias),
                                            linear(p + "mlp.up_proj", inner, c, family.mlp_bias)},
        .out = linear(p + "mlp.down_proj", c, inner, family.mlp_bias)};
  }
  s.decoder.final_norm = norm(NormKind::rms_norm, prefix + "norm", c, eps);
  if (is_sequence_classifier(config))
    s.head = score_head(config, c);  // LlamaForSequenceClassification, Qwen2's
  else
    s.head.output = lm_head(config, weights, s.decoder.embeddings.tokens,
                            config.get_bool("tie_word_embeddings", false));
  return s;
}

// The window of every layer: `sliding_window` (when not null) for layers whose layer_types
// entry is "sliding_attention", or, without layer_types, layers >= first_windowed.
inline std::vector<std::int32_t> sliding_windows(const JsonConfig& config, std::int32_t layers,
                                                 std::int32_t first_windowed) {
  if (!config.has("sliding_window")) return {};
  const std::int32_t window = positive(config, "sliding_window");
  std::vector<std::int32_t> out(layers, 0);
  const nlohmann::json& doc = config.json();
  const auto types = doc.find("layer_types");
  if (types != doc.end() && !types->is_null()) {
    if (!types->is_array() || types->size() != static_cast<std::size_t>(layers))
      fail(config, "layer_types", "expected one entry per layer");
    for (std::int32_t l = 0; l < layers; ++l)
      out[l] = (*types)[l] == "sliding_attention" ? window : 0;
    return out;
  }
  for (std::int32_t l = first_windowed; l < layers; ++l) out[l] = window;
  return out;
}

// Qwen2Config's and Qwen3Config's windows: sliding_window counts only with use_sliding_window;
// then the layers from max_window_layers on (or those layer_types marks) attend within it.
inline std::vector<std::int32_t> qwen_sliding_windows(const JsonConfig& config) {
  if (!config.get_bool("use_sliding_window", false)) return {};
  const auto first = static_cast<std::int32_t>(config.get_int("max_window_layers", 28));
  return sliding_windows(config, positive(config, "num_hidden_layers"), first);
}

// The model of a Llama-family folder.
inline Plugin* build_llama_family(const HfFolder& folder, const LlamaFamily& family,
                                  const Params& params) {
  return build_model(llama_family_spec(folder.config, folder.weights, family), folder,
                     hf_tokens(folder.dir, folder.config), params);
}

}  // namespace masque::models
