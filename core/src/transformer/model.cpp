// TransformerModel: the cached-model skeleton (model.hpp of the tier).
#include "masque/transformer/model.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <set>
#include <string>
#include <utility>

#include "masque/error.hpp"
#include "masque/ops.hpp"

namespace masque::transformer {

namespace {

// The KV cache of a batch being decoded (and encoder memory), and the activations its steps
// reuse.
class State final : public DecodeState {
 public:
  explicit State(KvCache cache) : cache(std::move(cache)) {}
  std::int32_t rows() const override { return cache.rows(); }
  void select(std::span<const std::int32_t> rows) override { cache.select(rows); }
  std::unique_ptr<DecodeState> fork() const override {
    return std::make_unique<State>(cache.fork());
  }
  bool can_append() const override { return true; }
  void append(DecodeState& other) override {
    auto* joining = dynamic_cast<State*>(&other);
    if (!joining) throw RuntimeError("DecodeState::append: a state of another model");
    cache.append_rows(std::move(joining->cache));
  }
  std::unique_ptr<DecodeState> split(std::span<const std::int32_t> rows) override {
    return std::make_unique<State>(cache.split(rows));
  }

  KvCache cache;
  Workspace workspace;
  AttentionLayout layout;  // a step of several tokens per row: their ranks and roles
};

// forward() and encoding reuse one workspace per thread.
Workspace& thread_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

// A [rows, width] tensor for forward()'s logits in memory this thread reuses from call to call,
// unless a caller still holds the previous logits. Scoring batches have hundreds of MB of
// logits: a fresh buffer each time costs a page fault per 4 KiB.
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

// Where a token sits, for messages: "(row 1, column 3)" or "(step, row 1)".
std::string where(std::int64_t row, std::int64_t column) {
  return column < 0 ? "(step, row " + std::to_string(row) + ")"
                    : "(row " + std::to_string(row) + ", column " + std::to_string(column) + ")";
}

struct Limits {
  const std::string& model;
  const std::string& positions_key;
  std::int32_t vocab, positions, types;
};

// RecordErrors for tokens the model cannot take; messages are only built on failure.
void check_token(const Limits& l, TokenId id, std::int32_t position, std::int32_t type,
                 std::int64_t row, std::int64_t column) {
  if (id < 0 || id >= l.vocab)
    throw RecordError(l.model + ": token id " + std::to_string(id) + " " + where(row, column) +
                      " is outside the model's vocabulary of " + std::to_string(l.vocab) + " ids");
  if (position < 0 || (l.positions > 0 && position >= l.positions))
    throw RecordError(l.model + ": position " + std::to_string(position) + " " +
                      where(row, column) + " is outside the model's " +
                      std::to_string(l.positions) + " positions (" + l.positions_key + ")");
  if (type < 0 || (type > 0 && type >= l.types))
    throw RecordError(l.model + ": token type " + std::to_string(type) + " " + where(row, column) +
                      " is outside type_vocab_size (" + std::to_string(l.types) + ")");
}

std::int32_t window_of(const StackSpec& stack) {
  std::int32_t window = 0;
  for (const BlockSpec& b : stack.blocks) window = std::max(window, b.attention.window);
  return window;
}

}  // namespace

TransformerModel::TransformerModel(TransformerSpec spec, const SafeTensors& checkpoint,
                                   ModelTokens tokens, MatmulType matmul, DType kv_cache)
    : kv_cache_(kv_cache), spec_(std::move(spec)) {
  if (kv_cache != DType::f32 && kv_cache != DType::bf16)
    throw ConfigError(std::string("kv_cache_dtype: f32 or bf16, not ") + to_string(kv_cache));
  const WeightReader weights(checkpoint, matmul);
  if (spec_.encoder_decoder()) encoder_ = Stack(spec_.encoder, weights);
  decoder_ = Stack(spec_.decoder, weights);
  if (spec_.head.present()) head_ = Head(spec_.head, weights);
  check_no_extra_layers(checkpoint, spec_);

  info_.architecture = spec_.architecture;
  info_.kind = spec_.kind;
  // The logits' width: the vocabulary, or the labels of a sequence-classification head.
  info_.vocab_size = head_.empty() ? spec_.vocab_size : static_cast<std::int32_t>(head_.vocab());
  info_.source_vocab_size = spec_.encoder_decoder() ? spec_.source_vocab_size : spec_.vocab_size;
  info_.hidden_size = spec_.decoder.hidden;
  info_.num_layers = static_cast<std::int32_t>(spec_.decoder.blocks.size());
  info_.max_positions = decoder_.max_positions();
  if (spec_.encoder_decoder())
    info_.max_positions = std::min(info_.max_positions, encoder_.max_positions());
  info_.uses_token_types = decoder_.embeddings().types() > 0;
  info_.sliding_window = window_of(spec_.decoder);
  // An end or start token the embeddings cannot hold: generation could never stop on it, or
  // would read past the table.
  for (const auto& [name, id] : {std::pair{"bos_token_id", tokens.bos},
                                 {"eos_token_id", tokens.eos},
                                 {"decoder_start_token_id", tokens.decoder_start},
                                 {"forced_bos_token_id", tokens.forced_bos}})
    if (id >= spec_.vocab_size)
      throw ConfigError(spec_.architecture + ": " + name + " " + std::to_string(id) +
                        " (config.json or generation_config.json) is outside the vocabulary of " +
                        std::to_string(spec_.vocab_size) + " tokens");
  for (const TokenId id : tokens.other_end_ids)
    if (id < 0 || id >= spec_.vocab_size)
      throw ConfigError(spec_.architecture + ": eos_token_id " + std::to_string(id) +
                        " (config.json or generation_config.json) is outside the vocabulary of " +
                        std::to_string(spec_.vocab_size) + " tokens");
  if (tokens.eos >= 0) info_.end_ids.push_back(tokens.eos);
  for (const TokenId id : tokens.other_end_ids)
    if (std::find(info_.end_ids.begin(), info_.end_ids.end(), id) == info_.end_ids.end())
      info_.end_ids.push_back(id);
  info_.bos = tokens.bos;
  info_.eos = tokens.eos;
  info_.pad = tokens.pad;
  info_.decoder_start = tokens.decoder_start;
  info_.forced_bos = tokens.forced_bos;
  if (!spec_.decoder.blocks.empty()) info_.num_heads = spec_.decoder.blocks.front().attention.heads;
  info_.records_attention = true;
}

const AttentionRecording* TransformerModel::resolve(const AttentionRecording* asked,
                                                    AttentionRecording& resolved) const {
  if (!asked) return nullptr;
  resolved = *asked;
  const auto layers = static_cast<std::int32_t>(decoder_.blocks().size());
  if (resolved.layer < 0) resolved.layer += layers;
  if (resolved.layer < 0 || resolved.layer >= layers)
    throw ConfigError(spec_.architecture + ": attention of layer " + std::to_string(asked->layer) +
                      " asked, the model has " + std::to_string(layers) + " layers (0.." +
                      std::to_string(layers - 1) + ", or -1 for the last)");
  const Block& block = decoder_.blocks()[static_cast<std::size_t>(resolved.layer)];
  if (resolved.cross && !block.has_cross_attention())
    throw ConfigError(spec_.architecture + ": cross-attention asked of a model without one");
  const std::int32_t heads =
      resolved.cross ? block.cross_attention().heads() : block.self_attention().heads();
  if (resolved.heads == 0) resolved.heads = heads - resolved.first_head;
  if (resolved.first_head < 0 || resolved.heads < 1 || resolved.first_head + resolved.heads > heads)
    throw ConfigError(spec_.architecture + ": attention heads " +
                      std::to_string(resolved.first_head) + ".." +
                      std::to_string(resolved.first_head + resolved.heads - 1) +
                      " asked, the layer has " + std::to_string(heads) + " heads");
  if (!resolved.probs) throw RuntimeError("attention recording without an output tensor");
  return &resolved;
}

TransformerModel::~TransformerModel() = default;

LinearList TransformerModel::linear_layers() const {
  LinearList layers;
  if (spec_.encoder_decoder()) encoder_.list_linears("encoder.", layers);
  decoder_.list_linears(spec_.encoder_decoder() ? "decoder." : "", layers);
  head_.list_linears("head.", layers);
  return layers;
}

void TransformerModel::prepare(const Batch& batch, const Stack& stack, std::int32_t vocab,
                               Workspace& ws) const {
  const std::int64_t n = std::int64_t{batch.batch} * batch.length;
  const auto size = static_cast<std::size_t>(std::max<std::int64_t>(n, 0));
  const AttentionLayout& a = batch.attention;
  if (batch.batch < 0 || batch.length < 0 || batch.ids.size() != size ||
      (!batch.positions.empty() && batch.positions.size() != size) ||
      (!batch.token_types.empty() && batch.token_types.size() != size) || a.batch != batch.batch ||
      a.length != batch.length || a.role.size() != size ||
      (a.dense.empty() ? a.rank.size() != size : a.dense.size() != size * batch.length))
    throw RuntimeError(spec_.architecture + ": a " + std::to_string(batch.batch) + " x " +
                       std::to_string(batch.length) + " batch needs that many ids (" +
                       std::to_string(batch.ids.size()) + "), positions (" +
                       std::to_string(batch.positions.size()) + ", or none) and layout entries");
  const Limits limits{spec_.architecture, spec_.positions_key, vocab, stack.max_positions(),
                      stack.embeddings().types()};
  ws.ids.resize(size);
  ws.positions.resize(size);
  ws.token_types.resize(stack.embeddings().types() > 0 ? size : 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t position =
        batch.positions.empty() ? static_cast<std::int32_t>(i % batch.length) : batch.positions[i];
    const std::int32_t type = batch.token_types.empty() ? 0 : batch.token_types[i];
    const bool pad = a.role[i] == TokenRole::pad;
    if (!pad)
      check_token(limits, batch.ids[i], position, ws.token_types.empty() ? 0 : type,
                  i / batch.length, i % batch.length);
    ws.ids[i] = pad ? 0 : batch.ids[i];
    ws.positions[i] = pad ? 0 : position;
    if (!ws.token_types.empty()) ws.token_types[i] = pad ? 0 : type;
  }
}

void TransformerModel::prepare_step(const StepInput& input, const KvCache& cache,
                                    Workspace& ws) const {
  const auto rows = static_cast<std::size_t>(cache.rows());
  const auto n = static_cast<std::size_t>(std::max(input.length, 0));
  const std::size_t tokens = rows * n;
  if (input.length < 1 || input.tokens.size() != tokens ||
      (!input.positions.empty() && input.positions.size() != tokens) ||
      (!input.token_types.empty() && input.token_types.size() != tokens) ||
      (!input.ranks.empty() && input.ranks.size() != tokens) ||
      (!input.roles.empty() && input.roles.size() != tokens))
    throw RuntimeError(spec_.architecture + ": a step takes " + std::to_string(input.length) +
                       " token(s) (and positions, token types, ranks, roles) per row: " +
                       std::to_string(input.tokens.size()) + " tokens, " +
                       std::to_string(input.positions.size()) + " positions for " +
                       std::to_string(rows) + " rows");
  const std::int32_t types = decoder_.embeddings().types();
  const Limits limits{spec_.architecture, spec_.positions_key, spec_.vocab_size,
                      decoder_.max_positions(), types};
  ws.ids.assign(input.tokens.begin(), input.tokens.end());
  ws.positions.resize(tokens);
  ws.token_types.resize(types > 0 ? tokens : 0);
  for (std::size_t i = 0; i < tokens; ++i) {
    const auto row = static_cast<std::int32_t>(i / n);
    const bool pad = !input.roles.empty() && input.roles[i] == TokenRole::pad;
    const std::int32_t type =
        input.token_types.empty() || types == 0 || pad ? 0 : input.token_types[i];
    if (types > 0) ws.token_types[i] = type;
    if (pad) {  // its value is arbitrary: nothing sees it
      ws.ids[i] = 0;
      ws.positions[i] = 0;
      continue;
    }
    ws.positions[i] = input.positions.empty()
                          ? cache.next_position(row) + static_cast<std::int32_t>(i % n)
                          : input.positions[i];
    check_token(limits, ws.ids[i], ws.positions[i], type, row, -1);
  }
}

void TransformerModel::step_layout(const StepInput& input, const KvCache& cache,
                                   AttentionLayout& layout) const {
  const std::int32_t n = input.length;
  layout.reset(cache.rows(), n);
  for (std::size_t i = 0; i < layout.role.size(); ++i) {
    const auto row = static_cast<std::int32_t>(i / static_cast<std::size_t>(n));
    const TokenRole role = input.roles.empty() ? TokenRole::content : input.roles[i];
    if (role != TokenRole::content && role != TokenRole::pad)
      throw RuntimeError(spec_.architecture + ": a step token is content or pad");
    layout.role[i] = role;
    layout.rank[i] = input.ranks.empty() ? cache.next_rank(row) : input.ranks[i];
  }
}

void TransformerModel::outputs(Workspace& ws, std::span<const std::int32_t> rows, Tensor* logits,
                               Tensor* hidden, bool reuse) const {
  if (!logits && !hidden) return;
  const Tensor* last = &ws.hidden;
  if (!rows.empty()) {
    gather_rows(ws.hidden, rows, ws.selected);
    last = &ws.selected;
  }
  const Tensor& normed = decoder_.finish(*last, hidden ? *hidden : ws.normed);
  if (hidden && &normed != hidden) *hidden = normed.clone();
  // The head (vocab x hidden per row) dominates: it only sees the rows asked for.
  if (!logits) return;
  if (head_.empty())
    throw ConfigError(spec_.architecture + ": loaded without an output head (" +
                      spec_.head.absent_reason + "), so it computes no logits");
  if (reuse) *logits = reusable_output(normed.numel() / normed.dim(-1), head_.vocab());
  head_.forward(normed, ws, *logits);
}

ForwardResult TransformerModel::forward(const Batch& batch) const {
  if (spec_.encoder_decoder())
    throw ConfigError("the " + spec_.architecture +
                      " model has no full forward pass: use start() (encodes the source) and "
                      "step() (one target token per row), e.g. with the seq2seq task");
  Workspace& ws = thread_workspace();
  prepare(batch, decoder_, spec_.vocab_size, ws);
  AttentionRecording record;
  decoder_.run(ws, {.layout = &batch.attention,
                    .length = batch.length,
                    .positions = ws.positions,
                    .record = resolve(batch.record_attention, record)});
  ForwardResult result;
  outputs(ws, batch.output_rows, batch.want_logits ? &result.logits : nullptr,
          batch.want_hidden ? &result.hidden : nullptr, true);
  return result;
}

std::unique_ptr<DecodeState> TransformerModel::start(const Batch& batch, Tensor* logits) const {
  if (spec_.encoder_decoder()) return start_encoder_decoder(batch);
  return start_decoder(batch, logits);
}

std::unique_ptr<DecodeState> TransformerModel::start_decoder(const Batch& batch,
                                                             Tensor* logits) const {
  const AttentionSpec& a = spec_.decoder.blocks.front().attention;
  auto state = std::make_unique<State>(
      KvCache(info_.num_layers, a.kv_heads, a.head_dim, std::max(batch.batch, 0), kv_cache_));
  Workspace& ws = state->workspace;
  prepare(batch, decoder_, spec_.vocab_size, ws);
  state->cache.begin(batch.attention, ws.positions);
  AppendGuard append(state->cache);
  AttentionRecording record;
  decoder_.run(ws, {.cache = &state->cache,
                    .length = batch.length,
                    .positions = ws.positions,
                    .record = resolve(batch.record_attention, record)});
  append.end(true);
  if (logits) outputs(ws, batch.output_rows, logits, nullptr, false);
  return state;
}

std::unique_ptr<DecodeState> TransformerModel::start_encoder_decoder(const Batch& batch) const {
  if (batch.record_attention)
    throw ConfigError(spec_.architecture +
                      ": attention is recorded by the decoder's steps, not "
                      "while the source is encoded");
  Workspace& ws = thread_workspace();
  prepare(batch, encoder_, spec_.source_vocab_size, ws);
  const bool any = batch.batch > 0 && batch.length > 0;
  if (any) {
    encoder_.run(ws,
                 {.layout = &batch.attention, .length = batch.length, .positions = ws.positions});
    encoder_.finish(ws.hidden, ws.hidden);
  }
  const AttentionSpec& a = spec_.decoder.blocks.front().attention;
  KvCache cache(info_.num_layers, a.kv_heads, a.head_dim, batch.batch, kv_cache_);
  cache.set_source(batch.attention);
  if (any)
    for (std::int32_t l = 0; l < info_.num_layers; ++l)
      decoder_.blocks()[l].cross_attention().remember(ws.hidden, batch.length, cache, l, ws.qkv);
  return std::make_unique<State>(std::move(cache));
}

void TransformerModel::step(DecodeState& s, const StepInput& input, Tensor& logits) const {
  auto* state = dynamic_cast<State*>(&s);
  const AttentionSpec& a = spec_.decoder.blocks.front().attention;
  if (!state || state->cache.layers() != info_.num_layers || state->cache.width() != a.kv_width())
    throw RuntimeError(spec_.architecture + ": step() with a state that this model did not start");
  Workspace& ws = state->workspace;
  prepare_step(input, state->cache, ws);
  // One token per row without ranks or roles: the decoding step (a query when not kept).
  if (input.length == 1 && input.ranks.empty() && input.roles.empty()) {
    state->cache.begin_step(input.append ? TokenRole::content : TokenRole::query, ws.positions);
  } else {
    step_layout(input, state->cache, state->layout);
    state->cache.begin(state->layout, ws.positions);
  }
  AppendGuard append(state->cache);
  AttentionRecording record;
  decoder_.run(ws, {.cache = &state->cache,
                    .length = input.length,
                    .positions = ws.positions,
                    .record = resolve(input.record_attention, record)});
  // Before the end: a failure keeps the cache as it was.
  if (input.want_logits) outputs(ws, input.output_rows, &logits, nullptr, false);
  append.end(input.append);
}

namespace {

// `name` with every dot-separated run of digits as '#': one pattern for a weight of all layers.
std::string layer_pattern(std::string_view name) {
  std::string out;
  std::size_t i = 0;
  while (i < name.size()) {
    std::size_t j = i;
    while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
    const bool number =
        j > i && (i == 0 || name[i - 1] == '.') && (j == name.size() || name[j] == '.');
    if (number) {
      out += '#';
      i = j;
    } else {
      out += name[i++];
    }
  }
  return out;
}

}  // namespace

void check_no_extra_layers(const SafeTensors& checkpoint, const TransformerSpec& spec) {
  std::set<std::string> read, patterns;
  for (const Parameter& p : parameters(spec)) read.insert(p.name);
  for (const std::string& name : read)
    if (std::string p = layer_pattern(name); p != name) patterns.insert(std::move(p));
  std::vector<std::string> extra;
  for (const std::string& name : checkpoint.names())
    if (!read.count(name) && patterns.count(layer_pattern(name))) extra.push_back(name);
  if (!extra.empty())
    throw ConfigError(checkpoint.path().string() + ": " + std::to_string(extra.size()) +
                      " tensors belong to layers the model does not have (e.g. " + extra.front() +
                      "): config.json gives fewer layers than the checkpoint holds");
}

SafeTensors open_checkpoint(const std::filesystem::path& folder) {
  for (const char* name : {"model.safetensors.index.json", "model.safetensors"})
    if (std::filesystem::is_regular_file(folder / name)) return SafeTensors::open(folder / name);
  return SafeTensors::open(folder);  // reports what is missing
}

}  // namespace masque::transformer

namespace masque {

bool takes_several_tokens(const Model& model) {
  return dynamic_cast<const transformer::TransformerModel*>(&model) != nullptr;
}

}  // namespace masque
