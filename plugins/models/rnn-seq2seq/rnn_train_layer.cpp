#include "rnn_train_layer.hpp"
#include "rnn_dnnl.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "masque/threading.hpp"

namespace masque::rnn {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dims = memory::dims;

memory::desc with_any(const memory::desc& md) {
  return {md.dims(), md.data_type(), Tag::any};
}

memory wrap(const memory::desc& md, const void* data) {
  return memory(md, cpu(), const_cast<void*>(data));
}

// A 64-byte aligned user scratchpad of `md`'s size (oneDNN's kernels expect the alignment).
memory scratchpad(const memory::desc& md) {
  thread_local std::vector<char> buffer;
  buffer.resize(md.get_size() + 64);
  void* p = buffer.data();
  std::size_t space = buffer.size();
  std::align(64, md.get_size(), p, space);
  return wrap(md, p);
}

// Primitives per (steps, rows, threads); training sees few distinct shapes per run, but a run
// over many lengths would keep adding, so the cache starts over past this.
constexpr std::size_t kMaxCached = 256;

}  // namespace

void TrainLayer::Grads::zero() {
  std::fill(layer.begin(), layer.end(), 0.0f);
  std::fill(iter.begin(), iter.end(), 0.0f);
  std::fill(bias.begin(), bias.end(), 0.0f);
}

TrainLayer::TrainLayer(Cell cell, std::int64_t in, std::int64_t hidden)
    : cell_(cell), in_(in), hidden_(hidden), gates_(cell == Cell::lstm ? 4 : 3) {
  // LSTM i f g o = oneDNN i f c o; GRU r z n -> oneDNN u(=z) r o(=n).
  const std::int64_t lstm[4] = {0, 1, 2, 3}, gru[4] = {1, 0, 2, 0};
  std::copy(cell == Cell::lstm ? lstm : gru, (cell == Cell::lstm ? lstm : gru) + 4, order_);
}

memory::desc TrainLayer::weights_layer_md() const {
  return {Dims{1, 1, in_, gates_, hidden_}, memory::data_type::f32, Tag::ldigo};
}
memory::desc TrainLayer::weights_iter_md() const {
  return {Dims{1, 1, hidden_, gates_, hidden_}, memory::data_type::f32, Tag::ldigo};
}
memory::desc TrainLayer::bias_md() const {
  return {Dims{1, 1, cell_ == Cell::gru ? gates_ + 1 : gates_, hidden_}, memory::data_type::f32,
          Tag::ldgo};
}
memory::desc TrainLayer::sequence_md(std::int32_t steps, std::int32_t rows,
                                     std::int64_t width) const {
  return {Dims{steps, rows, width}, memory::data_type::f32, Tag::tnc};
}
memory::desc TrainLayer::state_md(std::int32_t rows) const {
  return {Dims{1, 1, rows, hidden_}, memory::data_type::f32, Tag::ldnc};
}

TrainLayer::Grads TrainLayer::new_grads() const {
  Grads g;
  g.layer.assign(in_ * gates_ * hidden_, 0.0f);
  g.iter.assign(hidden_ * gates_ * hidden_, 0.0f);
  g.bias.assign((cell_ == Cell::gru ? gates_ + 1 : gates_) * hidden_, 0.0f);
  return g;
}

void TrainLayer::load(const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                      const Tensor& b_hh, Weights& w) const {
  const std::int64_t G = gates_, H = hidden_, I = in_;
  const float* wi = w_ih.f32();
  const float* wh = w_hh.f32();
  w.layer.resize(I * G * H);
  w.iter.resize(H * G * H);
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t o = 0; o < H; ++o) {
      const std::int64_t row = order_[g] * H + o;
      for (std::int64_t i = 0; i < I; ++i) w.layer[(i * G + g) * H + o] = wi[row * I + i];
      for (std::int64_t j = 0; j < H; ++j) w.iter[(j * G + g) * H + o] = wh[row * H + j];
    }
  const float* bi = b_ih.f32();
  const float* bh = b_hh.f32();
  w.bias.resize((cell_ == Cell::gru ? G + 1 : G) * H);
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t o = 0; o < H; ++o) {
      const std::int64_t row = order_[g] * H + o;
      // The GRU's new gate keeps b_hn apart: it sits inside r * (W_hn h + b_hn).
      const bool split = cell_ == Cell::gru && g == 2;
      w.bias[g * H + o] = split ? bi[row] : bi[row] + bh[row];
      if (split) w.bias[3 * H + o] = bh[row];
    }
  w.layer_in.clear();
  w.iter_in.clear();
}

memory TrainLayer::weights_in(Weights& w, bool layer, const memory::desc& to) const {
  auto& done = layer ? w.layer_in : w.iter_in;
  for (const auto& [desc, mem] : done)
    if (desc == to) return mem;
  const memory::desc from = layer ? weights_layer_md() : weights_iter_md();
  memory source = wrap(from, (layer ? w.layer : w.iter).data());
  if (to == from) return source;
  memory target(to, cpu());
  dnnl::reorder(source, target).execute(stream(), source, target);
  stream().wait();
  done.emplace_back(to, target);
  return target;
}

namespace {

// The primitives of one (forward, backward) pair and the memory layouts they chose.
template <typename Forward, typename Backward, typename Primitives, typename ForwardPd,
          typename BackwardPd>
void keep(Primitives& p, const ForwardPd& fpd, const BackwardPd& bpd) {
  p.forward = Forward(fpd);
  p.backward = Backward(bpd);
  p.forward_scratchpad = fpd.scratchpad_desc();
  p.backward_scratchpad = bpd.scratchpad_desc();
  p.workspace = fpd.workspace_desc();
  p.forward_layer = fpd.weights_layer_desc();
  p.forward_iter = fpd.weights_iter_desc();
  p.backward_layer = bpd.weights_layer_desc();
  p.backward_iter = bpd.weights_iter_desc();
}

}  // namespace

std::shared_ptr<const TrainLayer::Primitives> TrainLayer::prepare(std::int32_t steps,
                                                                  std::int32_t rows) const {
  const auto key = std::make_tuple(steps, rows, thread_count());
  const std::lock_guard lock(cache_->mutex);
  auto& cache = cache_->map;
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= kMaxCached) cache.clear();

  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto src = sequence_md(steps, rows, in_), dst = sequence_md(steps, rows, hidden_);
  const auto state = state_md(rows);
  const auto direction = dnnl::rnn_direction::unidirectional_left2right;
  const auto training = dnnl::prop_kind::forward_training;
  const auto backward = dnnl::prop_kind::backward;
  const auto wl = with_any(weights_layer_md()), wi = with_any(weights_iter_md());
  // Gradients in the plain layouts (to_torch reads them); the weights in whatever layout the
  // primitive prefers (its fast kernels need their own).
  const auto dwl = weights_layer_md(), dwi = weights_iter_md();
  auto p = std::make_shared<Primitives>();
  if (cell_ == Cell::lstm) {
    dnnl::lstm_forward::desc fd(training, direction, src, state, state, wl, wi, bias_md(), dst,
                                state, state);
    dnnl::lstm_forward::primitive_desc fpd(fd, attr, cpu());
    dnnl::lstm_backward::desc bd(backward, direction, src, state, state, wl, wi, bias_md(), dst,
                                 state, state, src, state, state, dwl, dwi, bias_md(), dst, state,
                                 state);
    dnnl::lstm_backward::primitive_desc bpd(bd, attr, cpu(), fpd);
    keep<dnnl::lstm_forward, dnnl::lstm_backward>(*p, fpd, bpd);
  } else {
    dnnl::lbr_gru_forward::desc fd(training, direction, src, state, wl, wi, bias_md(), dst, state);
    dnnl::lbr_gru_forward::primitive_desc fpd(fd, attr, cpu());
    dnnl::lbr_gru_backward::desc bd(backward, direction, src, state, wl, wi, bias_md(), dst, state,
                                    src, state, dwl, dwi, bias_md(), dst, state);
    dnnl::lbr_gru_backward::primitive_desc bpd(bd, attr, cpu(), fpd);
    keep<dnnl::lbr_gru_forward, dnnl::lbr_gru_backward>(*p, fpd, bpd);
  }
  cache.emplace(key, p);
  return p;
}

void TrainLayer::forward(Weights& w, std::int32_t steps, std::int32_t rows, const float* x,
                         const float* h0, const float* c0, Run& run) const {
  const bool lstm = cell_ == Cell::lstm;
  const auto n = static_cast<std::size_t>(steps) * rows;
  const auto state = static_cast<std::size_t>(rows) * hidden_;
  run.steps = steps;
  run.rows = rows;
  run.x.assign(x, x + n * in_);
  run.h0.assign(h0, h0 + state);
  if (lstm) run.c0.assign(c0, c0 + state);
  run.y.resize(n * hidden_);
  run.h.resize(state);
  if (lstm) run.c.resize(state);
  if (steps == 0 || rows == 0) return;
  const auto p = prepare(steps, rows);
  run.workspace = memory(p->workspace, cpu());
  const auto st = state_md(rows);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC_LAYER, wrap(sequence_md(steps, rows, in_), run.x.data())},
      {DNNL_ARG_SRC_ITER, wrap(st, run.h0.data())},
      {DNNL_ARG_WEIGHTS_LAYER, weights_in(w, true, p->forward_layer)},
      {DNNL_ARG_WEIGHTS_ITER, weights_in(w, false, p->forward_iter)},
      {DNNL_ARG_BIAS, wrap(bias_md(), w.bias.data())},
      {DNNL_ARG_DST_LAYER, wrap(sequence_md(steps, rows, hidden_), run.y.data())},
      {DNNL_ARG_DST_ITER, wrap(st, run.h.data())},
      {DNNL_ARG_WORKSPACE, run.workspace},
      {DNNL_ARG_SCRATCHPAD, scratchpad(p->forward_scratchpad)},
  };
  if (lstm) {
    args.emplace(DNNL_ARG_SRC_ITER_C, wrap(st, run.c0.data()));
    args.emplace(DNNL_ARG_DST_ITER_C, wrap(st, run.c.data()));
  }
  p->forward.execute(stream(), args);
  stream().wait();
}

void TrainLayer::backward(Weights& w, const Run& run, const float* dy, const float* dh,
                          const float* dc, float* dx, float* dh0, float* dc0, Grads& g) const {
  const bool lstm = cell_ == Cell::lstm;
  const std::int32_t steps = run.steps, rows = run.rows;
  const auto state = static_cast<std::size_t>(rows) * hidden_;
  if (steps == 0 || rows == 0) return;
  thread_local std::vector<float> zeros;
  zeros.assign(state, 0.0f);
  const auto p = prepare(steps, rows);
  const auto st = state_md(rows);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC_LAYER, wrap(sequence_md(steps, rows, in_), run.x.data())},
      {DNNL_ARG_SRC_ITER, wrap(st, run.h0.data())},
      {DNNL_ARG_WEIGHTS_LAYER, weights_in(w, true, p->backward_layer)},
      {DNNL_ARG_WEIGHTS_ITER, weights_in(w, false, p->backward_iter)},
      {DNNL_ARG_BIAS, wrap(bias_md(), w.bias.data())},
      {DNNL_ARG_DST_LAYER, wrap(sequence_md(steps, rows, hidden_), run.y.data())},
      {DNNL_ARG_DST_ITER, wrap(st, run.h.data())},
      {DNNL_ARG_WORKSPACE, run.workspace},
      {DNNL_ARG_DIFF_SRC_LAYER, wrap(sequence_md(steps, rows, in_), dx)},
      {DNNL_ARG_DIFF_SRC_ITER, wrap(st, dh0)},
      {DNNL_ARG_DIFF_WEIGHTS_LAYER, wrap(weights_layer_md(), g.layer.data())},
      {DNNL_ARG_DIFF_WEIGHTS_ITER, wrap(weights_iter_md(), g.iter.data())},
      {DNNL_ARG_DIFF_BIAS, wrap(bias_md(), g.bias.data())},
      {DNNL_ARG_DIFF_DST_LAYER, wrap(sequence_md(steps, rows, hidden_), dy)},
      {DNNL_ARG_DIFF_DST_ITER, wrap(st, dh ? dh : zeros.data())},
      {DNNL_ARG_SCRATCHPAD, scratchpad(p->backward_scratchpad)},
  };
  if (lstm) {
    args.emplace(DNNL_ARG_SRC_ITER_C, wrap(st, run.c0.data()));
    args.emplace(DNNL_ARG_DST_ITER_C, wrap(st, run.c.data()));
    args.emplace(DNNL_ARG_DIFF_SRC_ITER_C, wrap(st, dc0));
    args.emplace(DNNL_ARG_DIFF_DST_ITER_C, wrap(st, dc ? dc : zeros.data()));
  }
  p->backward.execute(stream(), args);
  stream().wait();
}

void TrainLayer::to_torch(const Grads& g, Tensor& dw_ih, Tensor& dw_hh, Tensor& db_ih,
                          Tensor& db_hh) const {
  const std::int64_t G = gates_, H = hidden_, I = in_;
  float* wi = dw_ih.f32();
  float* wh = dw_hh.f32();
  float* bi = db_ih.f32();
  float* bh = db_hh.f32();
  for (std::int64_t gate = 0; gate < G; ++gate)
    for (std::int64_t o = 0; o < H; ++o) {
      const std::int64_t row = order_[gate] * H + o;
      for (std::int64_t i = 0; i < I; ++i) wi[row * I + i] += g.layer[(i * G + gate) * H + o];
      for (std::int64_t j = 0; j < H; ++j) wh[row * H + j] += g.iter[(j * G + gate) * H + o];
      // The forward summed b_ih and b_hh (but the GRU's b_hn): both get the sum's gradient.
      const bool split = cell_ == Cell::gru && gate == 2;
      bi[row] += g.bias[gate * H + o];
      bh[row] += split ? g.bias[3 * H + o] : g.bias[gate * H + o];
    }
}

}  // namespace masque::rnn
