#include "bert_model.hpp"

#include <cstring>
#include <string>

#include "masque/error.hpp"

namespace masque::bert {

namespace {

// The incremental state: one KV cache row per sequence, and the scratch buffers of its steps.
class BertState final : public DecodeState {
 public:
  explicit BertState(KvCache cache) : cache(std::move(cache)) {}
  std::int32_t rows() const override { return cache.rows(); }
  void select(std::span<const std::int32_t> rows) override { cache.select(rows); }
  std::unique_ptr<DecodeState> fork() const override {
    return std::make_unique<BertState>(cache.fork());
  }

  KvCache cache;
  Workspace ws;
};

std::string where(std::size_t flat, std::int32_t length) {
  if (length <= 0) return "row " + std::to_string(flat);
  return "row " + std::to_string(flat / length) + ", column " + std::to_string(flat % length);
}

// Checks one input value against the model's table size; RecordError otherwise.
std::int32_t checked(std::int32_t value, std::int32_t limit, const char* what, const char* table,
                     std::size_t flat, std::int32_t length) {
  if (value < 0 || value >= limit)
    throw RecordError("bert: " + std::string(what) + " " + std::to_string(value) + " (" +
                      where(flat, length) + ") is outside " + table + " (" + std::to_string(limit) +
                      ")");
  return value;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw RuntimeError("bert: " + what);
}

void check_batch_shape(const Batch& b) {
  require(b.batch >= 0 && b.length >= 0, "negative batch dimensions");
  const std::size_t n = static_cast<std::size_t>(b.batch) * b.length;
  require(b.ids.size() == n, std::to_string(b.ids.size()) + " ids for a batch of " +
                                 std::to_string(b.batch) + " x " + std::to_string(b.length));
  require(b.positions.empty() || b.positions.size() == n,
          "positions must be empty or one per token");
  require(b.token_types.empty() || b.token_types.size() == n,
          "token_types must be empty or one per token");
  const AttentionLayout& a = b.attention;
  require(
      a.batch == b.batch && a.length == b.length && a.rank.size() == n && a.role.size() == n &&
          (a.dense.empty() || a.dense.size() == n * b.length),
      "the attention layout is not " + std::to_string(b.batch) + " x " + std::to_string(b.length));
  for (std::int32_t row : b.output_rows)
    require(row >= 0 && static_cast<std::size_t>(row) < n,
            "output row " + std::to_string(row) + " outside the batch");
}

void copy_rows(const Tensor& from, std::span<const std::int32_t> rows, Tensor& to) {
  const std::int64_t width = from.dim(-1);
  to.resize({static_cast<std::int64_t>(rows.size()), width});
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::memcpy(to.f32() + i * width, from.f32() + rows[i] * width, sizeof(float) * width);
}

}  // namespace

WorkspacePool::Lease WorkspacePool::acquire() const {
  std::lock_guard lock(mutex_);
  if (free_.empty()) return Lease(*this, std::make_unique<Workspace>());
  std::unique_ptr<Workspace> ws = std::move(free_.back());
  free_.pop_back();
  return Lease(*this, std::move(ws));
}

void WorkspacePool::release(std::unique_ptr<Workspace> ws) const {
  std::lock_guard lock(mutex_);
  free_.push_back(std::move(ws));
}

Encoder load_encoder(const BertOptions& options) {
  const BertConfig config = load_config(options.path);
  return Encoder(config, load_weights(open_checkpoint(options.path), config, options.mlm_head,
                                      options.compute));
}

BertModel::BertModel(const BertOptions& options)
    : path_(options.path), encoder_(load_encoder(options)) {
  const BertConfig& c = encoder_.config();
  info_.architecture = "bert";
  info_.kind = ModelKind::encoder_only;
  info_.vocab_size = info_.source_vocab_size = c.vocab_size;
  info_.hidden_size = c.hidden_size;
  info_.num_layers = c.num_layers;
  info_.max_positions = c.max_positions;
  info_.uses_token_types = true;
  info_.bos = c.bos_token_id;
  info_.eos = c.eos_token_id;
  info_.pad = c.pad_token_id;
}

// Pads are never attended to and their outputs are not used, so their ids, positions and
// token types are replaced by 0 rather than checked: any filler the caller chose is fine.
void BertModel::prepare_inputs(const Batch& batch, Workspace& ws) const {
  check_batch_shape(batch);
  const BertConfig& c = encoder_.config();
  const std::size_t n = batch.ids.size();
  ws.ids.resize(n);
  ws.positions.resize(n);
  ws.token_types.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (batch.attention.role[i] == TokenRole::pad) {
      ws.ids[i] = ws.positions[i] = ws.token_types[i] = 0;
      continue;
    }
    const std::int32_t position =
        batch.positions.empty() ? static_cast<std::int32_t>(i % batch.length) : batch.positions[i];
    const std::int32_t type = batch.token_types.empty() ? 0 : batch.token_types[i];
    ws.ids[i] = checked(batch.ids[i], c.vocab_size, "token id", "the vocabulary", i, batch.length);
    ws.positions[i] =
        checked(position, c.max_positions, "position", "max_position_embeddings", i, batch.length);
    ws.token_types[i] =
        checked(type, c.type_vocab_size, "token type", "type_vocab_size", i, batch.length);
  }
}

void BertModel::prepare_step(const StepInput& input, std::span<const std::int32_t> positions,
                             Workspace& ws) const {
  const BertConfig& c = encoder_.config();
  const std::size_t rows = input.tokens.size();
  ws.ids.resize(rows);
  ws.positions.resize(rows);
  ws.token_types.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int32_t type = input.token_types.empty() ? 0 : input.token_types[r];
    ws.ids[r] = checked(input.tokens[r], c.vocab_size, "token id", "the vocabulary", r, 0);
    ws.positions[r] =
        checked(positions[r], c.max_positions, "position", "max_position_embeddings", r, 0);
    ws.token_types[r] = checked(type, c.type_vocab_size, "token type", "type_vocab_size", r, 0);
  }
}

const Tensor& BertModel::output_rows(const Batch& batch, Workspace& ws) const {
  if (batch.output_rows.empty()) return ws.h;
  copy_rows(ws.h, batch.output_rows, ws.picked);
  return ws.picked;
}

void BertModel::predict(const Tensor& hidden, Workspace& ws, Tensor& logits) const {
  if (!encoder_.has_head())
    throw ConfigError("bert: " + path_.string() +
                      " was loaded with mlm_head: false, so it computes no logits");
  encoder_.predict(hidden, ws, logits);
}

ForwardResult BertModel::forward(const Batch& batch) const {
  auto lease = pool_.acquire();
  Workspace& ws = *lease;
  prepare_inputs(batch, ws);
  ws.h.resize({static_cast<std::int64_t>(ws.ids.size()), encoder_.config().hidden_size});
  if (!ws.ids.empty()) {
    encoder_.embed(ws.ids, ws.positions, ws.token_types, ws.h);
    LayoutAttention attention(encoder_.dims(), batch.attention);
    encoder_.encode(ws, attention);
  }
  ForwardResult result;
  const Tensor& rows = output_rows(batch, ws);
  if (batch.want_hidden) result.hidden = rows.clone();
  if (batch.want_logits) predict(rows, ws, result.logits);
  return result;
}

std::unique_ptr<DecodeState> BertModel::start(const Batch& batch, Tensor* logits) const {
  const BertConfig& c = encoder_.config();
  auto state =
      std::make_unique<BertState>(KvCache(c.num_layers, c.num_heads, c.head_dim(), batch.batch));
  Workspace& ws = state->ws;
  prepare_inputs(batch, ws);
  ws.h.resize({static_cast<std::int64_t>(ws.ids.size()), c.hidden_size});
  if (!ws.ids.empty()) {
    state->cache.begin(batch.attention, ws.positions);
    encoder_.embed(ws.ids, ws.positions, ws.token_types, ws.h);
    CachedAttention attention(encoder_.dims(), state->cache, batch.length);
    encoder_.encode(ws, attention);
    state->cache.end(true);
  }
  if (logits) predict(output_rows(batch, ws), ws, *logits);
  return state;
}

void BertModel::step(DecodeState& state, const StepInput& input, Tensor& logits) const {
  auto* s = dynamic_cast<BertState*>(&state);
  require(s != nullptr, "step() needs a state made by this model's start()");
  const std::size_t rows = static_cast<std::size_t>(s->rows());
  require(input.tokens.size() == rows &&
              (input.positions.empty() || input.positions.size() == rows) &&
              (input.token_types.empty() || input.token_types.size() == rows),
          "step() needs one token (and optionally one position and token type) per row (" +
              std::to_string(rows) + " rows)");
  KvCache& cache = s->cache;
  Workspace& ws = s->ws;
  cache.begin_step(input.append ? TokenRole::content : TokenRole::query, input.positions);
  try {
    prepare_step(input, cache.pending_positions(), ws);
    encoder_.embed(ws.ids, ws.positions, ws.token_types, ws.h);
    CachedAttention attention(encoder_.dims(), cache, 1);
    encoder_.encode(ws, attention);
    predict(ws.h, ws, logits);
  } catch (...) {
    cache.end(false);  // leave the state as it was
    throw;
  }
  cache.end(input.append);
}

}  // namespace masque::bert
