// Model plugin `t5`: Hugging Face T5ForConditionalGeneration folders (T5 v1.0 with a ReLU MLP,
// T5 v1.1 / Flan-T5 with a gated-GELU one, as `feed_forward_proj` says). Pre-norm blocks with
// T5LayerNorm (RMS, no bias, no mean), no absolute positions but a per-head relative-position
// bias that layer 0 of each stack owns and every layer adds (bidirectional buckets in the
// encoder, causal ones in the decoder), q.k not scaled, and a tied head that rescales the
// decoder output by d_model^-0.5 (HF's tie_word_embeddings). A config reader over the tier.
#include <cmath>
#include <string>
#include <vector>

#include "hf_plugin.hpp"

namespace masque::t5 {

using namespace transformer;
using models::fail;
using models::positive;

namespace {

// What every block of both stacks shares.
struct Dims {
  std::int32_t d, heads, d_kv, d_ff, buckets, max_distance;
  float eps;
  MlpKind mlp;
  Activation activation;
};

// T5Config: "ACT" or "gated-ACT"; "gated-gelu" means the tanh GELU (gelu_new).
void read_feed_forward(const JsonConfig& config, Dims& c) {
  const std::string proj = config.get_string("feed_forward_proj", "relu");
  const auto dash = proj.find('-');
  const bool gated = dash != std::string::npos;
  if (gated && (proj.substr(0, dash) != "gated" || proj.find('-', dash + 1) != std::string::npos))
    fail(config, "feed_forward_proj",
         "'" + proj + "' is not ACT or gated-ACT (e.g. 'relu', 'gated-gelu')");
  const std::string act = proj == "gated-gelu" ? "gelu_new" : proj.substr(gated ? dash + 1 : 0);
  try {
    c.activation = parse_activation(act);
  } catch (const ConfigError& e) {
    fail(config, "feed_forward_proj", "unsupported value '" + proj + "': " + e.what());
  }
  c.mlp = gated ? MlpKind::gated : MlpKind::plain;
}

Dims read_dims(const JsonConfig& config) {
  Dims c{};
  c.d = positive(config, "d_model", "hidden_size");
  c.heads = positive(config, "num_heads", "num_attention_heads");
  c.d_kv = positive(config, "d_kv");
  c.d_ff = positive(config, "d_ff");
  c.buckets = positive(config, "relative_attention_num_buckets", {}, 32);
  c.max_distance = positive(config, "relative_attention_max_distance", {}, 128);
  // The bucket function needs at least one exact bucket per direction, and a logarithmic range.
  if (c.buckets < 4)
    fail(config, "relative_attention_num_buckets",
         "must be at least 4, got " + std::to_string(c.buckets));
  if (c.max_distance <= c.buckets / 2)
    fail(config, "relative_attention_max_distance",
         "must exceed relative_attention_num_buckets / 2 (" + std::to_string(c.buckets / 2) +
             "), got " + std::to_string(c.max_distance));
  c.eps = models::positive_number(config, "layer_norm_epsilon", 1e-6);
  read_feed_forward(config, c);
  return c;
}

AttentionSpec attention(const Dims& c, const std::string& p, bool cross) {
  const std::int64_t inner = std::int64_t{c.heads} * c.d_kv;
  return {.heads = c.heads,
          .kv_heads = c.heads,
          .head_dim = c.d_kv,
          .scale = 1.0f,  // T5 folds 1/sqrt(d_kv) into the initialisation of q
          .cross = cross,
          .projections = {linear(p + ".q", inner, c.d, false), linear(p + ".k", inner, c.d, false),
                          linear(p + ".v", inner, c.d, false)},
          .output = linear(p + ".o", c.d, inner, false)};
}

MlpSpec mlp(const Dims& c, const std::string& p) {
  MlpSpec m{.kind = c.mlp, .activation = c.activation};
  if (c.mlp == MlpKind::gated)
    m.in = {linear(p + ".wi_0", c.d_ff, c.d, false), linear(p + ".wi_1", c.d_ff, c.d, false)};
  else
    m.in = {linear(p + ".wi", c.d_ff, c.d, false)};
  m.out = linear(p + ".wo", c.d, c.d_ff, false);
  return m;
}

NormSpec rms(const Dims& c, const std::string& name) {
  return norm(NormKind::rms_norm, name, c.d, c.eps, false);
}

// encoder.block.N.layer.{0: SelfAttention, 1: DenseReluDense}; the decoder's layer.1 is
// EncDecAttention and layer.2 the MLP. Layer 0's relative_attention_bias serves every block.
void add_blocks(StackSpec& stack, const Dims& c, const std::string& name, std::int32_t layers,
                bool decoder) {
  const RelativeBiasSpec bias{
      .kind = RelativeBiasKind::t5_buckets,
      .table = {name + ".block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                {c.buckets, c.heads}},
      .num_buckets = c.buckets,
      .max_distance = c.max_distance,
      .bidirectional = !decoder};
  for (std::int32_t l = 0; l < layers; ++l) {
    const std::string p = name + ".block." + std::to_string(l) + ".layer.";
    BlockSpec& b = stack.blocks.emplace_back();
    b.attention_norm = rms(c, p + "0.layer_norm");
    b.attention = attention(c, p + "0.SelfAttention", false);
    b.attention.relative_bias = bias;
    const std::string ff = p + (decoder ? "2" : "1");
    if (decoder) {
      b.cross_norm = rms(c, p + "1.layer_norm");
      b.cross_attention = attention(c, p + "1.EncDecAttention", true);
    }
    b.mlp_norm = rms(c, ff + ".layer_norm");
    b.mlp = mlp(c, ff + ".DenseReluDense");
  }
  stack.final_norm = rms(c, name + ".final_layer_norm");
}

// An id the decoder may be fed or produce: inside the vocabulary.
TokenId vocab_id(const JsonConfig& config, std::string_view key, TokenId id, std::int32_t vocab) {
  if (id < 0 || id >= vocab)
    fail(config, key,
         "token id " + std::to_string(id) + " is outside vocab_size " + std::to_string(vocab));
  return id;
}

}  // namespace

TransformerSpec read_spec(const JsonConfig& config, const SafeTensors& w) {
  models::expect_model_type(config, "t5");
  const Dims c = read_dims(config);
  const std::int32_t vocab = positive(config, "vocab_size");
  const std::int32_t encoder_layers = positive(config, "num_layers", "num_hidden_layers");
  const std::int32_t decoder_layers =
      config.has("num_decoder_layers") ? positive(config, "num_decoder_layers") : encoder_layers;
  // One table for both stacks (and a tied head): saved as shared.weight, or under a tied name.
  std::string table = "shared.weight";  // when none is there, the error names it
  for (const char* name :
       {"shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"})
    if (w.contains(name)) {
      table = name;
      break;
    }
  TransformerSpec s{.architecture = "t5",
                    .kind = ModelKind::encoder_decoder,
                    .positions_key = {},  // relative positions: no limit to name
                    .vocab_size = vocab,
                    .source_vocab_size = vocab};
  for (StackSpec* stack : {&s.encoder, &s.decoder}) {
    const bool decoder = stack == &s.decoder;
    stack->hidden = c.d;
    stack->embeddings.tokens = {table, {vocab, c.d}};
    add_blocks(*stack, c, decoder ? "decoder" : "encoder",
               decoder ? decoder_layers : encoder_layers, decoder);
  }
  const bool tied = config.get_bool("tie_word_embeddings", true);
  s.head.output = models::lm_head(config, w, s.decoder.embeddings.tokens, tied);
  // HF rescales the decoder output before a tied head (Mesh TensorFlow's convention).
  if (tied) s.head.logit_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d)));
  return s;
}

// pad and eos as HF's T5Config defaults them; the decoder starts from decoder_start_token_id,
// which T5 sets to the pad id.
ModelTokens read_tokens(const std::filesystem::path& dir, const JsonConfig& config,
                        std::int32_t vocab) {
  ModelTokens t = models::hf_tokens(dir, config);
  if (t.pad < 0) t.pad = 0;
  if (t.eos < 0) t.eos = 1;
  vocab_id(config, "pad_token_id", t.pad, vocab);
  vocab_id(config, "eos_token_id", t.eos, vocab);
  t.decoder_start = vocab_id(config, "decoder_start_token_id",
                             models::first_id(config, "decoder_start_token_id", t.pad), vocab);
  return t;
}

}  // namespace masque::t5

namespace {

masque::Plugin* create(const masque::Params& params) {
  const masque::models::HfFolder folder(params);
  auto spec = masque::t5::read_spec(folder.config, folder.weights);
  const auto tokens = masque::t5::read_tokens(folder.dir, folder.config, spec.vocab_size);
  return masque::models::build_model(std::move(spec), folder, tokens, params);
}

const masque::ParamSpec kParams[] = {
    masque::models::path_param(
        "model folder: config.json (model_type t5; d_model, d_kv, d_ff, num_heads, num_layers, "
        "num_decoder_layers, vocab_size, relative_attention_num_buckets and _max_distance, "
        "layer_norm_epsilon, feed_forward_proj 'relu' (T5 v1.0) or 'gated-gelu' (v1.1, Flan-T5) "
        "or any ACT / gated-ACT, tie_word_embeddings: a tied head rescales by d_model^-0.5; "
        "decoder_start_token_id, default the pad id) and model.safetensors (or "
        "model.safetensors.index.json and its shards) with T5ForConditionalGeneration tensor "
        "names (shared.weight, encoder.block.N.layer.0.SelfAttention.q.weight, ..., "
        "lm_head.weight); generation_config.json, when present, overrides bos/eos/pad. "
        "Runs with the seq2seq task (encoder-decoder route)"),
    masque::models::kMatmulDtypeParam,
    masque::models::kInt4GroupParam,
    masque::models::kKvCacheDtypeParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("t5", "1.0.0",
                    "T5 / T5 v1.1 / Flan-T5 encoder-decoder (Hugging Face "
                    "T5ForConditionalGeneration folder): relative position buckets, RMS norms",
                    "model_type=t5", kParams, masque::models::kInferenceOnly, create)
