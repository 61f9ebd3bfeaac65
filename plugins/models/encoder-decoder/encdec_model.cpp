#include "encdec_model.hpp"

#include <algorithm>
#include <string>

#include "masque/error.hpp"
#include "masque/safetensors.hpp"
#include "masque/threading.hpp"

namespace masque::encdec {

namespace {

// A copy of `table` multiplied by `scale` (the same float product as scaling each lookup).
Tensor scaled(const Tensor& table, float scale) {
  if (scale == 1.0f) return table;
  Tensor t = table.clone();
  masque::scale(t, scale);
  return t;
}

std::string layer_prefix(const char* stack, std::int32_t layer) {
  return std::string(stack) + ".layers." + std::to_string(layer);
}

PositionTable position_table(const Checkpoint& w, const EncDecConfig& c, const char* stack) {
  const PositionConfig& p = c.positions;
  if (p.kind == PositionKind::sinusoidal) return PositionTable::sinusoidal(p, c.d_model);
  const std::string name = std::string(stack) + ".embed_positions.weight";
  return PositionTable::learned(w.matrix(name, std::int64_t{p.max_positions} + p.offset, c.d_model),
                                p.offset, p.max_positions);
}

// The tensor holding the target embeddings: decoder.embed_tokens.weight, or with shared
// embeddings the first present of shared.weight (BART), decoder.* and encoder.embed_tokens.
std::string target_table(const Checkpoint& w, const EncDecConfig& c) {
  if (!c.shared_embeddings) return "decoder.embed_tokens.weight";
  for (const char* name :
       {"shared.weight", "decoder.embed_tokens.weight", "encoder.embed_tokens.weight"})
    if (w.has(name)) return name;
  return "shared.weight";  // missing: the error names it
}

void check_source(const Batch& batch) {
  const auto n = static_cast<std::size_t>(batch.batch) * batch.length;
  const AttentionLayout& a = batch.attention;
  if (batch.batch < 0 || batch.length < 0 || batch.ids.size() != n)
    throw RuntimeError("encoder-decoder: " + std::to_string(batch.ids.size()) + " ids for a " +
                       std::to_string(batch.batch) + " x " + std::to_string(batch.length) +
                       " source batch");
  if (a.batch != batch.batch || a.length != batch.length || a.role.size() != n)
    throw RuntimeError("encoder-decoder: the source batch needs an attention layout of its size (" +
                       std::to_string(batch.batch) + " x " + std::to_string(batch.length) + ")");
  if (!batch.positions.empty() && batch.positions.size() != n)
    throw RuntimeError("encoder-decoder: " + std::to_string(batch.positions.size()) +
                       " positions for " + std::to_string(n) + " source tokens");
}

}  // namespace

EncoderDecoderModel::EncoderDecoderModel(const std::filesystem::path& path, DType compute)
    : config_(EncDecConfig::load(path)) {
  // Packing a weight is one OpenMP region; with tiny weights, fork/join (and waiting for a busy
  // second core) costs far more than the copy: ~0.5 s of the aren model's load with 2 threads.
  const ThreadScope one_thread(1);
  const Checkpoint w(SafeTensors::open(path));
  const EncDecConfig& c = config_;
  load_embeddings(w);
  source_positions_ = position_table(w, c, "encoder");
  target_positions_ = c.positions.kind == PositionKind::sinusoidal  // one table serves both
                          ? source_positions_
                          : position_table(w, c, "decoder");
  for (std::int32_t l = 0; l < c.encoder_layers; ++l)
    encoder_.emplace_back(w, layer_prefix("encoder", l), c, compute);
  for (std::int32_t l = 0; l < c.decoder_layers; ++l)
    decoder_.emplace_back(w, layer_prefix("decoder", l), c, compute);
  if (c.encoder_final_norm)
    encoder_norm_ = w.layer_norm("encoder.layer_norm", c.d_model, c.layer_norm_eps);
  if (c.decoder_final_norm)
    decoder_norm_ = w.layer_norm("decoder.layer_norm", c.d_model, c.layer_norm_eps);
  load_output(w, compute);

  info_.architecture = "encoder-decoder";
  info_.kind = ModelKind::encoder_decoder;
  info_.vocab_size = c.target_vocab;
  info_.source_vocab_size = c.source_vocab;
  info_.hidden_size = c.d_model;
  info_.num_layers = c.decoder_layers;
  info_.max_positions = std::min(source_positions_.size(), target_positions_.size());
  info_.bos = c.bos;
  info_.eos = c.eos;
  info_.pad = c.pad;
  info_.decoder_start = c.decoder_start;
}

void EncoderDecoderModel::load_embeddings(const Checkpoint& w) {
  const EncDecConfig& c = config_;
  target_embeddings_ =
      scaled(w.matrix(target_table(w, c), c.target_vocab, c.d_model), c.embedding_scale);
  source_embeddings_ =
      c.shared_embeddings
          ? target_embeddings_
          : scaled(w.matrix("encoder.embed_tokens.weight", c.source_vocab, c.d_model),
                   c.embedding_scale);
}

void EncoderDecoderModel::load_output(const Checkpoint& w, DType compute) {
  const EncDecConfig& c = config_;
  Tensor bias;
  if (c.output_bias) {
    // lm_head.bias, or Hugging Face BART/Marian's final_logits_bias buffer [1, vocab].
    bias = !w.has("lm_head.bias") && w.has("final_logits_bias")
               ? w.matrix("final_logits_bias", 1, c.target_vocab).reshaped({c.target_vocab})
               : w.vector("lm_head.bias", c.target_vocab);
  }
  // Tied: the unscaled target embeddings.
  const std::string weight = c.tie_output ? target_table(w, c) : "lm_head.weight";
  output_ = Linear(w.matrix(weight, c.target_vocab, c.d_model), bias, {.compute = compute});
}

ForwardResult EncoderDecoderModel::forward(const Batch&) const {
  throw ConfigError(
      "the encoder-decoder model has no full forward pass: use start() (encodes the source) and "
      "step() (one target token per row), e.g. with the seq2seq task");
}

void EncoderDecoderModel::encode(const Batch& batch, Workspace& ws) const {
  const std::size_t n = batch.ids.size();
  // Pad slots may hold any id and position: give them harmless ones (their outputs are masked).
  std::vector<TokenId> ids(batch.ids);
  std::vector<std::int32_t> positions(n);
  for (std::size_t i = 0; i < n; ++i) {
    const bool pad = batch.attention.role[i] == TokenRole::pad;
    positions[i] = pad                       ? 0
                   : batch.positions.empty() ? static_cast<std::int32_t>(i % batch.length)
                                             : batch.positions[i];
    if (pad) ids[i] = 0;
  }
  source_positions_.check(positions);
  embedding(source_embeddings_, ids, ws.x);
  source_positions_.add_to(positions, ws.x);
  const MaskView mask = MaskView::self(batch.attention);
  for (const EncoderLayer& layer : encoder_) layer.forward(ws, mask, batch.length);
  if (!encoder_norm_.weight.empty()) encoder_norm_.forward(ws.x, ws.x);
}

std::unique_ptr<DecoderState> EncoderDecoderModel::remember(const Batch& batch,
                                                            Workspace& ws) const {
  KvCache cache(config_.decoder_layers, config_.heads, config_.head_dim, batch.batch);
  cache.set_source(batch.attention);
  if (batch.batch > 0 && batch.length > 0)
    for (std::int32_t l = 0; l < config_.decoder_layers; ++l)
      decoder_[l].cross_attention().remember(ws.x, batch.length, cache, l, ws.proj);
  return std::make_unique<DecoderState>(std::move(cache));
}

std::unique_ptr<DecodeState> EncoderDecoderModel::start(const Batch& batch, Tensor*) const {
  check_source(batch);
  Workspace ws;
  if (batch.batch > 0 && batch.length > 0) encode(batch, ws);
  return remember(batch, ws);
}

void EncoderDecoderModel::step(DecodeState& state, const StepInput& input, Tensor& logits) const {
  auto* decoder_state = dynamic_cast<DecoderState*>(&state);
  if (!decoder_state)
    throw RuntimeError("encoder-decoder: step() needs a state from this model's start()");
  KvCache& cache = decoder_state->cache();
  Workspace& ws = decoder_state->workspace();
  const std::int32_t rows = cache.rows();
  if (input.tokens.size() != static_cast<std::size_t>(rows) ||
      (!input.positions.empty() && input.positions.size() != input.tokens.size()))
    throw RuntimeError("encoder-decoder: step() needs one token (and position) per row, got " +
                       std::to_string(input.tokens.size()) + " tokens for " + std::to_string(rows) +
                       " rows");

  // Everything that can fail on the input is checked before the cache changes.
  std::vector<std::int32_t>& positions = decoder_state->positions();
  positions.resize(rows);
  for (std::int32_t r = 0; r < rows; ++r)
    positions[r] = input.positions.empty() ? cache.next_position(r) : input.positions[r];
  target_positions_.check(positions);
  embedding(target_embeddings_, input.tokens, ws.x);
  target_positions_.add_to(positions, ws.x);

  cache.begin_step(input.append ? TokenRole::content : TokenRole::query, positions);
  try {
    for (std::int32_t l = 0; l < config_.decoder_layers; ++l) decoder_[l].step(ws, cache, l);
  } catch (...) {
    cache.end(false);
    throw;
  }
  cache.end(input.append);

  if (decoder_norm_.weight.empty()) {
    output_.forward(ws.x, logits);
  } else {
    decoder_norm_.forward(ws.x, ws.h);
    output_.forward(ws.h, logits);
  }
}

}  // namespace masque::encdec
