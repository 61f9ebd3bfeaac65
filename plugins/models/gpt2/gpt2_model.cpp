#include "gpt2_model.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "decoder_only.hpp"
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

constexpr decoder_only::ModelNames kNames{"gpt2", "n_positions"};

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
  const Tensor& last = decoder_only::select_rows(ws.hidden, rows, ws.selected, kNames);
  Tensor& normed = hidden ? *hidden : ws.normed;
  ln_f_.forward(last, normed);
  // The head (vocab x hidden per row) dominates: it only sees the rows asked for.
  if (!logits) return;
  if (reuse)
    *logits = decoder_only::reusable_output(normed.numel() / normed.dim(-1), head_.out_features());
  head_.forward(normed, *logits);
}

ForwardResult Gpt2Model::forward(const Batch& batch) const {
  Workspace& ws = thread_workspace();
  decoder_only::prepare_tokens(batch, info_, kNames, ws.ids, ws.positions);
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
  decoder_only::prepare_tokens(batch, info_, kNames, ws.ids, ws.positions);
  state->cache.begin(batch.attention, ws.positions);
  decoder_only::AppendGuard append(state->cache);
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
  decoder_only::prepare_step(input, state->cache, info_, kNames, ws.ids, ws.positions);
  state->cache.begin_step(input.append ? TokenRole::content : TokenRole::query, ws.positions);
  decoder_only::AppendGuard append(state->cache);
  run(ws, {.cache = &state->cache, .length = 1});
  append.end(input.append);
  outputs(ws, {}, &logits, nullptr, false);
}

}  // namespace masque::gpt2
