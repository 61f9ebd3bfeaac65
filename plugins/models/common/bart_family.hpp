// What the fairseq-born encoder-decoders of Hugging Face share (BART, mBART, M2M-100 / NLLB):
// config keys (d_model, encoder_/decoder_layers, _attention_heads, _ffn_dim), tensor names
// (model.{encoder,decoder}.layers.N.{self_attn,encoder_attn,fc1,fc2} with a LayerNorm after
// each), one token table for both stacks, a head tied to it (or lm_head.weight) plus
// final_logits_bias, and the generation tokens (decoder_start_token_id, forced_bos_token_id).
// The plugins differ in positions, norm placement and the extra norms they add.
#pragma once

#include <cmath>
#include <string>

#include "hf_plugin.hpp"

namespace masque::models::bart {

constexpr float kEps = 1e-5f;  // nn.LayerNorm's default

// What a family's config reader chose; the rest is common.
struct Family {
  const char* architecture;  // model_type
  const char* activation;    // activation_function's default
  bool pre_norm;             // mBART, M2M-100: x + f(LN(x)); BART: LN(x + f(x))
  bool embedding_norm;       // layernorm_embedding after the embeddings (BART, mBART)
  bool final_norm;           // layer_norm after the last block (mBART, M2M-100)
  bool scale_embedding;      // scale_embedding's default
};

// The tensors' prefix: "model." (*ForConditionalGeneration) or "" (*Model, no head); a fresh
// model (no checkpoint) has the head.
inline std::string prefix(const JsonConfig& config, const SafeTensors& w) {
  if (w.size() == 0 || w.contains("model.shared.weight") ||
      w.contains("model.encoder.embed_tokens.weight"))
    return "model.";
  if (w.contains("shared.weight") || w.contains("encoder.embed_tokens.weight")) return "";
  throw ConfigError(w.path().string() + ": no tensor 'model.shared.weight' (nor 'shared.weight'" +
                    "): not a " + config.get_string("model_type", "") + " checkpoint");
}

// The name the checkpoint saved the one token table under (tied tables are saved once).
inline std::string token_table(const SafeTensors& w, const std::string& p) {
  for (const char* name :
       {"shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"})
    if (w.contains(p + name)) return p + name;
  return p + "shared.weight";
}

// The LayerNorm `name` over d_model features.
inline transformer::NormSpec layer_norm(const std::string& name, std::int32_t d) {
  return transformer::norm(transformer::NormKind::layer_norm, name, d, kEps);
}

inline transformer::AttentionSpec attention(std::int32_t d, std::int32_t heads,
                                            const std::string& p, bool cross) {
  using transformer::linear;
  return {.heads = heads,
          .kv_heads = heads,
          .head_dim = d / heads,
          .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d / heads))),
          .cross = cross,
          .projections = {linear(p + ".q_proj", d, d, true), linear(p + ".k_proj", d, d, true),
                          linear(p + ".v_proj", d, d, true)},
          .output = linear(p + ".out_proj", d, d, true)};
}

// {encoder,decoder}.layers.N: self_attn, (encoder_attn,) fc1/fc2, each with its LayerNorm
// (self_attn_layer_norm, encoder_attn_layer_norm, final_layer_norm) before the sublayer
// (pre_norm) or after the residual sum.
inline void add_blocks(const JsonConfig& config, transformer::StackSpec& stack,
                       const std::string& stack_prefix, const std::string& name, Activation act,
                       bool pre_norm, bool decoder) {
  using namespace transformer;
  const std::int32_t d = stack.hidden;
  const std::int32_t layers = positive(config, name + "_layers");
  const std::int32_t heads = positive(config, name + "_attention_heads");
  const std::int32_t ffn = positive(config, name + "_ffn_dim");
  if (d % heads != 0)
    fail(config, name + "_attention_heads",
         std::to_string(heads) + " heads do not divide d_model " + std::to_string(d));
  for (std::int32_t l = 0; l < layers; ++l) {
    const std::string p = stack_prefix + "layers." + std::to_string(l);
    BlockSpec& b = stack.blocks.emplace_back();
    b.pre_norm = pre_norm;
    b.attention_norm = norm(NormKind::layer_norm, p + ".self_attn_layer_norm", d, kEps);
    b.attention = attention(d, heads, p + ".self_attn", false);
    if (decoder) {
      b.cross_norm = norm(NormKind::layer_norm, p + ".encoder_attn_layer_norm", d, kEps);
      b.cross_attention = attention(d, heads, p + ".encoder_attn", true);
    }
    b.mlp_norm = norm(NormKind::layer_norm, p + ".final_layer_norm", d, kEps);
    b.mlp = {.kind = MlpKind::plain,
             .activation = act,
             .in = {linear(p + ".fc1", ffn, d, true)},
             .out = linear(p + ".fc2", d, ffn, true)};
  }
}

// Both stacks over one token table (times sqrt(d_model) with scale_embedding) and their blocks;
// `positions(stack prefix)` gives each stack's positions. The head: the unscaled table when
// tie_word_embeddings (default true), else lm_head.weight; plus final_logits_bias when the
// checkpoint has it. A *Model checkpoint loads without a head.
template <typename Positions>
transformer::TransformerSpec read_spec(const JsonConfig& config, const SafeTensors& w,
                                       const Family& family, Positions positions) {
  using namespace transformer;
  expect_model_type(config, family.architecture);
  const std::int32_t d = positive(config, "d_model", "hidden_size");
  const std::int32_t vocab = positive(config, "vocab_size");
  const Activation act = activation(config, "activation_function", family.activation);
  if (act == Activation::none) fail(config, "activation_function", "an activation is required");
  const float scale = config.get_bool("scale_embedding", family.scale_embedding)
                          ? std::sqrt(static_cast<float>(d))
                          : 1.0f;
  const std::string p = prefix(config, w);
  const TensorSpec table{token_table(w, p), {vocab, d}};
  TransformerSpec s{.architecture = family.architecture,
                    .kind = ModelKind::encoder_decoder,
                    .positions_key = "max_position_embeddings",
                    .vocab_size = vocab,
                    .source_vocab_size = vocab};
  for (StackSpec* stack : {&s.encoder, &s.decoder}) {
    const bool decoder = stack == &s.decoder;
    const std::string name = decoder ? "decoder" : "encoder";
    stack->hidden = d;
    stack->embeddings.tokens = table;
    stack->embeddings.scale = scale;
    stack->embeddings.positions = positions(p + name + ".");
    add_blocks(config, *stack, p + name + ".", name, act, family.pre_norm, decoder);
    if (family.embedding_norm)
      stack->embeddings.norm = layer_norm(p + name + ".layernorm_embedding", d);
    if (family.final_norm) stack->final_norm = layer_norm(p + name + ".layer_norm", d);
  }
  if (!p.empty()) {
    s.head.output = lm_head(config, w, table, config.get_bool("tie_word_embeddings", true));
    if (w.contains("final_logits_bias")) s.head.output.bias = {"final_logits_bias", {1, vocab}};
  } else {
    s.head.absent_reason = "no tensor 'model.shared.weight' in " + w.path().filename().string() +
                           ": a " + family.architecture + " checkpoint without the lm head";
  }
  return s;
}

// BART's and mBART's learned positions (Bart/MBartLearnedPositionalEmbedding): a table of
// max_position_embeddings + 2 rows per stack, position t at row t + 2.
inline auto offset_positions(const JsonConfig& config) {
  const std::int32_t d = positive(config, "d_model", "hidden_size");
  const std::int32_t max_positions = positive(config, "max_position_embeddings", {}, 1024);
  return [=](const std::string& stack) {
    return transformer::PositionSpec{
        .kind = transformer::PositionKind::learned,
        .max_positions = max_positions,
        .table = {stack + "embed_positions.weight", {max_positions + 2, d}},
        .offset = 2};
  };
}

inline TokenId vocab_id(const JsonConfig& config, std::string_view key, TokenId fallback,
                        std::int32_t vocab) {
  const TokenId id = first_id(config, key, fallback);
  if (id < -1 || id >= vocab)
    fail(config, key,
         "token id " + std::to_string(id) + " is outside the vocabulary of " +
             std::to_string(vocab));
  return id;
}

// The `forced_bos_token_id` parameter: the first target token after the decoder start.
inline constexpr ParamSpec kForcedBosParam{
    .name = "forced_bos_token_id",
    .type = ParamType::integer,
    .default_value = "-1",
    .help =
        "the token every hypothesis starts with after decoder_start_token_id (HF's "
        "ForcedBOSTokenLogitsProcessor; mBART-50 and NLLB: the target language's token); a "
        "record's own target prefix replaces it. -1: the config's forced_bos_token_id "
        "(generation_config.json's first), none when absent"};

// pad/bos/eos (defaults 1, 0, 2), decoder_start_token_id (default `decoder_start`, -1: bos) and
// forced_bos_token_id, generation_config.json's values first.
inline transformer::ModelTokens read_tokens(const HfFolder& folder, const Params& params,
                                            std::int32_t vocab, TokenId decoder_start) {
  const JsonConfig& config = folder.config;
  const bool has_generation =
      std::filesystem::is_regular_file(folder.dir / "generation_config.json");
  const JsonConfig generation =
      has_generation ? JsonConfig::load(folder.dir / "generation_config.json") : config;
  auto id = [&](std::string_view key, TokenId fallback) {
    const TokenId from_config = vocab_id(config, key, fallback, vocab);
    return has_generation ? vocab_id(generation, key, from_config, vocab) : from_config;
  };
  transformer::ModelTokens t{
      .bos = id("bos_token_id", 0),
      .eos = id("eos_token_id", 2),
      .pad = id("pad_token_id", 1),
      .other_end_ids = other_ids(
          has_generation && generation.has("eos_token_id") ? generation : config, "eos_token_id")};
  t.decoder_start = id("decoder_start_token_id", decoder_start);
  if (t.decoder_start < 0) t.decoder_start = t.bos;
  t.forced_bos = id("forced_bos_token_id", -1);
  if (params.has("forced_bos_token_id") && params.get_int("forced_bos_token_id") >= 0) {
    const std::int64_t forced = params.get_int("forced_bos_token_id");
    if (forced >= vocab)
      throw ConfigError("model parameter forced_bos_token_id: " + std::to_string(forced) +
                        " is outside the vocabulary of " + std::to_string(vocab) + " tokens");
    t.forced_bos = static_cast<TokenId>(forced);
  }
  return t;
}

// The plugin's create(): `read_spec(config, weights)` over the folder, the tokens above.
template <typename ReadSpec>
Plugin* create(const Params& params, ReadSpec read_spec, TokenId decoder_start) {
  const HfFolder folder(params);
  auto spec = read_spec(folder.config, folder.weights);
  const auto tokens = read_tokens(folder, params, spec.vocab_size, decoder_start);
  return build_model(std::move(spec), folder, tokens, params);
}

}  // namespace masque::models::bart
