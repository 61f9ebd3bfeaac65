#include "rnn_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "masque/safetensors.hpp"
#include "masque/threading.hpp"
#include "rnn_network.hpp"
#include "rnn_parameters.hpp"

namespace masque::rnn {

namespace {

// Rows `rows` of t ([old rows, n]) as a new [rows.size(), n] tensor.
Tensor gather_rows(const Tensor& t, std::span<const std::int32_t> rows) {
  const std::int64_t n = t.dim(1);
  Tensor out({static_cast<std::int64_t>(rows.size()), n});
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::memcpy(out.f32() + i * n, t.f32() + static_cast<std::int64_t>(rows[i]) * n,
                n * sizeof(float));
  return out;
}

}  // namespace

// The model's tensors, each read with its expected shape: from a checkpoint, or from
// parameters masque train initialised (rnn_parameters.hpp).
class Weights {
 public:
  // `compute`: the type the layers built from the tensors compute in.
  Weights(const std::filesystem::path& dir, DType compute)
      : st_(SafeTensors::open(dir)), compute_(compute) {}
  Weights(const train::ParameterSet& params, DType compute) : params_(&params), compute_(compute) {}
  Tensor matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const {
    return get(name, {rows, cols});
  }
  Tensor vector(const std::string& name, std::int64_t n) const { return get(name, {n}); }

  // nn.LSTM / nn.GRU layer `layer` of `prefix` (suffix "_reverse" for the backward direction).
  RnnLayer rnn(const std::string& prefix, std::int32_t layer, const char* suffix, Cell cell,
               std::int64_t in, std::int64_t hidden) const {
    const std::int64_t gates = (cell == Cell::lstm ? 4 : 3) * hidden;
    const std::string l = "_l" + std::to_string(layer) + suffix;
    // One after the other, so that the first bad tensor is the one reported.
    const Tensor w_ih = matrix(prefix + ".weight_ih" + l, gates, in);
    const Tensor w_hh = matrix(prefix + ".weight_hh" + l, gates, hidden);
    const Tensor b_ih = vector(prefix + ".bias_ih" + l, gates);
    const Tensor b_hh = vector(prefix + ".bias_hh" + l, gates);
    return RnnLayer(cell, w_ih, w_hh, b_ih, b_hh, compute_);
  }
  // An nn.Linear `prefix` (.weight [out, in], and .bias [out] when `bias`).
  Linear linear(const std::string& prefix, std::int64_t out, std::int64_t in, bool bias) const {
    const Tensor weight = matrix(prefix + ".weight", out, in);
    return Linear(weight, bias ? vector(prefix + ".bias", out) : Tensor(), options(),
                  Int8Policy::where_it_pays);
  }
  LinearOptions options() const { return {.compute = compute_}; }

 private:
  Tensor get(const std::string& name, const Shape& shape) const {
    if (!params_) return st_.get_f32(name, shape);
    const Tensor& value = params_->at(name).value;
    if (value.shape() != shape) throw RuntimeError("rnn-seq2seq: " + name + " has another shape");
    return value.clone();
  }
  SafeTensors st_;
  const train::ParameterSet* params_ = nullptr;
  DType compute_ = DType::f32;
};

namespace {

Encoder load_encoder(const Weights& w, const RnnConfig& c, std::int64_t gate_table_mib) {
  std::vector<EncoderLayer> layers;
  for (std::int32_t l = 0; l < c.encoder_layers; ++l) {
    const std::int64_t in = l == 0 ? c.embedding_size : c.memory_size();
    layers.push_back({w.rnn("encoder.rnn", l, "", c.cell, in, c.encoder_hidden),
                      w.rnn("encoder.rnn", l, "_reverse", c.cell, in, c.encoder_hidden)});
  }
  return Encoder(w.matrix("encoder.embed_tokens.weight", c.source_vocab, c.embedding_size),
                 std::move(layers), std::min<std::int64_t>(gate_table_mib, 1 << 30) << 20);
}

Attention load_attention(const Weights& w, const RnnConfig& c) {
  const std::string p = "decoder.attention.";
  AttentionWeights a;
  a.kind = c.attention;
  const std::int64_t A = c.attention_size, Hd = c.decoder_hidden, M = c.memory_size();
  a.key = w.linear(p + "key_proj", A, M, false);
  if (c.attention == AttentionKind::bahdanau) {
    a.query = w.linear(p + "query_proj", A, Hd, true);
    a.v = w.matrix(p + "v.weight", 1, A).reshaped({A});
  }
  a.output = w.linear(p + "out_proj", Hd, M + Hd, c.attention_output_bias);
  return Attention(std::move(a));
}

// Which of the source batch's tokens are real: those whose role is not `pad`, in order.
std::vector<std::vector<TokenId>> source_rows(const Batch& batch) {
  const auto n = static_cast<std::size_t>(batch.batch) * batch.length;
  const AttentionLayout& a = batch.attention;
  if (batch.batch < 0 || batch.length < 0 || batch.ids.size() != n)
    throw RuntimeError("rnn-seq2seq: " + std::to_string(batch.ids.size()) + " ids for a " +
                       std::to_string(batch.batch) + " x " + std::to_string(batch.length) +
                       " source batch");
  if (a.batch != batch.batch || a.length != batch.length || a.role.size() != n)
    throw RuntimeError("rnn-seq2seq: the source batch needs an attention layout of its size (" +
                       std::to_string(batch.batch) + " x " + std::to_string(batch.length) + ")");
  std::vector<std::vector<TokenId>> rows(batch.batch);
  for (std::size_t i = 0; i < n; ++i)
    if (a.role[i] != TokenRole::pad) rows[i / batch.length].push_back(batch.ids[i]);
  return rows;
}

}  // namespace

// ---- state ---------------------------------------------------------------------------------

RnnState::RnnState(std::shared_ptr<const SourceMemory> source, std::vector<std::int32_t> source_of,
                   std::vector<Tensor> h, std::vector<Tensor> c, Tensor feed)
    : source_(std::move(source)),
      source_of_(std::move(source_of)),
      h_(std::move(h)),
      c_(std::move(c)),
      feed_(std::move(feed)) {}

void RnnState::select(std::span<const std::int32_t> rows) {
  for (std::int32_t r : rows)
    if (r < 0 || r >= this->rows())
      throw RuntimeError("rnn-seq2seq: select() of row " + std::to_string(r) + " of " +
                         std::to_string(this->rows()));
  std::vector<std::int32_t> source_of(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) source_of[i] = source_of_[rows[i]];
  source_of_ = std::move(source_of);
  for (Tensor& t : h_) t = gather_rows(t, rows);
  for (Tensor& t : c_) t = gather_rows(t, rows);
  feed_ = gather_rows(feed_, rows);
}

std::unique_ptr<DecodeState> RnnState::fork() const {
  std::vector<Tensor> h, c;
  for (const Tensor& t : h_) h.push_back(t.clone());
  for (const Tensor& t : c_) c.push_back(t.clone());
  return std::make_unique<RnnState>(source_, source_of_, std::move(h), std::move(c), feed_.clone());
}

// ---- model ---------------------------------------------------------------------------------

RnnSeq2SeqModel::RnnSeq2SeqModel(const std::filesystem::path& path, std::int64_t init_seed,
                                 DType compute, std::int64_t gate_table_mib)
    : path_(path),
      init_seed_(init_seed),
      compute_(compute),
      gate_table_mib_(gate_table_mib),
      config_(RnnConfig::load(path)) {
  if (init_seed_ >= 0) {
    const train::ParameterSet params = parameters();
    build(Weights(params, compute_));
  } else {
    build(Weights(path, compute_));
  }
}

LinearList RnnSeq2SeqModel::linear_layers() const {
  LinearList out;
  encoder_.list_linears(out);
  if (!bridge_.empty()) out.emplace_back("bridge", &bridge_);
  for (std::size_t l = 0; l < decoder_.size(); ++l)
    decoder_[l].list_linears("decoder.rnn.l" + std::to_string(l), out);
  attention_.list_linears(out);
  out.emplace_back("generator", &generator_);
  return out;
}

void RnnSeq2SeqModel::build(const Weights& w) {
  const ThreadScope one_thread(1);  // tiny packing regions cost more than they save
  const RnnConfig& c = config_;
  encoder_ = load_encoder(w, c, gate_table_mib_);
  if (c.bridge == Bridge::dense)
    bridge_ = w.linear("bridge", std::int64_t{c.decoder_layers} * c.decoder_hidden, c.memory_size(),
                       true);
  target_embeddings_ =
      w.matrix("decoder.embed_tokens.weight", c.target_vocab, c.embedding_size).clone();
  for (std::int32_t l = 0; l < c.decoder_layers; ++l)
    decoder_.push_back(w.rnn("decoder.rnn", l, "", c.cell,
                             l == 0 ? c.decoder_input_size() : c.decoder_hidden, c.decoder_hidden));
  attention_ = load_attention(w, c);
  generator_ = c.tie_output
                   ? Linear(target_embeddings_, {}, w.options(), Int8Policy::where_it_pays)
                   : w.linear("generator", c.target_vocab, c.decoder_hidden, c.output_bias);

  info_.architecture = "rnn-seq2seq";
  info_.kind = ModelKind::encoder_decoder;
  info_.vocab_size = c.target_vocab;
  info_.source_vocab_size = c.source_vocab;
  info_.hidden_size = c.decoder_hidden;
  info_.num_layers = c.decoder_layers;
  info_.max_positions = 0;  // recurrent: no position table
  info_.bos = c.bos;
  info_.eos = c.eos;
  info_.pad = c.pad;
  info_.decoder_start = c.decoder_start;
}

train::ParameterSet RnnSeq2SeqModel::parameters() const {
  if (init_seed_ >= 0)
    return initialised_parameters(config_, static_cast<std::uint64_t>(init_seed_));
  return checkpoint_parameters(config_, SafeTensors::open(path_));
}

std::unique_ptr<train::TrainableNetwork> RnnSeq2SeqModel::network(
    train::ParameterSet& params, const train::NetworkOptions& options) const {
  return std::make_unique<RnnNetwork>(config_, params, options);
}

ForwardResult RnnSeq2SeqModel::forward(const Batch&) const {
  throw ConfigError(
      "the rnn-seq2seq model has no full forward pass: use start() (encodes the source) and "
      "step() (one target token per row), e.g. with the seq2seq task");
}

std::vector<Tensor> RnnSeq2SeqModel::initial_states(const Tensor& final_state) const {
  const std::int64_t rows = final_state.dim(0), Hd = config_.decoder_hidden;
  std::vector<Tensor> h;
  for (std::int32_t l = 0; l < config_.decoder_layers; ++l) h.push_back(Tensor::zeros({rows, Hd}));
  if (bridge_.empty() || rows == 0) return h;
  Tensor all;  // [rows, layers * Hd]: layer l's state is columns l*Hd ...
  bridge_.forward(final_state, all);
  activate(Activation::tanh, all);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int32_t l = 0; l < config_.decoder_layers; ++l)
      std::memcpy(h[l].f32() + r * Hd, all.f32() + (r * config_.decoder_layers + l) * Hd,
                  Hd * sizeof(float));
  return h;
}

std::unique_ptr<DecodeState> RnnSeq2SeqModel::start(const Batch& batch, Tensor*) const {
  EncoderOutput encoded = encoder_.encode(source_rows(batch));
  auto source = std::make_shared<SourceMemory>();
  source->length = encoded.length;
  source->lengths = std::move(encoded.lengths);
  source->keys = attention_.keys(encoded.memory, source->lengths);
  source->memory = std::move(encoded.memory);

  const std::int64_t rows = batch.batch, Hd = config_.decoder_hidden;
  std::vector<std::int32_t> source_of(rows);
  for (std::int64_t r = 0; r < rows; ++r) source_of[r] = static_cast<std::int32_t>(r);
  std::vector<Tensor> h = initial_states(encoded.final_state), c;
  if (config_.cell == Cell::lstm)
    for (std::int32_t l = 0; l < config_.decoder_layers; ++l)
      c.push_back(Tensor::zeros({rows, Hd}));
  return std::make_unique<RnnState>(std::move(source), std::move(source_of), std::move(h),
                                    std::move(c), Tensor::zeros({rows, Hd}));
}

void RnnSeq2SeqModel::step(DecodeState& state, const StepInput& input, Tensor& logits) const {
  auto* rnn_state = dynamic_cast<RnnState*>(&state);
  if (!rnn_state) throw RuntimeError("rnn-seq2seq: step() needs a state from this model's start()");
  if (input.record_attention)  // info().records_attention is false: tasks check it first
    throw ConfigError("rnn-seq2seq: the model does not record attention probabilities");
  const std::int32_t rows = rnn_state->rows();
  if (input.tokens.size() != static_cast<std::size_t>(rows))
    throw RuntimeError("rnn-seq2seq: step() needs one token per row, got " +
                       std::to_string(input.tokens.size()) + " tokens for " + std::to_string(rows) +
                       " rows");
  const RnnConfig& c = config_;
  const std::int64_t E = c.embedding_size, Hd = c.decoder_hidden, In = c.decoder_input_size();
  RnnState::Scratch& s = rnn_state->scratch();

  // The embedding checks the ids before anything changes.
  embedding(target_embeddings_, input.tokens, s.embedded);
  s.input.resize({rows, In});
  for (std::int64_t r = 0; r < rows; ++r) {
    std::memcpy(s.input.f32() + r * In, s.embedded.f32() + r * E, E * sizeof(float));
    if (c.input_feeding)
      std::memcpy(s.input.f32() + r * In + E, rnn_state->feed().f32() + r * Hd, Hd * sizeof(float));
  }

  const bool lstm = c.cell == Cell::lstm;
  s.h.resize(c.decoder_layers);
  s.c.resize(lstm ? c.decoder_layers : 0);
  const float* x = s.input.f32();
  for (std::int32_t l = 0; l < c.decoder_layers; ++l) {
    s.h[l].resize({rows, Hd});
    if (lstm) s.c[l].resize({rows, Hd});
    decoder_[l].step(rows, x, rnn_state->h()[l].f32(), lstm ? rnn_state->c()[l].f32() : nullptr,
                     s.h[l].f32(), lstm ? s.c[l].f32() : nullptr);
    x = s.h[l].f32();
  }

  attention_.attend(rnn_state->source(), rnn_state->source_of(), s.h.back(), s.attention,
                    s.attentional);
  generator_.forward(s.attentional, logits);

  if (!input.append) return;  // a query: the state stays as it was
  std::swap(rnn_state->h(), s.h);
  if (lstm) std::swap(rnn_state->c(), s.c);
  std::swap(rnn_state->feed(), s.attentional);
}

}  // namespace masque::rnn
