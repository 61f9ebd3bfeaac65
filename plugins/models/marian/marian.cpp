// Model plugin `marian`: Hugging Face MarianMTModel folders (the OPUS-MT translation models).
// Post-norm LayerNorm blocks with biases everywhere, sinusoidal positions in Marian's layout
// (sines in the first half, cosines in the second, w_j = 10000^(-j / (d/2))), token embeddings
// times sqrt(d_model) with scale_embedding, shared (or separate) token tables, a head tied to the
// decoder's table plus final_logits_bias. A config reader over the Transformer tier.
#include <cmath>
#include <string>

#include "hf_plugin.hpp"

namespace masque::marian {

using namespace transformer;
using models::fail;
using models::positive;

namespace {

struct StackDims {
  std::int32_t layers, heads, ffn;
};

// HF MarianConfig leaves decoder_vocab_size null (= vocab_size) in many configs; has() is
// false for null.
std::int32_t decoder_vocab(const JsonConfig& config, std::int32_t vocab) {
  return config.has("decoder_vocab_size") ? positive(config, "decoder_vocab_size") : vocab;
}

StackDims read_stack(const JsonConfig& config, const std::string& name, std::int32_t d) {
  const StackDims s{positive(config, name + "_layers"), positive(config, name + "_attention_heads"),
                    positive(config, name + "_ffn_dim")};
  if (d % s.heads != 0)
    fail(config, name + "_attention_heads",
         std::to_string(s.heads) + " heads do not divide d_model " + std::to_string(d));
  return s;
}

AttentionSpec attention(std::int32_t d, std::int32_t heads, const std::string& p, bool cross) {
  return {.heads = heads,
          .kv_heads = heads,
          .head_dim = d / heads,
          .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d / heads))),
          .cross = cross,
          .projections = {linear(p + ".q_proj", d, d, true), linear(p + ".k_proj", d, d, true),
                          linear(p + ".v_proj", d, d, true)},
          .output = linear(p + ".out_proj", d, d, true)};
}

// model.{encoder,decoder}.layers.N: self_attn, (encoder_attn,) fc1/fc2, each followed by its
// LayerNorm after the residual sum (MarianEncoderLayer / MarianDecoderLayer).
void add_blocks(StackSpec& stack, std::int32_t d, const StackDims& dims, Activation act,
                const std::string& name, bool decoder) {
  constexpr float kEps = 1e-5f;  // nn.LayerNorm's default
  for (std::int32_t l = 0; l < dims.layers; ++l) {
    const std::string p = "model." + name + ".layers." + std::to_string(l);
    BlockSpec& b = stack.blocks.emplace_back();
    b.pre_norm = false;
    b.attention_norm = norm(NormKind::layer_norm, p + ".self_attn_layer_norm", d, kEps);
    b.attention = attention(d, dims.heads, p + ".self_attn", false);
    if (decoder) {
      b.cross_norm = norm(NormKind::layer_norm, p + ".encoder_attn_layer_norm", d, kEps);
      b.cross_attention = attention(d, dims.heads, p + ".encoder_attn", true);
    }
    b.mlp_norm = norm(NormKind::layer_norm, p + ".final_layer_norm", d, kEps);
    b.mlp = {.kind = MlpKind::plain,
             .activation = act,
             .in = {linear(p + ".fc1", dims.ffn, d, true)},
             .out = linear(p + ".fc2", d, dims.ffn, true)};
  }
}

// MarianSinusoidalPositionalEmbedding: column j < d/2 is sin(t w_j), column d/2 + j cos(t w_j).
PositionSpec positions(const JsonConfig& config, std::int32_t d) {
  if (d % 2 != 0) fail(config, "d_model", "sinusoidal positions need an even d_model");
  return {.kind = PositionKind::sinusoidal,
          .max_positions = positive(config, "max_position_embeddings", {}, 1024),
          .layout = SinusoidLayout::concat_sin_cos,
          .max_timescale = 10000.0,
          .denominator_half_minus_one = false};
}

// The first of `names` the checkpoint holds (tied tables are saved under one of their names),
// else the first (the error names it).
std::string first_present(const SafeTensors& w, std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (w.contains(name)) return name;
  return *names.begin();
}

TokenId vocab_id(const JsonConfig& config, std::string_view key, TokenId fallback,
                 std::int32_t vocab) {
  const TokenId id = models::first_id(config, key, fallback);
  if (id < 0 || id >= vocab)
    fail(config, key,
         "token id " + std::to_string(id) + " is outside the vocabulary of " +
             std::to_string(vocab));
  return id;
}

}  // namespace

TransformerSpec read_spec(const JsonConfig& config, const SafeTensors& w) {
  models::expect_model_type(config, "marian");
  if (config.get_bool("normalize_before", false))
    fail(config, "normalize_before", "true is not supported: MarianMTModel blocks are post-norm");
  const std::int32_t d = positive(config, "d_model", "hidden_size");
  const std::int32_t vocab = positive(config, "vocab_size");
  const bool shared = config.get_bool("share_encoder_decoder_embeddings", true);
  const std::int32_t target_vocab = shared ? vocab : decoder_vocab(config, vocab);
  const Activation act = models::activation(config, "activation_function", "gelu");
  if (act == Activation::none) fail(config, "activation_function", "an activation is required");
  const float scale =
      config.get_bool("scale_embedding", false) ? std::sqrt(static_cast<float>(d)) : 1.0f;

  const std::string source_table =
      shared ? first_present(w, {"model.shared.weight", "model.encoder.embed_tokens.weight",
                                 "model.decoder.embed_tokens.weight"})
             : "model.encoder.embed_tokens.weight";
  const std::string target_table = shared ? source_table : "model.decoder.embed_tokens.weight";
  TransformerSpec s{.architecture = "marian",
                    .kind = ModelKind::encoder_decoder,
                    .positions_key = "max_position_embeddings",
                    .vocab_size = target_vocab,
                    .source_vocab_size = vocab};
  for (StackSpec* stack : {&s.encoder, &s.decoder}) {
    const bool decoder = stack == &s.decoder;
    const std::string name = decoder ? "decoder" : "encoder";
    stack->hidden = d;
    stack->embeddings.tokens = {decoder ? target_table : source_table,
                                {decoder ? target_vocab : vocab, d}};
    stack->embeddings.scale = scale;
    stack->embeddings.positions = positions(config, d);
    add_blocks(*stack, d, read_stack(config, name, d), act, name, decoder);
  }
  // lm_head(x) + final_logits_bias; the head is the unscaled decoder table when tied. A
  // checkpoint without the bias buffer loads it as zeros in HF: no bias here.
  s.head.output = models::lm_head(config, w, s.decoder.embeddings.tokens,
                                  config.get_bool("tie_word_embeddings", true));
  if (w.contains("final_logits_bias"))
    s.head.output.bias = {"final_logits_bias", {1, target_vocab}};
  return s;
}

// MarianConfig's defaults: pad 58100, eos 0, and decoding starts from the pad id.
ModelTokens read_tokens(const JsonConfig& config, const TransformerSpec& spec) {
  ModelTokens t;
  const std::int32_t both = std::min(spec.vocab_size, spec.source_vocab_size);
  t.pad = vocab_id(config, "pad_token_id", 58100, both);
  t.eos = vocab_id(config, "eos_token_id", 0, spec.vocab_size);
  t.decoder_start = vocab_id(config, "decoder_start_token_id", t.pad, spec.vocab_size);
  return t;
}

}  // namespace masque::marian

namespace {

masque::Plugin* create(const masque::Params& params) {
  const masque::models::HfFolder folder(params);
  auto spec = masque::marian::read_spec(folder.config, folder.weights);
  const auto tokens = masque::marian::read_tokens(folder.config, spec);
  return masque::models::build_model(std::move(spec), folder, tokens, params);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "model folder: config.json (model_type marian; d_model, encoder_/decoder_layers, "
        "_attention_heads, _ffn_dim, vocab_size, decoder_vocab_size when "
        "share_encoder_decoder_embeddings is false, max_position_embeddings (default 1024), "
        "scale_embedding (default false), activation_function (default gelu; OPUS-MT: swish), "
        "tie_word_embeddings (default true), pad/eos/decoder_start_token_id (defaults 58100, 0, "
        "pad)) and model.safetensors (or model.safetensors.index.json and its shards) with "
        "MarianMTModel tensor names (model.shared.weight, model.encoder.layers.N.self_attn."
        "q_proj.weight, ..., final_logits_bias). Runs with the seq2seq task on ids (vocab.json's, "
        "which no tokenizer plugin maps source.spm / target.spm pieces to yet). Unlike HF's "
        "generate(), no bad_words_ids are applied: the pad id can be generated"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("marian", "1.0.0",
                    "Marian / OPUS-MT translation encoder-decoder (Hugging Face MarianMTModel "
                    "folder): sinusoidal positions, post-norm blocks, final_logits_bias",
                    "model_type=marian", kParams, masque::models::kInferenceOnly, create)
