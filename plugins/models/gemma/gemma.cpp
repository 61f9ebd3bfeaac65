// Model plugin `gemma`: Hugging Face Gemma, Gemma 2 and Gemma 3 text folders (GemmaForCausalLM,
// Gemma2ForCausalLM, Gemma3ForCausalLM, the text model of Gemma3ForConditionalGeneration, and
// their *ForSequenceClassification). The Llama network with Gemma's choices: RMSNorms that scale
// by (1 + w), token embeddings times sqrt(hidden_size), a gated GELU (tanh) MLP, attention
// scaled by query_pre_attn_scalar^-1/2 and a tied head; Gemma 2 and 3 add sandwich norms
// (post_attention_layernorm, post_feedforward_layernorm around each sub-layer's output) and
// alternating sliding windows; Gemma 2 soft-caps attention scores and logits; Gemma 3 norms q
// and k per head and rotates its sliding layers by rope_local_base_freq. A config reader over
// the Transformer tier.
#include "llama_family.hpp"

namespace {

using namespace masque;
using namespace masque::models;
using namespace masque::transformer;

enum class Generation { gemma1, gemma2, gemma3 };

// The config the network is read from: config.json, or its text_config (Gemma 3 multimodal).
JsonConfig text_config(const JsonConfig& config, Generation& generation) {
  const std::string type = config.get_string("model_type", "");
  if (type == "gemma")
    generation = Generation::gemma1;
  else if (type == "gemma2")
    generation = Generation::gemma2;
  else if (type == "gemma3_text" || type == "gemma3")
    generation = Generation::gemma3;
  else
    fail(config, "model_type", "expected gemma, gemma2, gemma3_text or gemma3, got '" + type + "'");
  if (type != "gemma3") return config;
  const auto it = config.json().find("text_config");
  if (it == config.json().end() || !it->is_object())
    fail(config, "text_config", "a gemma3 (multimodal) config needs its text_config object");
  return JsonConfig::parse(it->dump(), config.file());
}

// The prefix of the text model's tensors: Gemma*ForCausalLM's "model.", a bare model's "", a
// multimodal folder's "language_model.model." (or "model.language_model." since transformers 4.52).
std::string tensor_prefix(const SafeTensors& weights) {
  for (const char* p : {"model.", "", "language_model.model.", "model.language_model."})
    if (weights.contains(std::string(p) + "embed_tokens.weight")) return p;
  return "model.";
}

// Which layers slide: layer_types when given; else Gemma 2's even layers, or Gemma 3's all but
// every sliding_window_pattern-th.
std::vector<std::int32_t> gemma_windows(const JsonConfig& config, Generation generation,
                                        std::int32_t layers) {
  if (generation == Generation::gemma1) return {};
  const nlohmann::json& doc = config.json();
  if (doc.contains("layer_types") && !doc["layer_types"].is_null())
    return sliding_windows(config, layers, 0);
  const auto it = doc.find("sliding_window");
  if (it != doc.end() && it->is_null()) return {};
  const std::int32_t window = positive(config, "sliding_window", {}, 4096);
  const std::int32_t pattern =
      generation == Generation::gemma2 ? 2 : positive(config, "sliding_window_pattern", {}, 6);
  std::vector<std::int32_t> out(layers, 0);
  for (std::int32_t l = 0; l < layers; ++l)
    if ((l + 1) % pattern != 0) out[l] = window;
  return out;
}

// A soft-capping value: absent or null is none (Gemma 3), else positive.
float softcap(const JsonConfig& config, std::string_view key, double fallback) {
  const auto it = config.json().find(key);
  if (it == config.json().end()) return static_cast<float>(fallback);
  if (it->is_null()) return 0.0f;
  return positive_number(config, key, fallback);
}

// Gemma 3's RoPE: rope_theta (scaled by rope_scaling) in full layers, rope_local_base_freq in
// sliding ones; or the same as rope_parameters.{full_attention, sliding_attention}.
void gemma3_rope(const JsonConfig& config, PositionSpec& p) {
  const nlohmann::json& doc = config.json();
  const auto params = doc.find("rope_parameters");
  if (params == doc.end() || params->is_null()) {
    p.rope_theta = positive_number(config, "rope_theta", 1e6);
    p.rope_scaling = rope_scaling(config);
    p.local_rope_theta = positive_number(config, "rope_local_base_freq", 1e4);
    return;
  }
  auto theta = [&](const char* type, double fallback) {
    const auto t = params->find(type);
    if (t == params->end() || !t->is_object()) return fallback;
    const auto v = t->find("rope_theta");
    if (v == t->end()) return fallback;
    if (!v->is_number() || !(v->get<double>() > 0.0))
      fail(config, std::string("rope_parameters.") + type + ".rope_theta",
           "expected a positive number");
    return v->get<double>();
  };
  p.rope_theta = theta("full_attention", 1e6);
  p.local_rope_theta = theta("sliding_attention", 1e4);
  if (const auto full = params->find("full_attention"); full != params->end())
    p.rope_scaling = rope_scaling_of(config, *full, "rope_parameters.full_attention");
  if (const auto local = params->find("sliding_attention"); local != params->end())
    if (rope_scaling_of(config, *local, "rope_parameters.sliding_attention").kind !=
        RopeScaling::Kind::none)
      fail(config, "rope_parameters.sliding_attention",
           "scaled RoPE in sliding layers is not supported");
}

TransformerSpec gemma_spec(const JsonConfig& file_config, const SafeTensors& weights) {
  Generation g = Generation::gemma1;
  const JsonConfig config = text_config(file_config, g);
  const bool gemma1 = g == Generation::gemma1, gemma3 = g == Generation::gemma3;
  const std::int32_t vocab = positive(config, "vocab_size", {}, gemma3 ? 262208 : 256000);
  const std::int32_t c = positive(config, "hidden_size");
  const std::int32_t layers = positive(config, "num_hidden_layers");
  const std::int32_t heads = positive(config, "num_attention_heads");
  const std::int32_t kv_heads = positive(config, "num_key_value_heads", {}, heads);
  const std::int32_t head_dim = positive(config, "head_dim", {}, 256);
  const std::int32_t inner = positive(config, "intermediate_size");
  if (heads % kv_heads != 0) fail(config, "num_key_value_heads", "must divide num_attention_heads");
  if (head_dim % 2 != 0) fail(config, "head_dim", "RoPE needs an even head_dim");
  if (config.get_bool("use_bidirectional_attention", false))
    fail(config, "use_bidirectional_attention",
         "bidirectional Gemma 3 (EmbeddingGemma) is not supported");
  const float eps = positive_number(config, "rms_norm_eps", 1e-6);
  const bool bias = config.get_bool("attention_bias", false);
  // hidden_activation null (early Gemma configs): gelu_pytorch_tanh, as GemmaMLP decides.
  const bool act_given =
      config.has("hidden_activation") && !config.json()["hidden_activation"].is_null();
  const Activation act =
      act_given ? activation(config, "hidden_activation", "") : Activation::gelu_tanh;
  const float query_scalar =
      gemma1 ? static_cast<float>(head_dim) : positive_number(config, "query_pre_attn_scalar", 256);
  const float attention_cap = g == Generation::gemma2
                                  ? softcap(config, "attn_logit_softcapping", 50.0)
                                  : softcap(config, "attn_logit_softcapping", 0.0);
  const std::vector<std::int32_t> windows = gemma_windows(config, g, layers);

  const std::string prefix = weights.size() == 0 ? "model." : tensor_prefix(weights);
  const std::int64_t q = std::int64_t{heads} * head_dim, kv = std::int64_t{kv_heads} * head_dim;
  auto rms = [&](const std::string& name, std::int64_t dim) {
    NormSpec n = norm(NormKind::rms_norm, name, dim, eps);
    n.unit_offset = true;
    return n;
  };
  TransformerSpec s{.architecture = gemma1   ? "gemma"
                                    : gemma3 ? "gemma3"
                                             : "gemma2",
                    .positions_key = "max_position_embeddings",
                    .vocab_size = vocab};
  s.decoder.hidden = c;
  s.decoder.embeddings.tokens = {prefix + "embed_tokens.weight", {vocab, c}};
  s.decoder.embeddings.scale = std::sqrt(static_cast<float>(c));
  PositionSpec& p = s.decoder.embeddings.positions;
  p = {.kind = PositionKind::rotary,
       .max_positions = positive(config, "max_position_embeddings", {}, gemma3 ? 131072 : 8192)};
  if (gemma3)
    gemma3_rope(config, p);
  else
    p.rope_theta = positive_number(config, "rope_theta", 1e4);
  for (std::int32_t l = 0; l < layers; ++l) {
    const std::string b_ = prefix + "layers." + std::to_string(l) + ".";
    BlockSpec& b = s.decoder.blocks.emplace_back();
    const std::int32_t window = windows.empty() ? 0 : windows[l];
    b.attention_norm = rms(b_ + "input_layernorm", c);
    b.attention = {.heads = heads,
                   .kv_heads = kv_heads,
                   .head_dim = head_dim,
                   .scale = 1.0f / std::sqrt(query_scalar),
                   .projections = {linear(b_ + "self_attn.q_proj", q, c, bias),
                                   linear(b_ + "self_attn.k_proj", kv, c, bias),
                                   linear(b_ + "self_attn.v_proj", kv, c, bias)},
                   .output = linear(b_ + "self_attn.o_proj", c, q, bias),
                   .rotary = true,
                   .local_rotary = gemma3 && window > 0,
                   .window = window,
                   .softcap = attention_cap};
    if (gemma3) {
      b.attention.q_norm = rms(b_ + "self_attn.q_norm", head_dim);
      b.attention.k_norm = rms(b_ + "self_attn.k_norm", head_dim);
    }
    // Gemma 1 names the MLP's norm post_attention_layernorm; Gemma 2/3 use that name for the
    // attention output's norm and pre_feedforward_layernorm for the MLP's.
    if (gemma1) {
      b.mlp_norm = rms(b_ + "post_attention_layernorm", c);
    } else {
      b.attention_out_norm = rms(b_ + "post_attention_layernorm", c);
      b.mlp_norm = rms(b_ + "pre_feedforward_layernorm", c);
      b.mlp_out_norm = rms(b_ + "post_feedforward_layernorm", c);
    }
    b.mlp = {.kind = MlpKind::gated,
             .activation = act,
             .in = {linear(b_ + "mlp.gate_proj", inner, c, false),
                    linear(b_ + "mlp.up_proj", inner, c, false)},
             .out = linear(b_ + "mlp.down_proj", c, inner, false)};
  }
  s.decoder.final_norm = rms(prefix + "norm", c);
  if (is_sequence_classifier(file_config)) {
    s.head = score_head(file_config, c);
  } else {
    const bool tied =
        file_config.get_bool("tie_word_embeddings", config.get_bool("tie_word_embeddings", true));
    s.head.output = lm_head(config, weights, s.decoder.embeddings.tokens, tied);
    if (!gemma1)
      s.head.softcap = g == Generation::gemma2 ? softcap(config, "final_logit_softcapping", 30.0)
                                               : softcap(config, "final_logit_softcapping", 0.0);
  }
  return s;
}

Plugin* create(const Params& params) {
  const HfFolder folder(params);
  return build_model(gemma_spec(folder.config, folder.weights), folder,
                     hf_tokens(folder.dir, folder.config), params);
}

const ParamSpec kParams[] = {
    path_param(
        "model folder: config.json (model_type gemma, gemma2, gemma3_text, or gemma3 with its "
        "text_config) and model.safetensors (or model.safetensors.index.json and its shards) "
        "with Gemma*ForCausalLM tensor names (a multimodal folder's language_model tensors; its "
        "vision tower is not read); generation_config.json, when present, overrides bos/eos/pad. "
        "Sliding layers (layer_types, or Gemma 2's even layers, or all but every "
        "sliding_window_pattern-th of Gemma 3) see only keys ranked less than sliding_window "
        "below the query, under any mask; attn_logit_softcapping and final_logit_softcapping "
        "(Gemma 2: 50 and 30 unless null) cap scores and logits as c * tanh(x / c)"),
    kMatmulDtypeParam,
    kInt4GroupParam,
    kKvCacheDtypeParam,
    kInitSeedParam,
};

}  // namespace

MASQUE_MODEL_PLUGIN("gemma", "1.0.0",
                    "Gemma, Gemma 2 and Gemma 3 language models (Hugging Face Gemma*ForCausalLM "
                    "folders)",
                    "model_type=gemma;model_type=gemma2;model_type=gemma3_text;model_type=gemma3",
                    kParams, masque::models::kTrainableAttentionDropout, create)
