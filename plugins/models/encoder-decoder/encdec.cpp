// Model plugin `encoder-decoder`: Transformer encoder-decoders (OpenNMT / CTranslate2
// "TransformerBase", Marian, fairseq, BART-like) whose architecture config.json describes
// (README.md lists the keys), with Hugging Face BART-style tensor names. Every choice that
// differs between them is a setting read into the TransformerSpec here, not a code path.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>

#include "hf_plugin.hpp"
#include "masque/threading.hpp"

namespace masque::encdec {

using namespace transformer;
using models::fail;

namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<std::int32_t>::max();

std::int32_t int_in(const JsonConfig& config, std::string_view key, std::int64_t lo,
                    std::int64_t hi, std::int64_t value) {
  if (value < lo || value > hi)
    fail(config, key,
         "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
             std::to_string(value));
  return static_cast<std::int32_t>(value);
}

std::int32_t positive(const JsonConfig& config, std::string_view key, std::int64_t fallback = 0) {
  return int_in(config, key, 1, kIntMax,
                fallback > 0 ? config.get_int(key, fallback) : config.get_int(key));
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

// A token id (first of a list) that must be inside the vocabulary; -1 when optional and absent.
TokenId token_id(const JsonConfig& config, std::string_view key, std::int32_t vocab,
                 bool required = true) {
  if (!required && !config.has(key)) return -1;
  const auto ids = config.get_int_list(key);
  if (ids.empty()) fail(config, key, "no token id given");
  return int_in(config, key, 0, vocab - 1, ids.front());
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

PositionSpec read_positions(const JsonConfig& config, std::int32_t d_model) {
  PositionSpec p;
  const bool learned = choice(config, "position_encoding", config.get_string("position_encoding"),
                              {"sinusoidal", "learned"}) == 1;
  p.kind = learned ? PositionKind::learned : PositionKind::sinusoidal;
  if (config.has("position_encoding_learned") &&
      config.get_bool("position_encoding_learned") != learned)
    fail(config, "position_encoding_learned", "contradicts position_encoding");
  p.max_positions = positive(config, "max_position_embeddings", 1024);
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
  p.max_timescale = models::positive_number(config, "position_encoding_max_timescale", 10000.0);
  p.denominator_half_minus_one =
      choice(config, "position_encoding_timescale_denominator",
             config.get_string("position_encoding_timescale_denominator", "half_minus_one"),
             {"half_minus_one", "half"}) == 0;
  if (d_model % 2 != 0) fail(config, "d_model", "sinusoidal positions need an even d_model");
  if (p.denominator_half_minus_one && d_model < 4)
    fail(config, "d_model", "sinusoidal positions with half_minus_one need d_model >= 4");
  return p;
}

// The settings every layer of both stacks shares.
struct Layout {
  std::int32_t d, heads, head_dim, ffn;
  float scale, eps;
  bool pre_norm, attention_bias, ffn_bias;
  Activation activation;
};

AttentionSpec attention(const Layout& c, const std::string& p, bool cross) {
  const std::int64_t w = std::int64_t{c.heads} * c.head_dim;
  return {.heads = c.heads,
          .kv_heads = c.heads,
          .head_dim = c.head_dim,
          .scale = c.scale,
          .cross = cross,
          .projections = {linear(p + ".q_proj", w, c.d, c.attention_bias),
                          linear(p + ".k_proj", w, c.d, c.attention_bias),
                          linear(p + ".v_proj", w, c.d, c.attention_bias)},
          .output = linear(p + ".out_proj", c.d, w, c.attention_bias)};
}

void add_layers(StackSpec& stack, const Layout& c, const char* name, std::int32_t layers,
                bool decoder) {
  for (std::int32_t l = 0; l < layers; ++l) {
    const std::string p = std::string(name) + ".layers." + std::to_string(l);
    BlockSpec& b = stack.blocks.emplace_back();
    b.pre_norm = c.pre_norm;
    b.attention_norm = norm(NormKind::layer_norm, p + ".self_attn_layer_norm", c.d, c.eps);
    b.attention = attention(c, p + ".self_attn", false);
    if (decoder) {
      b.cross_norm = norm(NormKind::layer_norm, p + ".encoder_attn_layer_norm", c.d, c.eps);
      b.cross_attention = attention(c, p + ".encoder_attn", true);
    }
    b.mlp_norm = norm(NormKind::layer_norm, p + ".final_layer_norm", c.d, c.eps);
    b.mlp = {.kind = MlpKind::plain,
             .activation = c.activation,
             .in = {linear(p + ".fc1", c.ffn, c.d, c.ffn_bias)},
             .out = linear(p + ".fc2", c.d, c.ffn, c.ffn_bias)};
  }
}

}  // namespace

TransformerSpec read_spec(const JsonConfig& config, const SafeTensors& w, ModelTokens& tokens) {
  check_informative(config);
  const std::int32_t encoder_layers =
      int_in(config, "num_encoder_layers", 0, kIntMax, config.get_int("num_encoder_layers"));
  const std::int32_t decoder_layers = positive(config, "num_decoder_layers");
  Layout c{};
  c.d = positive(config, "d_model");
  c.heads = positive(config, "num_heads");
  if (!config.has("head_dim") && c.d % c.heads != 0)
    fail(config, "num_heads",
         std::to_string(c.heads) + " heads do not divide d_model " + std::to_string(c.d) +
             " (give head_dim)");
  c.head_dim = positive(config, "head_dim", c.d / c.heads);
  c.ffn = positive(config, "ffn_dim");
  const std::int32_t source_vocab = positive(config, "source_vocab_size");
  const std::int32_t target_vocab = positive(config, "target_vocab_size");
  c.activation = models::activation(config, "activation", "");
  if (c.activation == Activation::none) fail(config, "activation", "an activation is required");
  c.pre_norm = config.get_bool("pre_norm");
  const bool encoder_final = config.get_bool("encoder_final_layer_norm", c.pre_norm);
  const bool decoder_final = config.get_bool("decoder_final_layer_norm", c.pre_norm);
  c.eps = models::positive_number(config, "layer_norm_eps", 1e-5);
  c.scale = models::positive_number(config, "attention_scale",
                                    1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  c.attention_bias = config.get_bool("attention_bias", true);
  c.ffn_bias = config.get_bool("ffn_bias", true);
  const bool output_bias = config.get_bool("output_projection_bias", false);
  const float embedding_scale =
      models::positive_number(config, "embedding_scale", std::sqrt(static_cast<double>(c.d)));
  const bool shared = config.get_bool("shared_embeddings", false);
  if (shared && source_vocab != target_vocab)
    fail(config, "shared_embeddings",
         "a shared table needs source_vocab_size == target_vocab_size (" +
             std::to_string(source_vocab) + " vs " + std::to_string(target_vocab) + ")");
  const bool tie_output = config.get_bool("tie_output_projection", false);
  const PositionSpec positions = read_positions(config, c.d);

  tokens.decoder_start = token_id(config, "decoder_start_token_id", target_vocab);
  tokens.eos = token_id(config, "eos_token_id", target_vocab);
  tokens.pad = token_id(config, "pad_token_id", std::min(source_vocab, target_vocab));
  tokens.bos = token_id(config, "bos_token_id", target_vocab, false);
  token_id(config, "source_unk_token_id", source_vocab, false);
  token_id(config, "target_unk_token_id", target_vocab, false);

  // Shared embeddings: the first present of shared.weight (BART), decoder.* and encoder.*.
  std::string target_table = "decoder.embed_tokens.weight";
  if (shared) {
    target_table = "shared.weight";  // when missing, the error names it
    for (const char* name :
         {"shared.weight", "decoder.embed_tokens.weight", "encoder.embed_tokens.weight"})
      if (w.contains(name)) {
        target_table = name;
        break;
      }
  }
  TransformerSpec s{.architecture = "encoder-decoder",
                    .kind = ModelKind::encoder_decoder,
                    .positions_key = "max_position_embeddings",
                    .vocab_size = target_vocab,
                    .source_vocab_size = source_vocab};
  for (StackSpec* stack : {&s.encoder, &s.decoder}) {
    const bool decoder = stack == &s.decoder;
    const char* name = decoder ? "decoder" : "encoder";
    stack->hidden = c.d;
    stack->embeddings.tokens = {decoder || shared ? target_table : "encoder.embed_tokens.weight",
                                {decoder ? target_vocab : source_vocab, c.d}};
    stack->embeddings.scale = embedding_scale;
    stack->embeddings.positions = positions;
    if (positions.kind == PositionKind::learned)
      stack->embeddings.positions.table = {
          std::string(name) + ".embed_positions.weight",
          {std::int64_t{positions.max_positions} + positions.offset, c.d}};
    add_layers(*stack, c, name, decoder ? decoder_layers : encoder_layers, decoder);
    if (decoder ? decoder_final : encoder_final)
      stack->final_norm = norm(NormKind::layer_norm, std::string(name) + ".layer_norm", c.d, c.eps);
  }
  // Tied: the unscaled target embeddings. The bias: lm_head.bias, or BART/Marian's
  // final_logits_bias buffer [1, vocab].
  s.head.output.weight = {tie_output ? target_table : "lm_head.weight", {target_vocab, c.d}};
  if (output_bias)
    s.head.output.bias = !w.contains("lm_head.bias") && w.contains("final_logits_bias")
                             ? TensorSpec{"final_logits_bias", {1, target_vocab}}
                             : TensorSpec{"lm_head.bias", {target_vocab}};
  return s;
}

}  // namespace masque::encdec

namespace {

masque::Plugin* create(const masque::Params& params) {
  // Packing a weight is one OpenMP region; with tiny weights, fork/join (and waiting for a busy
  // second core) costs far more than the copy: ~0.5 s of the aren model's load with 2 threads.
  const masque::ThreadScope one_thread(1);
  const masque::models::HfFolder folder(params);
  masque::transformer::ModelTokens tokens;
  auto spec = masque::encdec::read_spec(folder.config, folder.weights, tokens);
  return masque::models::build_model(std::move(spec), folder, tokens, params);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "the model folder: config.json (architecture and special tokens, keys listed in the "
        "plugin's README.md) and model.safetensors (or a sharded model.safetensors.index.json) "
        "with Hugging Face BART-style tensor names (encoder.layers.N.self_attn.q_proj.weight, ..., "
        "lm_head.weight)"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
    masque::models::kInitSeedParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("encoder-decoder", "1.1.0",
                    "Transformer encoder-decoder (translation, transliteration): encodes a source "
                    "once, then decodes step by step with KV caches",
                    "architecture=transformer-encoder-decoder", kParams,
                    masque::models::kTrainableFairseqDropout, create)
