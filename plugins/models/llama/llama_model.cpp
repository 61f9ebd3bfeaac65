#include "llama_model.hpp"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

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

// Where a token sits, for messages: "(row 1, column 3)" or "(step, row 1)".
std::string where(std::int64_t row, std::int64_t column) {
  return column < 0 ? "(step, row " + std::to_string(row) + ")"
                    : "(row " + std::to_string(row) + ", column " + std::to_string(column) + ")";
}

// RecordErrors for tokens the model cannot take; messages are only built on failure.
void check_token(TokenId id, const ModelInfo& info, std::int64_t row, std::int64_t column) {
  if (id < 0 || id >= info.vocab_size)
    throw RecordError("token id " + std::to_string(id) + " " + where(row, column) +
                      " is outside the model's vocabulary of " + std::to_string(info.vocab_size) +
                      " ids");
}

void check_position(std::int32_t position, const ModelInfo& info, std::int64_t row,
                    std::int64_t column) {
  if (position < 0 || position >= info.max_positions)
    throw RecordError("position " + std::to_string(position) + " " + where(row, column) +
                      " is outside the model's " + std::to_string(info.max_positions) +
                      " positions (max_position_embeddings)");
}

// Copies the batch's ids and positions into the workspace, checking every non-pad token.
void prepare_tokens(const Batch& batch, const ModelInfo& info, Workspace& ws) {
  const std::int64_t n = std::int64_t{batch.batch} * batch.length;
  if (batch.batch < 0 || batch.length < 0 || batch.ids.size() != static_cast<std::size_t>(n) ||
      batch.positions.size() != static_cast<std::size_t>(n) ||
      batch.attention.batch != batch.batch || batch.attention.length != batch.length ||
      batch.attention.role.size() != static_cast<std::size_t>(n))
    throw RuntimeError("llama: a " + std::to_string(batch.batch) + " x " +
                       std::to_string(batch.length) + " batch needs that many ids (" +
                       std::to_string(batch.ids.size()) + "), positions (" +
                       std::to_string(batch.positions.size()) + ") and layout entries");
  ws.ids.resize(n);
  ws.positions.resize(n);
  for (std::int64_t i = 0; i < n; ++i) {
    if (batch.attention.role[i] == TokenRole::pad) {
      ws.ids[i] = 0;
      ws.positions[i] = 0;
      continue;
    }
    check_token(batch.ids[i], info, i / batch.length, i % batch.length);
    check_position(batch.positions[i], info, i / batch.length, i % batch.length);
    ws.ids[i] = batch.ids[i];
    ws.positions[i] = batch.positions[i];
  }
}

// One token per row for a step: ids as given, positions as given or each row's next one.
void prepare_step(const StepInput& input, const KvCache& cache, const ModelInfo& info,
                  Workspace& ws) {
  const auto rows = static_cast<std::size_t>(cache.rows());
  if (input.tokens.size() != rows || (!input.positions.empty() && input.positions.size() != rows))
    throw RuntimeError("llama: a step takes one token (and position) per row: " +
                       std::to_string(input.tokens.size()) + " tokens, " +
                       std::to_string(input.positions.size()) + " positions for " +
                       std::to_string(rows) + " rows");
  ws.ids.resize(rows);
  ws.positions.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const auto row = static_cast<std::int32_t>(r);
    ws.ids[r] = input.tokens[r];
    ws.positions[r] = input.positions.empty() ? cache.next_position(row) : input.positions[r];
    check_token(ws.ids[r], info, row, -1);
    check_position(ws.positions[r], info, row, -1);
  }
}

// `rows` of x (all of x when empty), gathered into `out` if needed.
const Tensor& select_rows(const Tensor& x, std::span<const std::int32_t> rows, Tensor& out) {
  if (rows.empty()) return x;
  const std::int64_t width = x.dim(-1), total = x.numel() / width;
  out.resize({static_cast<std::int64_t>(rows.size()), width});
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= total)
      throw RuntimeError("llama: output row " + std::to_string(rows[i]) + " of a batch of " +
                         std::to_string(total) + " tokens");
    std::memcpy(out.f32() + i * width, x.f32() + rows[i] * width, sizeof(float) * width);
  }
  return out;
}

// Ends the append in progress unless it completed (an exception leaves the cache usable).
class AppendGuard {
 public:
  explicit AppendGuard(KvCache& cache) : cache_(cache) {}
  ~AppendGuard() {
    if (!done_) cache_.end(false);
  }
  AppendGuard(const AppendGuard&) = delete;
  AppendGuard& operator=(const AppendGuard&) = delete;
  void end(bool keep) {
    cache_.end(keep);
    done_ = true;
  }

 private:
  KvCache& cache_;
  bool done_ = false;
};

}  // namespace

// ---- Block ----------------------------------------------------------------------------------

Block::Block(const SafeTensors& weights, const std::string& prefix, const LlamaConfig& config,
             const Rotary& rotary, std::int32_t index)
    : index_(index), rotary_(rotary) {
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
      qkv, biases(config.attention_bias,
                  {{"self_attn.q_proj", q}, {"self_attn.k_proj", kv}, {"self_attn.v_proj", kv}}));
  const auto o_bias = biases(config.attention_bias, {{"self_attn.o_proj", c}});
  o_proj_ = Linear(weight("self_attn.o_proj", c, q), o_bias.empty() ? Tensor() : o_bias[0]);

  const Tensor gate_up[] = {weight("mlp.gate_proj", inner, c), weight("mlp.up_proj", inner, c)};
  gate_up_ = Linear::concat(
      gate_up, biases(config.mlp_bias, {{"mlp.gate_proj", inner}, {"mlp.up_proj", inner}}));
  const auto down_bias = biases(config.mlp_bias, {{"mlp.down_proj", c}});
  down_ = Linear(weight("mlp.down_proj", c, inner), down_bias.empty() ? Tensor() : down_bias[0]);

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

LlamaModel::LlamaModel(const std::filesystem::path& dir) : config_(LlamaConfig::load(dir)) {
  const SafeTensors weights = SafeTensors::open(dir);
  // LlamaForCausalLM checkpoints prefix the body with "model."; LlamaModel's do not.
  const std::string prefix = weights.contains("model.embed_tokens.weight") ? "model." : "";
  const std::int64_t c = config_.hidden;
  embed_tokens_.table = weights.get_f32(prefix + "embed_tokens.weight", {config_.vocab_size, c});
  const Rotary rotary(config_.head_dim, config_.rope_theta, config_.max_positions);
  for (std::int32_t l = 0; l < config_.layers; ++l)
    blocks_.emplace_back(weights, prefix + "layers." + std::to_string(l) + ".", config_, rotary, l);
  norm_ = {weights.get_f32(prefix + "norm.weight", {c}), config_.rms_norm_eps};
  if (config_.tie_word_embeddings) {
    head_ = Linear(embed_tokens_.table);
  } else {
    // A separate head: tie_word_embeddings is false or absent (LlamaConfig's default).
    if (!weights.contains("lm_head.weight"))
      throw ConfigError((dir / "config.json").string() +
                        ": key 'tie_word_embeddings': false, but " + weights.path().string() +
                        " has no tensor 'lm_head.weight'");
    head_ = Linear(weights.get_f32("lm_head.weight", {config_.vocab_size, c}));
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
                         Tensor* hidden) const {
  if (!logits && !hidden) return;
  const Tensor& last = select_rows(ws.hidden, rows, ws.selected);
  Tensor& normed = hidden ? *hidden : ws.normed;
  norm_.forward(last, normed);
  // The head (vocab x hidden per row) dominates: it only sees the rows asked for.
  if (logits) head_.forward(normed, *logits);
}

ForwardResult LlamaModel::forward(const Batch& batch) const {
  Workspace& ws = thread_workspace();
  prepare_tokens(batch, info_, ws);
  run(ws, {.layout = &batch.attention, .length = batch.length});
  ForwardResult result;
  outputs(ws, batch.output_rows, batch.want_logits ? &result.logits : nullptr,
          batch.want_hidden ? &result.hidden : nullptr);
  return result;
}

std::unique_ptr<DecodeState> LlamaModel::start(const Batch& batch, Tensor* logits) const {
  auto state = std::make_unique<State>(
      KvCache(config_.layers, config_.kv_heads, config_.head_dim, batch.batch));
  Workspace& ws = state->workspace;
  prepare_tokens(batch, info_, ws);
  state->cache.begin(batch.attention, ws.positions);
  AppendGuard append(state->cache);
  run(ws, {.cache = &state->cache, .length = batch.length});
  append.end(true);
  if (logits) outputs(ws, batch.output_rows, logits, nullptr);
  return state;
}

void LlamaModel::step(DecodeState& s, const StepInput& input, Tensor& logits) const {
  auto* state = dynamic_cast<State*>(&s);
  if (!state || state->cache.layers() != config_.layers ||
      state->cache.width() != config_.kv_width())
    throw RuntimeError("llama: step() with a state that this model did not start");
  Workspace& ws = state->workspace;
  prepare_step(input, state->cache, info_, ws);
  state->cache.begin_step(input.append ? TokenRole::content : TokenRole::query, ws.positions);
  AppendGuard append(state->cache);
  run(ws, {.cache = &state->cache, .length = 1});
  append.end(input.append);
  outputs(ws, {}, &logits, nullptr);
}

}  // namespace masque::llama
