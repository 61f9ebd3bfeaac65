#include "gpt2_model.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "masque/attention.hpp"
#include "masque/error.hpp"
#include "masque/ops.hpp"

namespace masque::gpt2 {

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

// A [rows, width] tensor for forward()'s logits in memory this thread reuses from call to call,
// unless a caller still holds the previous logits. Scoring batches have hundreds of MB of
// logits: a fresh buffer each time costs a page fault per 4 KiB (a tenth of a bf16 batch).
Tensor reusable_output(std::int64_t rows, std::int64_t width) {
  thread_local std::shared_ptr<void> buffer;
  thread_local std::size_t capacity = 0;
  const std::size_t bytes = static_cast<std::size_t>(rows * width) * sizeof(float);
  if (!buffer || buffer.use_count() > 1 || capacity < bytes) {
    buffer.reset();  // the old buffer goes first: peak memory stays one buffer
    const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, rounded);
    if (!data) throw std::bad_alloc();
    buffer.reset(data, std::free);
    capacity = rounded;
  }
  return Tensor::view(buffer.get(), {rows, width}, DType::f32, buffer);
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
                      " positions (n_positions)");
}

// Copies the batch's ids and positions into the workspace, checking every non-pad token.
void prepare_tokens(const Batch& batch, const ModelInfo& info, Workspace& ws) {
  const std::int64_t n = std::int64_t{batch.batch} * batch.length;
  if (batch.batch < 0 || batch.length < 0 || batch.ids.size() != static_cast<std::size_t>(n) ||
      batch.positions.size() != static_cast<std::size_t>(n) ||
      batch.attention.batch != batch.batch || batch.attention.length != batch.length ||
      batch.attention.role.size() != static_cast<std::size_t>(n))
    throw RuntimeError("gpt2: a " + std::to_string(batch.batch) + " x " +
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
    throw RuntimeError("gpt2: a step takes one token (and position) per row: " +
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
      throw RuntimeError("gpt2: output row " + std::to_string(rows[i]) + " of a batch of " +
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

Block::Block(const SafeTensors& weights, const std::string& prefix, const Gpt2Config& config,
             std::int32_t index, DType compute)
    : index_(index) {
  const std::int64_t c = config.hidden, inner = config.inner;
  auto vector = [&](const char* name, std::int64_t n) {
    return weights.get_f32(prefix + name, {n});
  };
  // HF Conv1D stores [in, out].
  auto conv1d = [&](const char* name, std::int64_t in, std::int64_t out, Activation act) {
    return Linear(weights.get_f32(prefix + name + ".weight", {in, out}),
                  vector((std::string(name) + ".bias").c_str(), out),
                  {.activation = act, .layout = WeightLayout::in_out, .compute = compute});
  };
  ln_1_ = {vector("ln_1.weight", c), vector("ln_1.bias", c), config.layer_norm_eps};
  c_attn_ = conv1d("attn.c_attn", c, 3 * c, Activation::none);
  attn_proj_ = conv1d("attn.c_proj", c, c, Activation::none);
  ln_2_ = {vector("ln_2.weight", c), vector("ln_2.bias", c), config.layer_norm_eps};
  c_fc_ = conv1d("mlp.c_fc", c, inner, config.activation);
  mlp_proj_ = conv1d("mlp.c_proj", inner, c, Activation::none);
  dims_ = {config.heads, config.heads, config.head_dim(), config.attention_scale(index)};
}

void Block::forward(Tensor& x, Workspace& ws, const AttentionTarget& target) const {
  ln_1_.forward(x, ws.normed);
  c_attn_.forward(ws.normed, ws.qkv);
  attend(ws, target);
  attn_proj_.forward(ws.context, ws.projected);
  add(x, ws.projected);
  ln_2_.forward(x, ws.normed);
  c_fc_.forward(ws.normed, ws.inner);
  mlp_proj_.forward(ws.inner, ws.projected);
  add(x, ws.projected);
}

void Block::attend(Workspace& ws, const AttentionTarget& target) const {
  const std::int64_t c = std::int64_t{dims_.heads} * dims_.head_dim;
  // q, k, v are column ranges of the fused projection: no copies.
  const SeqView q = seq_view(ws.qkv, target.length, 0);
  const SeqView k = seq_view(ws.qkv, target.length, c);
  const SeqView v = seq_view(ws.qkv, target.length, 2 * c);
  ws.context.resize({ws.qkv.dim(0), c});
  const MutableSeqView out = mutable_seq_view(ws.context, target.length);
  if (!target.cache) {
    attention(dims_, MaskView::self(*target.layout), q, k, v, out);
    return;
  }
  target.cache->write(index_, k, v);
  attention(dims_, target.cache->mask(), q, target.cache->keys(index_),
            target.cache->values(index_), out);
}

// ---- Gpt2Model ------------------------------------------------------------------------------

Gpt2Model::Gpt2Model(const std::filesystem::path& dir, DType compute)
    : config_(Gpt2Config::load(dir)) {
  const SafeTensors weights = SafeTensors::open(dir);
  // Checkpoints saved from GPT2LMHeadModel prefix the body with "transformer."; GPT2Model's
  // do not.
  const std::string prefix = weights.contains("transformer.wte.weight") ? "transformer." : "";
  const std::int64_t c = config_.hidden;
  wte_.table = weights.get_f32(prefix + "wte.weight", {config_.vocab_size, c});
  wpe_.table = weights.get_f32(prefix + "wpe.weight", {config_.max_positions, c});
  for (std::int32_t l = 0; l < config_.layers; ++l)
    blocks_.emplace_back(weights, prefix + "h." + std::to_string(l) + ".", config_, l, compute);
  ln_f_ = {weights.get_f32(prefix + "ln_f.weight", {c}), weights.get_f32(prefix + "ln_f.bias", {c}),
           config_.layer_norm_eps};
  if (config_.tie_word_embeddings) {
    head_ = Linear(wte_.table, {}, {.compute = compute});
  } else {
    // A separate head: tie_word_embeddings is false.
    if (!weights.contains("lm_head.weight"))
      throw ConfigError((dir / "config.json").string() +
                        ": key 'tie_word_embeddings': false, but " + weights.path().string() +
                        " has no tensor 'lm_head.weight'");
    head_ = Linear(weights.get_f32("lm_head.weight", {config_.vocab_size, c}), {},
                   {.compute = compute});
  }

  info_.architecture = "gpt2";
  info_.kind = ModelKind::decoder_only;
  info_.vocab_size = info_.source_vocab_size = config_.vocab_size;
  info_.hidden_size = config_.hidden;
  info_.num_layers = config_.layers;
  info_.max_positions = config_.max_positions;
  info_.bos = config_.bos;
  info_.eos = config_.eos;
  info_.pad = config_.pad;
}

void Gpt2Model::run(Workspace& ws, const AttentionTarget& target) const {
  wte_.forward(ws.ids, ws.hidden);
  wpe_.add_to(ws.positions, ws.hidden);
  if (ws.ids.empty()) return;
  for (const Block& block : blocks_) block.forward(ws.hidden, ws, target);
}

void Gpt2Model::outputs(Workspace& ws, std::span<const std::int32_t> rows, Tensor* logits,
                        Tensor* hidden, bool reuse) const {
  if (!logits && !hidden) return;
  const Tensor& last = select_rows(ws.hidden, rows, ws.selected);
  Tensor& normed = hidden ? *hidden : ws.normed;
  ln_f_.forward(last, normed);
  // The head (vocab x hidden per row) dominates: it only sees the rows asked for.
  if (!logits) return;
  if (reuse) *logits = reusable_output(normed.numel() / normed.dim(-1), head_.out_features());
  head_.forward(normed, *logits);
}

ForwardResult Gpt2Model::forward(const Batch& batch) const {
  Workspace& ws = thread_workspace();
  prepare_tokens(batch, info_, ws);
  run(ws, {.layout = &batch.attention, .length = batch.length});
  ForwardResult result;
  outputs(ws, batch.output_rows, batch.want_logits ? &result.logits : nullptr,
          batch.want_hidden ? &result.hidden : nullptr, true);
  return result;
}

std::unique_ptr<DecodeState> Gpt2Model::start(const Batch& batch, Tensor* logits) const {
  auto state = std::make_unique<State>(
      KvCache(config_.layers, config_.heads, config_.head_dim(), batch.batch));
  Workspace& ws = state->workspace;
  prepare_tokens(batch, info_, ws);
  state->cache.begin(batch.attention, ws.positions);
  AppendGuard append(state->cache);
  run(ws, {.cache = &state->cache, .length = batch.length});
  append.end(true);
  if (logits) outputs(ws, batch.output_rows, logits, nullptr, false);
  return state;
}

void Gpt2Model::step(DecodeState& s, const StepInput& input, Tensor& logits) const {
  auto* state = dynamic_cast<State*>(&s);
  if (!state || state->cache.layers() != config_.layers || state->cache.width() != config_.hidden)
    throw RuntimeError("gpt2: step() with a state that this model did not start");
  Workspace& ws = state->workspace;
  prepare_step(input, state->cache, info_, ws);
  state->cache.begin_step(input.append ? TokenRole::content : TokenRole::query, ws.positions);
  AppendGuard append(state->cache);
  run(ws, {.cache = &state->cache, .length = 1});
  append.end(input.append);
  outputs(ws, {}, &logits, nullptr, false);
}

}  // namespace masque::gpt2
