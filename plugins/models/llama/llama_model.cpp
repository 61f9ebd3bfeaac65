#include "llama_model.hpp"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "decoder_only.hpp"
#include "masque/attention.hpp"
#include "masque/error.hpp"
#include "masque/ops.hpp"

namespace masque::llama {

namespace {

// The KV cache of a batch being decoded, and the activations its steps reuse.
class State final : public DecodeState {
 public:
  explicit State(KvCache cache) : cache(std::move(cache)) {}
  std::int32_t rows() const override { return cache.rows(); }
  void select(std::span<const std::int32_t> rows) override { cache.select(rows); }
  std::unique_ptr<DecodeState> fork() const override {
    return std::make_unique<State>(cache.fork());
  }

  KvCache cache;
  Workspace workspace;
};

Workspace& thread_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

constexpr decoder_only::ModelNames kNames{"llama", "max_position_embeddings"};

}  // namespace

// ---- Block ----------------------------------------------------------------------------------

Block::Block(const SafeTensors& weights, const std::string& prefix, const LlamaConfig& config,
             const Rotary& rotary, std::int32_t index, DType compute)
    : index_(index), rotary_(rotary) {
  const LinearOptions options{.compute = compute};
  const std::int64_t c = config.hidden, q = config.q_width(), kv = config.kv_width();
  const std::int64_t inner = config.intermediate;
  auto weight = [&](const std::string& name, std::int64_t out, std::int64_t in) {
    return weights.get_f32(prefix + name + ".weight", {out, in});
  };
  auto biases = [&](bool present, std::initializer_list<std::pair<const char*, std::int64_t>> of) {
    std::vector<Tensor> out;
    if (present)
      for (const auto& [name, n] : of) out.push_back(weights.get_f32(prefix + name + ".bias", {n}));
    return out;
  };
  input_norm_ = {weights.get_f32(prefix + "input_layernorm.weight", {c}), config.rms_norm_eps};
  post_attention_norm_ = {weights.get_f32(prefix + "post_attention_layernorm.weight", {c}),
                          config.rms_norm_eps};

  const Tensor qkv[] = {weight("self_attn.q_proj", q, c), weight("self_attn.k_proj", kv, c),
                        weight("self_attn.v_proj", kv, c)};
  qkv_ = Linear::concat(
      qkv,
      biases(config.attention_bias,
             {{"self_attn.q_proj", q}, {"self_attn.k_proj", kv}, {"self_attn.v_proj", kv}}),
      options);
  const auto o_bias = biases(config.attention_bias, {{"self_attn.o_proj", c}});
  o_proj_ =
      Linear(weight("self_attn.o_proj", c, q), o_bias.empty() ? Tensor() : o_bias[0], options);

  const Tensor gate_up[] = {weight("mlp.gate_proj", inner, c), weight("mlp.up_proj", inner, c)};
  gate_up_ = Linear::concat(
      gate_up, biases(config.mlp_bias, {{"mlp.gate_proj", inner}, {"mlp.up_proj", inner}}),
      options);
  const auto down_bias = biases(config.mlp_bias, {{"mlp.down_proj", c}});
  down_ = Linear(weight("mlp.down_proj", c, inner), down_bias.empty() ? Tensor() : down_bias[0],
                 options);

  dims_ = {config.heads, config.kv_heads, config.head_dim,
           1.0f / std::sqrt(static_cast<float>(config.head_dim))};
}

void Block::forward(Tensor& x, Workspace& ws, const AttentionTarget& target) const {
  input_norm_.forward(x, ws.normed);
  qkv_.forward(ws.normed, ws.qkv);
  rotate(ws);
  attend(ws, target);
  o_proj_.forward(ws.context, ws.projected);
  add(x, ws.projected);
  post_attention_norm_.forward(x, ws.normed);
  gate_up_.forward(ws.normed, ws.gate_up);
  swiglu_fused(ws.gate_up, ws.inner);
  down_.forward(ws.inner, ws.projected);
  add(x, ws.projected);
}

void Block::rotate(Workspace& ws) const {
  const std::int64_t rows = ws.qkv.dim(0), width = ws.qkv.dim(1);
  rotary_.apply(ws.qkv.f32(), rows, width, dims_.heads, ws.positions);
  rotary_.apply(ws.qkv.f32() + std::int64_t{dims_.heads} * dims_.head_dim, rows, width,
                dims_.kv_heads, ws.positions);
}

void Block::attend(Workspace& ws, const AttentionTarget& target) const {
  const std::int64_t q_width = std::int64_t{dims_.heads} * dims_.head_dim;
  const std::int64_t kv_width = std::int64_t{dims_.kv_heads} * dims_.head_dim;
  // q, k, v are column ranges of the fused projection: no copies.
  const SeqView q = seq_view(ws.qkv, target.length, 0);
  const SeqView k = seq_view(ws.qkv, target.length, q_width);
  const SeqView v = seq_view(ws.qkv, target.length, q_width + kv_width);
  ws.context.resize({ws.qkv.dim(0), q_width});
  const MutableSeqView out = mutable_seq_view(ws.context, target.length);
  if (!target.cache) {
    attention(dims_, MaskView::self(*target.layout), q, k, v, out);
    return;
  }
  target.cache->write(index_, k, v);
  attention(dims_, target.cache->mask(), q, target.cache->keys(index_),
            target.cache->values(index_), out);
}

// ---- LlamaModel -----------------------------------------------------------------------------

LlamaModel::LlamaModel(const std::filesystem::path& dir, DType compute)
    : config_(LlamaConfig::load(dir)) {
  const SafeTensors weights = SafeTensors::open(dir);
  // LlamaForCausalLM checkpoints prefix the body with "model."; LlamaModel's do not.
  const std::string prefix = weights.contains("model.embed_tokens.weight") ? "model." : "";
  const std::int64_t c = config_.hidden;
  embed_tokens_.table = weights.get_f32(prefix + "embed_tokens.weight", {config_.vocab_size, c});
  const Rotary rotary(config_.head_dim, config_.rope_theta, config_.max_positions);
  for (std::int32_t l = 0; l < config_.layers; ++l)
    blocks_.emplace_back(weights, prefix + "layers." + std::to_string(l) + ".", config_, rotary, l,
                         compute);
  norm_ = {weights.get_f32(prefix + "norm.weight", {c}), config_.rms_norm_eps};
  if (config_.tie_word_embeddings) {
    head_ = Linear(embed_tokens_.table, {}, {.compute = compute});
  } else {
    // A separate head: tie_word_embeddings is false or absent (LlamaConfig's default).
    if (!weights.contains("lm_head.weight"))
      throw ConfigError((dir / "config.json").string() +
                        ": key 'tie_word_embeddings': false, but " + weights.path().string() +
                        " has no tensor 'lm_head.weight'");
    head_ = Linear(weights.get_f32("lm_head.weight", {config_.vocab_size, c}), {},
                   {.compute = compute});
  }

  info_.architecture = "llama";
  info_.kind = ModelKind::decoder_only;
  info_.vocab_size = info_.source_vocab_size = config_.vocab_size;
  info_.hidden_size = config_.hidden;
  info_.num_layers = config_.layers;
  info_.max_positions = config_.max_positions;
  info_.bos = config_.bos;
  info_.eos = config_.eos;
  info_.pad = config_.pad;
}

void LlamaModel::run(Workspace& ws, const AttentionTarget& target) const {
  embed_tokens_.forward(ws.ids, ws.hidden);
  if (ws.ids.empty()) return;
  for (const Block& block : blocks_) block.forward(ws.hidden, ws, target);
}

void LlamaModel::outputs(Workspace& ws, std::span<const std::int32_t> rows, Tensor* logits,
                         Tensor* hidden, bool reuse) const {
  if (!logits && !hidden) return;
  const Tensor& last = decoder_only::select_rows(ws.hidden, rows, ws.selected, kNames);
  Tensor& normed = hidden ? *hidden : ws.normed;
  norm_.forward(last, normed);
  // The head (vocab x hidden per row) dominates: it only sees the rows asked for.
  if (!logits) return;
  if (reuse)
    *logits = decoder_only::reusable_output(normed.numel() / normed.dim(-1), head_.out_features());
  head_.forward(normed, *logits);
}

ForwardResult LlamaModel::forward(const Batch& batch) const {
  Workspace& ws = thread_workspace();
  decoder_only::prepare_tokens(batch, info_, kNames, ws.ids, ws.positions);
  run(ws, {.layout = &batch.attention, .length = batch.length});
  ForwardResult result;
  outputs(ws, batch.output_rows, batch.want_logits ? &result.logits : nullptr,
          batch.want_hidden ? &result.hidden : nullptr, true);
  return result;
}

std::unique_ptr<DecodeState> LlamaModel::start(const Batch& batch, Tensor* logits) const {
  auto state = std::make_unique<State>(
      KvCache(config_.layers, config_.kv_heads, config_.head_dim, batch.batch));
  Workspace& ws = state->workspace;
  decoder_only::prepare_tokens(batch, info_, kNames, ws.ids, ws.positions);
  state->cache.begin(batch.attention, ws.positions);
  decoder_only::AppendGuard append(state->cache);
  run(ws, {.cache = &state->cache, .length = batch.length});
  append.end(true);
  if (logits) outputs(ws, batch.output_rows, logits, nullptr, false);
  return state;
}

void LlamaModel::step(DecodeState& s, const StepInput& input, Tensor& logits) const {
  auto* state = dynamic_cast<State*>(&s);
  if (!state || state->cache.layers() != config_.layers ||
      state->cache.width() != config_.kv_width())
    throw RuntimeError("llama: step() with a state that this model did not start");
  Workspace& ws = state->workspace;
  decoder_only::prepare_step(input, state->cache, info_, kNames, ws.ids, ws.positions);
  state->cache.begin_step(input.append ? TokenRole::content : TokenRole::query, ws.positions);
  decoder_only::AppendGuard append(state->cache);
  run(ws, {.cache = &state->cache, .length = 1});
  append.end(input.append);
  outputs(ws, {}, &logits, nullptr, false);
}

}  // namespace masque::llama
