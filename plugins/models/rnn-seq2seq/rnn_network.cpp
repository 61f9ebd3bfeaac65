#include "rnn_network.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "fast_tanh.hpp"
#include "masque/error.hpp"
#include "masque/train/linear.hpp"
#include "masque/train/objective.hpp"

namespace masque::rnn {

namespace {

using train::LinearShape;

// A batch's real tokens per row: those whose role is not `pad` (as the inference plugin reads a
// source batch), row-major [rows][length] ids with the row's count in `lengths`.
std::vector<std::int32_t> real_lengths(const Batch& batch) {
  const auto n = static_cast<std::size_t>(batch.batch) * batch.length;
  if (batch.ids.size() != n || batch.attention.role.size() != n)
    throw RuntimeError("rnn-seq2seq: a training batch without ids or roles for every slot");
  std::vector<std::int32_t> lengths(batch.batch, 0);
  for (std::int32_t b = 0; b < batch.batch; ++b)
    for (std::int32_t t = 0; t < batch.length; ++t) {
      const std::size_t i = static_cast<std::size_t>(b) * batch.length + t;
      if (batch.attention.role[i] == TokenRole::pad) continue;
      if (t != lengths[b]) throw RuntimeError("rnn-seq2seq: a training batch must be right-padded");
      ++lengths[b];
    }
  return lengths;
}

void check_id(TokenId id, std::int32_t vocab, const char* side) {
  if (id < 0 || id >= vocab)
    throw RecordError(std::string("rnn-seq2seq: ") + side + " token id " + std::to_string(id) +
                      " is outside the vocabulary of " + std::to_string(vocab));
}

void add_to(float* y, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += x[i];
}

float* row(Tensor& t, std::int64_t i, std::int64_t width) {
  return t.f32() + i * width;
}

}  // namespace

struct RnnNetwork::Tape final : train::NetworkTape {
  std::int32_t B = 0, T = 0, U = 0;
  std::vector<std::int32_t> source_lengths, target_lengths;
  std::vector<TokenId> source_ids;  // [B][T], pads 0
  std::vector<TokenId> target_ids;  // [B][U]
  std::vector<std::int32_t> rows;   // predicted: b * U + t

  std::vector<TrainLayer::Weights> ef_w, eb_w, d_w;
  std::vector<TrainLayer::Run> ef_run, eb_run;
  std::vector<TrainLayer::Run> d_run;  // [U][decoder layers]
  std::vector<TrainLayer::Grads> ef_g, eb_g, d_g;

  Tensor memory;                                   // [B, T, M]
  Tensor final_state;                              // [B, M]
  Tensor keys;                                     // [B * T, A]
  Tensor s0;                                       // [B, Ld * Hd]: tanh(bridge), or zeros
  std::vector<std::vector<float>> h_init, c_init;  // per decoder layer [B * Hd]

  Tensor query;        // [U, B, A] (Bahdanau)
  Tensor energy;       // [U, B, T, A]: tanh(q + k_j) (Bahdanau)
  Tensor alpha;        // [U, B, T]
  Tensor joined;       // [U, B, M + Hd]: [context | s]
  Tensor attentional;  // [U, B, Hd]
  Tensor picked;       // [rows, Hd]

  // backward
  Tensor dmemory, dkeys, dfinal;
};

RnnNetwork::RnnNetwork(RnnConfig config, train::ParameterSet& params, train::NetworkOptions options)
    : c_(std::move(config)), params_(params), options_(options) {
  if (options_.dropout.any())
    throw ConfigError("rnn-seq2seq: dropout is not supported in training (set task.dropout: 0)");
  if (options_.matmul_dtype != DType::f32)
    throw ConfigError("rnn-seq2seq: training runs in f32 only (matmul_dtype)");
  const std::int64_t E = c_.embedding_size, He = c_.encoder_hidden, Hd = c_.decoder_hidden;
  source_embeddings_ = find("encoder.embed_tokens.weight");
  target_embeddings_ = find("decoder.embed_tokens.weight");
  for (std::int32_t l = 0; l < c_.encoder_layers; ++l) {
    const std::int64_t in = l == 0 ? E : c_.memory_size();
    encoder_forward_.push_back(recurrent("encoder.rnn", l, "", in, He));
    encoder_backward_.push_back(recurrent("encoder.rnn", l, "_reverse", in, He));
  }
  for (std::int32_t l = 0; l < c_.decoder_layers; ++l)
    decoder_.push_back(recurrent("decoder.rnn", l, "", l == 0 ? c_.decoder_input_size() : Hd, Hd));
  bridge_w_ = find("bridge.weight");
  bridge_b_ = find("bridge.bias");
  const std::string a = "decoder.attention.";
  query_w_ = find(a + "query_proj.weight");
  query_b_ = find(a + "query_proj.bias");
  key_w_ = find(a + "key_proj.weight");
  v_ = find(a + "v.weight");
  out_w_ = find(a + "out_proj.weight");
  out_b_ = find(a + "out_proj.bias");
  generator_w_ = c_.tie_output ? target_embeddings_ : find("generator.weight");
  generator_b_ = c_.tie_output ? nullptr : find("generator.bias");
  if (!source_embeddings_ || !target_embeddings_ || !key_w_ || !out_w_ || !generator_w_ ||
      (c_.bridge == Bridge::dense && (!bridge_w_ || !bridge_b_)) ||
      (c_.attention == AttentionKind::bahdanau && (!query_w_ || !query_b_ || !v_)))
    throw RuntimeError("rnn-seq2seq: the parameter set lacks tensors of its config");
}

RnnNetwork::Entry* RnnNetwork::find(const std::string& name) const {
  return params_.contains(name) ? &params_.at(name) : nullptr;
}

RnnNetwork::Recurrent RnnNetwork::recurrent(const std::string& prefix, std::int32_t layer,
                                            const char* suffix, std::int64_t in,
                                            std::int64_t hidden) {
  const std::string l = "_l" + std::to_string(layer) + suffix;
  return {TrainLayer(c_.cell, in, hidden), &params_.at(prefix + ".weight_ih" + l),
          &params_.at(prefix + ".weight_hh" + l), &params_.at(prefix + ".bias_ih" + l),
          &params_.at(prefix + ".bias_hh" + l)};
}

std::unique_ptr<train::NetworkTape> RnnNetwork::new_tape() const {
  return std::make_unique<Tape>();
}

std::unique_ptr<train::TrainableNetwork> RnnNetwork::replica(train::ParameterSet& params) const {
  return std::make_unique<RnnNetwork>(c_, params, options_);
}

// ---- forward -----------------------------------------------------------------------------

void RnnNetwork::forward(const train::TrainingBatch& batch, train::NetworkTape& base,
                         Tensor& logits, const train::DropoutContext*) const {
  Tape& t = static_cast<Tape&>(base);
  if (batch.source.batch != batch.inputs.batch)
    throw RuntimeError("rnn-seq2seq: training needs a source batch of the target batch's rows");
  t.B = batch.inputs.batch;
  t.T = batch.source.length;
  t.U = batch.inputs.length;
  t.source_lengths = real_lengths(batch.source);
  t.target_lengths = real_lengths(batch.inputs);
  t.source_ids.assign(static_cast<std::size_t>(t.B) * t.T, 0);
  for (std::int32_t b = 0; b < t.B; ++b)
    for (std::int32_t j = 0; j < t.source_lengths[b]; ++j) {
      const TokenId id = batch.source.ids[static_cast<std::size_t>(b) * t.T + j];
      check_id(id, c_.source_vocab, "source");
      t.source_ids[static_cast<std::size_t>(b) * t.T + j] = id;
    }
  t.target_ids = batch.inputs.ids;
  for (std::int32_t b = 0; b < t.B; ++b)
    for (std::int32_t u = 0; u < t.U; ++u) {
      TokenId& id = t.target_ids[static_cast<std::size_t>(b) * t.U + u];
      if (u >= t.target_lengths[b]) id = 0;  // a pad: any row of the table; never predicted
      check_id(id, c_.target_vocab, "target");
    }
  t.rows = batch.rows;
  const std::int32_t U1 = std::max(t.U, 1);
  for (std::int32_t r : t.rows)
    if (r < 0 || r / U1 >= t.B || r % U1 >= t.target_lengths[r / U1])
      throw RuntimeError("rnn-seq2seq: a predicted row outside the target batch's tokens");

  encode(t);
  decode(t);

  const std::int64_t Hd = c_.decoder_hidden, R = static_cast<std::int64_t>(t.rows.size());
  t.picked.resize({R, Hd});
  for (std::int64_t i = 0; i < R; ++i) {
    const std::int32_t b = t.rows[i] / t.U, u = t.rows[i] % t.U;
    std::memcpy(row(t.picked, i, Hd), row(t.attentional, std::int64_t{u} * t.B + b, Hd),
                Hd * sizeof(float));
  }
  const LinearShape generator{.in = Hd, .out = c_.target_vocab};
  logits.resize({R, c_.target_vocab});
  if (R > 0)
    train::linear_forward(generator, t.picked.f32(), R, generator_w_->value.f32(),
                          generator_b_ ? generator_b_->value.f32() : nullptr, logits.f32());
}

void RnnNetwork::encode(Tape& t) const {
  const std::int32_t B = t.B, T = t.T;
  const std::int64_t E = c_.embedding_size, H = c_.encoder_hidden, M = c_.memory_size();
  const auto& lengths = t.source_lengths;
  // Layer input, both directions, time-major [T][B][width]; the backward one reversed per row.
  std::vector<float> xf(static_cast<std::size_t>(T) * B * E, 0.0f), xb(xf.size(), 0.0f);
  const float* table = source_embeddings_->value.f32();
  for (std::int32_t b = 0; b < B; ++b)
    for (std::int32_t j = 0; j < lengths[b]; ++j) {
      const float* e = table + t.source_ids[static_cast<std::size_t>(b) * T + j] * E;
      std::memcpy(&xf[(static_cast<std::size_t>(j) * B + b) * E], e, E * sizeof(float));
      std::memcpy(&xb[(static_cast<std::size_t>(lengths[b] - 1 - j) * B + b) * E], e,
                  E * sizeof(float));
    }
  const std::size_t L = encoder_forward_.size();
  t.ef_w.resize(L);
  t.eb_w.resize(L);
  t.ef_run.resize(L);
  t.eb_run.resize(L);
  const std::vector<float> zeros(static_cast<std::size_t>(B) * H, 0.0f);
  const bool lstm = c_.cell == Cell::lstm;
  std::vector<float> next;
  for (std::size_t l = 0; l < L; ++l) {
    const Recurrent& f = encoder_forward_[l];
    const Recurrent& r = encoder_backward_[l];
    f.layer.load(f.w_ih->value, f.w_hh->value, f.b_ih->value, f.b_hh->value, t.ef_w[l]);
    r.layer.load(r.w_ih->value, r.w_hh->value, r.b_ih->value, r.b_hh->value, t.eb_w[l]);
    f.layer.forward(t.ef_w[l], T, B, xf.data(), zeros.data(), lstm ? zeros.data() : nullptr,
                    t.ef_run[l]);
    r.layer.forward(t.eb_w[l], T, B, xb.data(), zeros.data(), lstm ? zeros.data() : nullptr,
                    t.eb_run[l]);
    // next[j][b] = [forward(j) | backward(j)]: the backward state of token j is step len - 1 - j
    // of the reversed run; pads zero.
    next.assign(static_cast<std::size_t>(T) * B * M, 0.0f);
    const std::vector<float>& yf = t.ef_run[l].y;
    const std::vector<float>& yb = t.eb_run[l].y;
    for (std::int32_t b = 0; b < B; ++b)
      for (std::int32_t j = 0; j < lengths[b]; ++j) {
        float* dst = &next[(static_cast<std::size_t>(j) * B + b) * M];
        std::memcpy(dst, &yf[(static_cast<std::size_t>(j) * B + b) * H], H * sizeof(float));
        std::memcpy(dst + H, &yb[(static_cast<std::size_t>(lengths[b] - 1 - j) * B + b) * H],
                    H * sizeof(float));
      }
    xf = next;
    xb.assign(next.size(), 0.0f);
    for (std::int32_t b = 0; b < B; ++b)
      for (std::int32_t j = 0; j < lengths[b]; ++j)
        std::memcpy(&xb[(static_cast<std::size_t>(lengths[b] - 1 - j) * B + b) * M],
                    &next[(static_cast<std::size_t>(j) * B + b) * M], M * sizeof(float));
  }
  // Batch-major memory; the top layer's final states.
  t.memory = Tensor::zeros({B, T, M});
  t.final_state = Tensor::zeros({B, M});
  for (std::int32_t b = 0; b < B; ++b) {
    for (std::int32_t j = 0; j < lengths[b]; ++j)
      std::memcpy(row(t.memory, std::int64_t{b} * T + j, M),
                  &xf[(static_cast<std::size_t>(j) * B + b) * M], M * sizeof(float));
    if (lengths[b] == 0) continue;
    const std::size_t last = (static_cast<std::size_t>(lengths[b] - 1) * B + b) * H;
    std::memcpy(row(t.final_state, b, M), &t.ef_run[L - 1].y[last], H * sizeof(float));
    std::memcpy(row(t.final_state, b, M) + H, &t.eb_run[L - 1].y[last], H * sizeof(float));
  }
  const std::int64_t A = key_w_->value.dim(0), BT = std::int64_t{B} * T;
  t.keys.resize({BT, A});
  if (BT > 0)
    train::linear_forward(LinearShape{.in = M, .out = A}, t.memory.f32(), BT, key_w_->value.f32(),
                          nullptr, t.keys.f32());
}

void RnnNetwork::decode(Tape& t) const {
  const std::int32_t B = t.B, U = t.U;
  const std::int64_t Hd = c_.decoder_hidden, E = c_.embedding_size, In = c_.decoder_input_size();
  const std::int64_t Ld = c_.decoder_layers, M = c_.memory_size();
  const bool lstm = c_.cell == Cell::lstm;
  // The initial states: the bridge from the encoder's final states, or zeros.
  t.s0 = Tensor::zeros({B, Ld * Hd});
  if (c_.bridge == Bridge::dense && B > 0) {
    train::linear_forward(LinearShape{.in = M, .out = Ld * Hd}, t.final_state.f32(), B,
                          bridge_w_->value.f32(), bridge_b_->value.f32(), t.s0.f32());
    for (std::int64_t i = 0; i < t.s0.numel(); ++i) t.s0.f32()[i] = std::tanh(t.s0.f32()[i]);
  }
  t.h_init.assign(Ld, std::vector<float>(static_cast<std::size_t>(B) * Hd, 0.0f));
  t.c_init.assign(lstm ? Ld : 0, std::vector<float>(static_cast<std::size_t>(B) * Hd, 0.0f));
  for (std::int32_t b = 0; b < B; ++b)
    for (std::int64_t l = 0; l < Ld; ++l)
      std::memcpy(&t.h_init[l][b * Hd], row(t.s0, b, Ld * Hd) + l * Hd, Hd * sizeof(float));

  t.d_w.resize(Ld);
  for (std::int64_t l = 0; l < Ld; ++l) {
    const Recurrent& d = decoder_[l];
    d.layer.load(d.w_ih->value, d.w_hh->value, d.b_ih->value, d.b_hh->value, t.d_w[l]);
  }
  const std::int64_t A = key_w_->value.dim(0);
  t.d_run.resize(static_cast<std::size_t>(U) * Ld);
  t.query.resize({U, B, A});
  if (c_.attention == AttentionKind::bahdanau) t.energy.resize({U, B, t.T, A});
  t.alpha = Tensor::zeros({U, B, t.T});
  t.joined.resize({U, B, M + Hd});
  t.attentional.resize({U, B, Hd});
  std::vector<float> x0(static_cast<std::size_t>(B) * In, 0.0f);
  const float* table = target_embeddings_->value.f32();
  for (std::int32_t u = 0; u < U; ++u) {
    for (std::int32_t b = 0; b < B; ++b) {
      const TokenId id = t.target_ids[static_cast<std::size_t>(b) * U + u];
      std::memcpy(&x0[b * In], table + id * E, E * sizeof(float));
    }
    if (c_.input_feeding)
      for (std::int32_t b = 0; b < B; ++b) {
        float* feed = &x0[b * In + E];
        if (u == 0)
          std::fill(feed, feed + Hd, 0.0f);
        else
          std::memcpy(feed, row(t.attentional, std::int64_t{u - 1} * B + b, Hd),
                      Hd * sizeof(float));
      }
    const float* x = x0.data();
    for (std::int64_t l = 0; l < Ld; ++l) {
      TrainLayer::Run& run = t.d_run[static_cast<std::size_t>(u) * Ld + l];
      const TrainLayer::Run* before =
          u == 0 ? nullptr : &t.d_run[static_cast<std::size_t>(u - 1) * Ld + l];
      const float* h = before ? before->h.data() : t.h_init[l].data();
      const float* c = !lstm ? nullptr : before ? before->c.data() : t.c_init[l].data();
      decoder_[l].layer.forward(t.d_w[l], 1, B, x, h, c, run);
      x = run.y.data();
    }
    attend(t, u);
  }
}

void RnnNetwork::attend(Tape& t, std::int32_t u) const {
  const std::int32_t B = t.B, T = t.T;
  const std::int64_t Hd = c_.decoder_hidden, M = c_.memory_size(), A = key_w_->value.dim(0);
  const float* s =
      t.d_run[static_cast<std::size_t>(u) * c_.decoder_layers + c_.decoder_layers - 1].y.data();
  const bool bahdanau = c_.attention == AttentionKind::bahdanau;
  float* q = t.query.f32() + std::int64_t{u} * B * A;
  if (bahdanau)
    train::linear_forward(LinearShape{.in = Hd, .out = A}, s, B, query_w_->value.f32(),
                          query_b_->value.f32(), q);
  std::vector<double> scores;
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int32_t len = t.source_lengths[b];
    const float* s_b = s + b * Hd;
    float* alpha = row(t.alpha, std::int64_t{u} * B + b, T);
    scores.assign(len, 0.0);
    for (std::int32_t j = 0; j < len; ++j) {
      const float* k = row(t.keys, std::int64_t{b} * T + j, A);
      float e = 0;
      if (bahdanau) {
        const float* v = v_->value.f32();
        const float* q_b = q + b * A;
        float* energy = row(t.energy, (std::int64_t{u} * B + b) * T + j, A);
        for (std::int64_t i = 0; i < A; ++i) energy[i] = fast_tanh(q_b[i] + k[i]);
        for (std::int64_t i = 0; i < A; ++i) e += v[i] * energy[i];
      } else {
        for (std::int64_t i = 0; i < A; ++i) e += s_b[i] * k[i];
      }
      scores[j] = e;
    }
    if (len > 0) {
      const double top = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (double& e : scores) sum += (e = std::exp(e - top));
      for (std::int32_t j = 0; j < len; ++j) alpha[j] = static_cast<float>(scores[j] / sum);
    }
    float* joined = row(t.joined, std::int64_t{u} * B + b, M + Hd);
    std::fill(joined, joined + M, 0.0f);
    for (std::int32_t j = 0; j < len; ++j) {
      const float* h = row(t.memory, std::int64_t{b} * T + j, M);
      for (std::int64_t i = 0; i < M; ++i) joined[i] += alpha[j] * h[i];
    }
    std::memcpy(joined + M, s_b, Hd * sizeof(float));
  }
  float* a = row(t.attentional, std::int64_t{u} * B, Hd);
  train::linear_forward(LinearShape{.in = M + Hd, .out = Hd},
                        row(t.joined, std::int64_t{u} * B, M + Hd), B, out_w_->value.f32(),
                        out_b_ ? out_b_->value.f32() : nullptr, a);
  for (std::int64_t i = 0; i < std::int64_t{B} * Hd; ++i) a[i] = std::tanh(a[i]);
}

// ---- backward ----------------------------------------------------------------------------

void RnnNetwork::backward(train::NetworkTape& base, const Tensor& dlogits) const {
  Tape& t = static_cast<Tape&>(base);
  auto zeroed = [](std::vector<TrainLayer::Grads>& grads, const std::vector<Recurrent>& layers) {
    if (grads.size() != layers.size()) {
      grads.clear();
      for (const Recurrent& r : layers) grads.push_back(r.layer.new_grads());
    }
    for (auto& g : grads) g.zero();
  };
  zeroed(t.ef_g, encoder_forward_);
  zeroed(t.eb_g, encoder_backward_);
  zeroed(t.d_g, decoder_);
  decode_backward(t, dlogits);
  encode_backward(t);
  auto to_torch = [](const std::vector<Recurrent>& layers,
                     const std::vector<TrainLayer::Grads>& grads) {
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const Recurrent& r = layers[l];
      r.layer.to_torch(grads[l], r.w_ih->grad, r.w_hh->grad, r.b_ih->grad, r.b_hh->grad);
    }
  };
  to_torch(encoder_forward_, t.ef_g);
  to_torch(encoder_backward_, t.eb_g);
  to_torch(decoder_, t.d_g);
}

void RnnNetwork::attend_backward(Tape& t, std::int32_t u, const float* dc, float* ds) const {
  const std::int32_t B = t.B, T = t.T;
  const std::int64_t Hd = c_.decoder_hidden, M = c_.memory_size(), A = key_w_->value.dim(0);
  const std::int64_t stride = M + Hd;  // dc's rows: the context part of d[context | s]
  const float* s =
      t.d_run[static_cast<std::size_t>(u) * c_.decoder_layers + c_.decoder_layers - 1].y.data();
  const bool bahdanau = c_.attention == AttentionKind::bahdanau;
  std::vector<float> dq(bahdanau ? static_cast<std::size_t>(B) * A : 0, 0.0f);
  std::vector<double> dalpha;
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int32_t len = t.source_lengths[b];
    const float* alpha = row(t.alpha, std::int64_t{u} * B + b, T);
    const float* dc_b = dc + b * stride;
    dalpha.assign(len, 0.0);
    double sum = 0;
    for (std::int32_t j = 0; j < len; ++j) {
      const float* h = row(t.memory, std::int64_t{b} * T + j, M);
      float* dh = row(t.dmemory, std::int64_t{b} * T + j, M);
      double d = 0;
      for (std::int64_t i = 0; i < M; ++i) {
        d += static_cast<double>(dc_b[i]) * h[i];
        dh[i] += alpha[j] * dc_b[i];
      }
      dalpha[j] = d;
      sum += alpha[j] * d;
    }
    for (std::int32_t j = 0; j < len; ++j) {
      const auto de = static_cast<float>(alpha[j] * (dalpha[j] - sum));
      const float* k = row(t.keys, std::int64_t{b} * T + j, A);
      float* dk = row(t.dkeys, std::int64_t{b} * T + j, A);
      if (bahdanau) {
        const float* v = v_->value.f32();
        float* dv = v_->grad.f32();
        const float* energy = row(t.energy, (std::int64_t{u} * B + b) * T + j, A);
        float* dq_b = &dq[b * A];
        for (std::int64_t i = 0; i < A; ++i) {
          const float th = energy[i];
          dv[i] += de * th;
          const float g = de * v[i] * (1.0f - th * th);
          dq_b[i] += g;
          dk[i] += g;
        }
      } else {
        const float* s_b = s + b * Hd;
        float* ds_b = ds + b * Hd;
        for (std::int64_t i = 0; i < A; ++i) {
          ds_b[i] += de * k[i];
          dk[i] += de * s_b[i];
        }
      }
    }
  }
  if (!bahdanau) return;
  std::vector<float> ds_query(static_cast<std::size_t>(B) * Hd);
  train::linear_backward(LinearShape{.in = Hd, .out = A}, s, dq.data(), B, query_w_->value.f32(),
                         ds_query.data(), query_w_->grad.f32(), query_b_->grad.f32());
  add_to(ds, ds_query.data(), std::int64_t{B} * Hd);
}

void RnnNetwork::decode_backward(Tape& t, const Tensor& dlogits) const {
  const std::int32_t B = t.B, U = t.U, T = t.T;
  const std::int64_t Hd = c_.decoder_hidden, E = c_.embedding_size, In = c_.decoder_input_size();
  const std::int64_t Ld = c_.decoder_layers, M = c_.memory_size(), A = key_w_->value.dim(0);
  const bool lstm = c_.cell == Cell::lstm;
  const auto R = static_cast<std::int64_t>(t.rows.size());

  // The generator, then each predicted row's d(attentional) at its step.
  Tensor dattentional = Tensor::zeros({U, B, Hd});
  if (R > 0) {
    std::vector<float> dpicked(static_cast<std::size_t>(R) * Hd);
    train::linear_backward(LinearShape{.in = Hd, .out = c_.target_vocab}, t.picked.f32(),
                           dlogits.f32(), R, generator_w_->value.f32(), dpicked.data(),
                           generator_w_->grad.f32(),
                           generator_b_ ? generator_b_->grad.f32() : nullptr);
    for (std::int64_t i = 0; i < R; ++i) {
      const std::int32_t b = t.rows[i] / U, u = t.rows[i] % U;
      add_to(row(dattentional, std::int64_t{u} * B + b, Hd), &dpicked[i * Hd], Hd);
    }
  }
  t.dmemory = Tensor::zeros({B, T, M});
  t.dkeys = Tensor::zeros({std::int64_t{B} * T, A});
  const auto state = static_cast<std::size_t>(B) * Hd;
  std::vector<std::vector<float>> dh(Ld, std::vector<float>(state, 0.0f));
  std::vector<std::vector<float>> dc(lstm ? Ld : 0, std::vector<float>(state, 0.0f));
  std::vector<float> dz(state), djoined(static_cast<std::size_t>(B) * (M + Hd)), ds(state);
  std::vector<float> dx, dh0(state), dc0(lstm ? state : 0);
  for (std::int32_t u = U - 1; u >= 0; --u) {
    // a = tanh(W_o [c | s] + b_o)
    const float* a = row(t.attentional, std::int64_t{u} * B, Hd);
    const float* da = row(dattentional, std::int64_t{u} * B, Hd);
    for (std::size_t i = 0; i < state; ++i) dz[i] = da[i] * (1.0f - a[i] * a[i]);
    train::linear_backward(LinearShape{.in = M + Hd, .out = Hd},
                           row(t.joined, std::int64_t{u} * B, M + Hd), dz.data(), B,
                           out_w_->value.f32(), djoined.data(), out_w_->grad.f32(),
                           out_b_ ? out_b_->grad.f32() : nullptr);
    for (std::int32_t b = 0; b < B; ++b)
      std::memcpy(&ds[b * Hd], &djoined[b * (M + Hd) + M], Hd * sizeof(float));
    attend_backward(t, u, djoined.data(), ds.data());
    // The decoder layers, top down: the top one's output is s.
    const float* dy = ds.data();
    std::vector<float> dy_below;
    for (std::int64_t l = Ld - 1; l >= 0; --l) {
      const TrainLayer::Run& run = t.d_run[static_cast<std::size_t>(u) * Ld + l];
      dx.assign(static_cast<std::size_t>(B) * decoder_[l].layer.input_size(), 0.0f);
      decoder_[l].layer.backward(t.d_w[l], run, dy, dh[l].data(), lstm ? dc[l].data() : nullptr,
                                 dx.data(), dh0.data(), lstm ? dc0.data() : nullptr, t.d_g[l]);
      dh[l] = dh0;
      if (lstm) dc[l] = dc0;
      dy_below = dx;
      dy = dy_below.data();
    }
    // Layer 0's input [emb(y) | a_{u-1}].
    float* dtable = target_embeddings_->grad.f32();
    for (std::int32_t b = 0; b < B; ++b) {
      if (u >= t.target_lengths[b]) continue;
      const TokenId id = t.target_ids[static_cast<std::size_t>(b) * U + u];
      add_to(dtable + id * E, dy + b * In, E);
      if (c_.input_feeding && u > 0)
        add_to(row(dattentional, std::int64_t{u - 1} * B + b, Hd), dy + b * In + E, Hd);
    }
  }
  // The bridge: s0 = tanh(W_b f + b_b), layer l's state columns l*Hd ...
  t.dfinal = Tensor::zeros({B, M});
  if (c_.bridge == Bridge::dense && B > 0) {
    Tensor dz0({B, Ld * Hd});
    for (std::int32_t b = 0; b < B; ++b)
      for (std::int64_t l = 0; l < Ld; ++l)
        for (std::int64_t i = 0; i < Hd; ++i) {
          const float s0 = row(t.s0, b, Ld * Hd)[l * Hd + i];
          row(dz0, b, Ld * Hd)[l * Hd + i] = dh[l][b * Hd + i] * (1.0f - s0 * s0);
        }
    train::linear_backward(LinearShape{.in = M, .out = Ld * Hd}, t.final_state.f32(), dz0.f32(), B,
                           bridge_w_->value.f32(), t.dfinal.f32(), bridge_w_->grad.f32(),
                           bridge_b_->grad.f32());
  }
  // The keys W_k h_j.
  const std::int64_t BT = std::int64_t{B} * T;
  if (BT > 0) {
    std::vector<float> dmem(static_cast<std::size_t>(BT) * M);
    train::linear_backward(LinearShape{.in = M, .out = A}, t.memory.f32(), t.dkeys.f32(), BT,
                           key_w_->value.f32(), dmem.data(), key_w_->grad.f32(), nullptr);
    add_to(t.dmemory.f32(), dmem.data(), BT * M);
  }
}

void RnnNetwork::encode_backward(Tape& t) const {
  const std::int32_t B = t.B, T = t.T;
  const std::int64_t H = c_.encoder_hidden, M = c_.memory_size(), E = c_.embedding_size;
  const auto& lengths = t.source_lengths;
  const bool lstm = c_.cell == Cell::lstm;
  // d(layer output) time-major [T][B][M].
  std::vector<float> dn(static_cast<std::size_t>(T) * B * M, 0.0f);
  for (std::int32_t b = 0; b < B; ++b)
    for (std::int32_t j = 0; j < lengths[b]; ++j)
      std::memcpy(&dn[(static_cast<std::size_t>(j) * B + b) * M],
                  row(t.dmemory, std::int64_t{b} * T + j, M), M * sizeof(float));
  const std::size_t state = static_cast<std::size_t>(B) * H;
  std::vector<float> dh0(state), dc0(lstm ? state : 0);
  for (std::size_t l = encoder_forward_.size(); l-- > 0;) {
    const bool top = l + 1 == encoder_forward_.size();
    std::vector<float> dyf(static_cast<std::size_t>(T) * B * H, 0.0f), dyb(dyf.size(), 0.0f);
    for (std::int32_t b = 0; b < B; ++b) {
      const std::int32_t len = lengths[b];
      for (std::int32_t j = 0; j < len; ++j) {
        const float* d = &dn[(static_cast<std::size_t>(j) * B + b) * M];
        std::memcpy(&dyf[(static_cast<std::size_t>(j) * B + b) * H], d, H * sizeof(float));
        std::memcpy(&dyb[(static_cast<std::size_t>(len - 1 - j) * B + b) * H], d + H,
                    H * sizeof(float));
      }
      if (top && len > 0) {  // the final states feed the bridge
        const std::size_t last = (static_cast<std::size_t>(len - 1) * B + b) * H;
        add_to(&dyf[last], row(t.dfinal, b, M), H);
        add_to(&dyb[last], row(t.dfinal, b, M) + H, H);
      }
    }
    const std::int64_t in = encoder_forward_[l].layer.input_size();
    std::vector<float> dxf(static_cast<std::size_t>(T) * B * in), dxb(dxf.size());
    encoder_forward_[l].layer.backward(t.ef_w[l], t.ef_run[l], dyf.data(), nullptr, nullptr,
                                       dxf.data(), dh0.data(), lstm ? dc0.data() : nullptr,
                                       t.ef_g[l]);
    encoder_backward_[l].layer.backward(t.eb_w[l], t.eb_run[l], dyb.data(), nullptr, nullptr,
                                        dxb.data(), dh0.data(), lstm ? dc0.data() : nullptr,
                                        t.eb_g[l]);
    // The layer's input at token j: both directions' gradients (the backward one at step
    // len - 1 - j).
    std::vector<float> dinput(static_cast<std::size_t>(T) * B * in, 0.0f);
    for (std::int32_t b = 0; b < B; ++b)
      for (std::int32_t j = 0; j < lengths[b]; ++j) {
        float* d = &dinput[(static_cast<std::size_t>(j) * B + b) * in];
        add_to(d, &dxf[(static_cast<std::size_t>(j) * B + b) * in], in);
        add_to(d, &dxb[(static_cast<std::size_t>(lengths[b] - 1 - j) * B + b) * in], in);
      }
    if (l > 0) {
      dn = std::move(dinput);
      continue;
    }
    float* dtable = source_embeddings_->grad.f32();
    for (std::int32_t b = 0; b < B; ++b)
      for (std::int32_t j = 0; j < lengths[b]; ++j)
        add_to(dtable + t.source_ids[static_cast<std::size_t>(b) * T + j] * E,
               &dinput[(static_cast<std::size_t>(j) * B + b) * E], E);
  }
}

}  // namespace masque::rnn
