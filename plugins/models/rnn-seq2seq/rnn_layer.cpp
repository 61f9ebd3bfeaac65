#include "rnn_layer.hpp"
#include "rnn_dnnl.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>

#include "fast_tanh.hpp"
#include "masque/error.hpp"
#include "masque/layers.hpp"
#include "masque/threading.hpp"

namespace masque::rnn {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dims = memory::dims;

// Primitives are created per (steps, rows, stateful, threads); a run with many distinct source
// lengths and batch sizes would otherwise keep adding. Beyond this, the cache starts over.
constexpr std::size_t kMaxCached = 128;

// Per-thread buffers only grow: resize() to a varying size would zero-fill on every regrowth.
template <typename T>
T* grown(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

inline float sigmoid(float x) {
  return 0.5f + 0.5f * fast_tanh(0.5f * x);
}

// torch's LSTM cell on one row, gates i f g o: xg = W_ih x + b_ih + b_hh, hg = W_hh h;
// c <- f c + i g, h_out = o tanh(c).
// The pointers do not alias (restrict: without it GCC does not vectorize the loop).
MASQUE_VECTORIZE void lstm_cell(const float* __restrict__ xg, const float* __restrict__ hg,
                                std::int64_t H, float* __restrict__ c, float* __restrict__ h_out) {
  for (std::int64_t k = 0; k < H; ++k) {
    const float i = sigmoid(xg[k] + hg[k]);
    const float f = sigmoid(xg[H + k] + hg[H + k]);
    const float g = fast_tanh(xg[2 * H + k] + hg[2 * H + k]);
    const float o = sigmoid(xg[3 * H + k] + hg[3 * H + k]);
    c[k] = f * c[k] + i * g;
    h_out[k] = o * fast_tanh(c[k]);
  }
}

// torch's GRU cell on one row, gates r z n: xg = W_ih x + b_ih, hg = W_hh h + b_hh;
// n = tanh(xg_n + r hg_n), h_out = (1 - z) n + z h.
MASQUE_VECTORIZE void gru_cell(const float* __restrict__ xg, const float* __restrict__ hg,
                               const float* __restrict__ h, std::int64_t H,
                               float* __restrict__ h_out) {
  for (std::int64_t k = 0; k < H; ++k) {
    const float r = sigmoid(xg[k] + hg[k]);
    const float z = sigmoid(xg[H + k] + hg[H + k]);
    const float n = fast_tanh(xg[2 * H + k] + r * hg[2 * H + k]);
    h_out[k] = (1.0f - z) * n + z * h[k];
  }
}

}  // namespace

struct RnnLayer::Impl {
  struct Prepared {
    dnnl::primitive primitive;
    memory::desc scratchpad;
    memory weights_layer, weights_iter;  // in the primitive's layout
  };
  using Key = std::tuple<std::int32_t, std::int32_t, bool, int>;

  Cell cell = Cell::lstm;
  // f32, or bf16: the layer input, the hidden state and the weights rounded to bfloat16 for the
  // products (f32 accumulation); outputs and hidden state come back in bfloat16 (widened to
  // f32), the LSTM cell state stays f32.
  memory::data_type type = memory::data_type::f32;
  std::int64_t in = 0, hidden = 0, gates = 0;
  std::vector<float> weights_layer, weights_iter, bias;  // ldigo, ldigo, ldgo
  // f32 and int8: the recurrence as Linears (see run_packed()). input: W_ih x + b_ih (+ b_hh
  // for the LSTM); recurrent: W_hh h (+ b_hh for the GRU), both in torch's gate order.
  Linear input, recurrent;
  mutable std::mutex mutex;
  mutable std::map<Key, std::shared_ptr<const Prepared>> cache;
  mutable std::vector<std::pair<memory::desc, memory>> reordered_layer, reordered_iter;

  bool bf16() const { return type == memory::data_type::bf16; }
  // int8: the recurrence on the two Linears (int8 where it pays), at any row count.
  bool int8 = false;
  memory::desc weights_layer_md() const {
    return {Dims{1, 1, in, gates, hidden}, memory::data_type::f32, Tag::ldigo};
  }
  memory::desc weights_iter_md() const {
    return {Dims{1, 1, hidden, gates, hidden}, memory::data_type::f32, Tag::ldigo};
  }
  memory::desc bias_md() const {
    const std::int64_t biases = cell == Cell::gru ? gates + 1 : gates;
    return {Dims{1, 1, biases, hidden}, memory::data_type::f32, Tag::ldgo};
  }
  memory::desc sequence_md(std::int32_t steps, std::int32_t rows, std::int64_t width) const {
    return {Dims{steps, rows, width}, type, Tag::tnc};
  }
  // The hidden state (in the layer's type) and the LSTM cell state (f32).
  memory::desc state_md(std::int32_t rows, bool present) const {
    if (!present) return {};
    return {Dims{1, 1, rows, hidden}, type, Tag::ldnc};
  }
  memory::desc cell_state_md(std::int32_t rows, bool present) const {
    if (!present) return {};
    return {Dims{1, 1, rows, hidden}, memory::data_type::f32, Tag::ldnc};
  }

  // The layer's weights in `any` layout and its type: oneDNN picks its packed / blocked one.
  memory::desc with_any(const memory::desc& md) const { return {md.dims(), type, Tag::any}; }

  // The weights (`plain`, in layout `from`) in layout `to`: reordered once per layout and kept
  // (packed layouts may depend on the row count; there are few of them). Called under `mutex`.
  memory weights_in(const memory::desc& to, const memory::desc& from,
                    const std::vector<float>& plain) const {
    // Keyed by the source too: with in = H, both weights have the same layout.
    auto& reordered = &plain == &weights_layer ? reordered_layer : reordered_iter;
    for (const auto& [desc, mem] : reordered)
      if (desc == to) return mem;
    memory source(from, cpu(), const_cast<float*>(plain.data()));
    if (to == from) return source;
    memory target(to, cpu());
    dnnl::reorder(source, target).execute(stream(), source, target);
    stream().wait();
    reordered.emplace_back(to, target);
    return target;
  }

  std::shared_ptr<const Prepared> prepare(std::int32_t steps, std::int32_t rows,
                                          bool stateful) const {
    const Key key{steps, rows, stateful, thread_count()};
    const std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    if (cache.size() >= kMaxCached) {
      // The reordered weights go too: packed layouts (bf16 GRU) differ per shape, and a corpus
      // of varied lengths would otherwise keep adding copies of the weights.
      cache.clear();
      reordered_layer.clear();
      reordered_iter.clear();
    }

    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const auto src = sequence_md(steps, rows, in), dst = sequence_md(steps, rows, hidden);
    const auto state = state_md(rows, stateful), cell_state = cell_state_md(rows, stateful);
    const auto direction = dnnl::rnn_direction::unidirectional_left2right;
    const auto prop = dnnl::prop_kind::forward_inference;
    auto prepared = std::make_shared<Prepared>();
    // Weights in `any` layout (the fast kernels need it), reordered from the f32 ldigo ones
    // once per layout (see weights_in()).
    const auto weights_layer_any = with_any(weights_layer_md());
    const auto weights_iter_any = with_any(weights_iter_md());
    if (cell == Cell::lstm) {
      dnnl::lstm_forward::desc d(prop, direction, src, state, cell_state, weights_layer_any,
                                 weights_iter_any, bias_md(), dst, state, cell_state);
      dnnl::lstm_forward::primitive_desc pd(d, attr, cpu());
      prepared->primitive = dnnl::lstm_forward(pd);
      prepared->scratchpad = pd.scratchpad_desc();
      prepared->weights_layer =
          weights_in(pd.weights_layer_desc(), weights_layer_md(), weights_layer);
      prepared->weights_iter = weights_in(pd.weights_iter_desc(), weights_iter_md(), weights_iter);
    } else {
      dnnl::lbr_gru_forward::desc d(prop, direction, src, state, weights_layer_any,
                                    weights_iter_any, bias_md(), dst, state);
      dnnl::lbr_gru_forward::primitive_desc pd(d, attr, cpu());
      prepared->primitive = dnnl::lbr_gru_forward(pd);
      prepared->scratchpad = pd.scratchpad_desc();
      prepared->weights_layer =
          weights_in(pd.weights_layer_desc(), weights_layer_md(), weights_layer);
      prepared->weights_iter = weights_in(pd.weights_iter_desc(), weights_iter_md(), weights_iter);
    }
    cache.emplace(key, prepared);
    return prepared;
  }

  // A packed sequence (RnnLayer::run) on the two Linears: the input projection of every step in
  // one product, then per step W_hh h over the rows still running and the cell per row.
  // Used in int8 (any row count), and in f32 for one row (a source encoded alone): the
  // primitive's brgemm is built for many rows, and at one row it reads the recurrent weights at a
  // fraction of the cache's bandwidth, where libmasque's one-row kernel streams them
  // (Linear::streams_one_row).
  void run_packed(std::span<const std::int32_t> lengths, const float* x, float* y) const {
    std::int64_t total = 0;
    for (const std::int32_t n : lengths) total += n;
    const std::int64_t H = hidden, G = gates;
    thread_local std::vector<float> xg_buffer;
    float* xg = grown(xg_buffer, static_cast<std::size_t>(total * G * H));
    input.forward(x, total, xg);
    thread_local std::vector<const float*> xg_rows;
    thread_local std::vector<float*> y_rows;
    xg_rows.resize(static_cast<std::size_t>(total));
    y_rows.resize(xg_rows.size());
    for (std::int64_t p = 0; p < total; ++p) {
      xg_rows[p] = xg + p * G * H;
      y_rows[p] = y + p * H;
    }
    recur(lengths, xg_rows, y_rows);
  }

  // The recurrence from the input gates of each packed row (RnnLayer::recur): per step W_hh h
  // over the rows still running, then the cell per row. The state lives in two buffers of the
  // batch's rows (a step's rows are a prefix of the previous step's); each new state is also
  // copied to its row's destination.
  void recur(std::span<const std::int32_t> lengths, std::span<const float* const> xg_rows,
             std::span<float* const> y_rows) const {
    const std::int64_t H = hidden, G = gates;
    const std::vector<std::int64_t> offsets = packed_offsets(lengths);
    const std::int32_t steps = lengths[0];
    const std::size_t batch = lengths.size();
    thread_local std::vector<float> hg_buffer, c_buffer, h_buffer;
    float* hg = grown(hg_buffer, batch * G * H);
    float* c = grown(c_buffer, batch * H);
    float* h = grown(h_buffer, 2 * batch * H);
    std::fill_n(c, batch * H, 0.0f);
    std::fill_n(h, batch * H, 0.0f);
    for (std::int32_t t = 0; t < steps; ++t) {
      const std::int64_t rows = offsets[t + 1] - offsets[t];
      const float* h_in = h + (t & 1) * batch * H;
      float* h_out = h + ((t & 1) ^ 1) * batch * H;
      recurrent.forward(h_in, rows, hg);
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t p = offsets[t] + r;
        cell_row(xg_rows[p], hg + r * G * H, h_in + r * H, c + r * H, h_out + r * H);
        std::copy_n(h_out + r * H, H, y_rows[p]);
      }
    }
  }

  // One step of `rows` rows: the products on the two Linears, then the cell per row.
  // Used in int8, for one row, and for the GRU at any row count: oneDNN 2.6 has no brgemm kernel
  // for the linear-before-reset GRU, and its reference driver runs a decoding step's products at
  // ~80 GFLOP/s where a Linear's matmul reaches ~94 (bench/rnn, batch 32). The LSTM's brgemm
  // primitive beats two Linears there (134 against 150 ms).
  void step_rows(std::int32_t rows, const float* x, const float* h, const float* c, float* h_out,
                 float* c_out) const {
    const std::int64_t H = hidden, G = gates;
    thread_local std::vector<float> xg_buffer, hg_buffer;
    float* xg = grown(xg_buffer, static_cast<std::size_t>(rows) * G * H);
    float* hg = grown(hg_buffer, static_cast<std::size_t>(rows) * G * H);
    input.forward(x, rows, xg);
    recurrent.forward(h, rows, hg);
    if (cell == Cell::lstm) std::copy_n(c, rows * H, c_out);
    for (std::int64_t r = 0; r < rows; ++r)
      cell_row(xg + r * G * H, hg + r * G * H, h + r * H, c_out ? c_out + r * H : nullptr,
               h_out + r * H);
  }

  // The cell on one row: xg, hg [G*H] (the two products), h [H] the state they came from; the
  // LSTM's cell state c [H] is updated in place (the GRU has none: c unused). h_out [H].
  void cell_row(const float* xg, const float* hg, const float* h, float* c, float* h_out) const {
    if (cell == Cell::lstm)
      lstm_cell(xg, hg, hidden, c, h_out);
    else
      gru_cell(xg, hg, h, hidden, h_out);
  }

  // h, c, h_out, c_out: null for a run from the zero state whose final state is not wanted.
  void execute(std::int32_t steps, std::int32_t rows, const float* x, const float* h,
               const float* c, float* y, float* h_out, float* c_out) const {
    if (steps == 0 || rows == 0) return;
    const bool stateful = h != nullptr;
    const auto prepared = prepare(steps, rows, stateful);
    // oneDNN's kernels expect a 64-byte aligned scratchpad.
    thread_local std::vector<char> scratch;
    std::size_t space = prepared->scratchpad.get_size() + 64;
    void* scratchpad = grown(scratch, space);
    std::align(64, prepared->scratchpad.get_size(), scratchpad, space);
    auto mem = [](const memory::desc& md, const void* data) {
      return memory(md, cpu(), const_cast<void*>(data));
    };
    const std::int64_t x_size = std::int64_t{steps} * rows * in;
    const std::int64_t y_size = std::int64_t{steps} * rows * hidden, h_size = rows * hidden;
    // bf16: the f32 inputs rounded, the outputs widened after the call (per thread, kept).
    thread_local std::vector<std::uint16_t> x16, h16, y16, h_out16;
    const void* x_arg = x;
    const void* h_arg = h;
    void* y_arg = y;
    void* h_out_arg = h_out;
    if (bf16()) {
      round_to_bf16(x, x_size, grown(x16, x_size));
      x_arg = x16.data();
      y_arg = grown(y16, y_size);
      if (stateful) {
        round_to_bf16(h, h_size, grown(h16, h_size));
        h_arg = h16.data();
        h_out_arg = grown(h_out16, h_size);
      }
    }
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC_LAYER, mem(sequence_md(steps, rows, in), x_arg)},
        {DNNL_ARG_WEIGHTS_LAYER, prepared->weights_layer},
        {DNNL_ARG_WEIGHTS_ITER, prepared->weights_iter},
        {DNNL_ARG_BIAS, mem(bias_md(), bias.data())},
        {DNNL_ARG_DST_LAYER, mem(sequence_md(steps, rows, hidden), y_arg)},
        {DNNL_ARG_SCRATCHPAD, mem(prepared->scratchpad, scratchpad)},
    };
    if (stateful) {
      const auto state = state_md(rows, true);
      args.emplace(DNNL_ARG_SRC_ITER, mem(state, h_arg));
      args.emplace(DNNL_ARG_DST_ITER, mem(state, h_out_arg));
      if (cell == Cell::lstm) {
        const auto cell_state = cell_state_md(rows, true);
        args.emplace(DNNL_ARG_SRC_ITER_C, mem(cell_state, c));
        args.emplace(DNNL_ARG_DST_ITER_C, mem(cell_state, c_out));
      }
    }
    prepared->primitive.execute(stream(), args);
    stream().wait();
    if (!bf16()) return;
    widen_bf16(y16.data(), y_size, y);
    if (stateful) widen_bf16(h_out16.data(), h_size, h_out);
  }
};

RnnLayer::RnnLayer(Cell cell, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                   const Tensor& b_hh, DType compute) {
  if (compute != DType::f32 && compute != DType::bf16 && compute != DType::i8)
    throw ConfigError(
        std::string("rnn-seq2seq: recurrent layers compute in f32, bf16 or i8, not ") +
        to_string(compute));
  auto impl = std::make_shared<Impl>();
  impl->cell = cell;
  impl->type = compute == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  impl->gates = cell == Cell::lstm ? 4 : 3;
  const std::int64_t G = impl->gates, H = w_hh.dim(1), I = w_ih.dim(1);
  impl->in = I;
  impl->hidden = H;
  // oneDNN gate g is torch gate order[g]: LSTM i f g o = i f c o; GRU r z n -> u(=z) r o(=n).
  const std::array<std::int64_t, 4> order = cell == Cell::lstm
                                                ? std::array<std::int64_t, 4>{0, 1, 2, 3}
                                                : std::array<std::int64_t, 4>{1, 0, 2, 0};
  const float* wi = w_ih.f32();
  const float* wh = w_hh.f32();
  impl->weights_layer.resize(I * G * H);
  impl->weights_iter.resize(H * G * H);
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t o = 0; o < H; ++o) {
      const std::int64_t row = order[g] * H + o;
      for (std::int64_t i = 0; i < I; ++i)
        impl->weights_layer[(i * G + g) * H + o] = wi[row * I + i];
      for (std::int64_t j = 0; j < H; ++j)
        impl->weights_iter[(j * G + g) * H + o] = wh[row * H + j];
    }
  const float* bi = b_ih.f32();
  const float* bh = b_hh.f32();
  impl->bias.resize((cell == Cell::gru ? G + 1 : G) * H);
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t o = 0; o < H; ++o) {
      const std::int64_t row = order[g] * H + o;
      // The GRU's new gate keeps its two biases apart: b_in outside, b_hn inside r * (...).
      const bool split = cell == Cell::gru && g == 2;
      impl->bias[g * H + o] = split ? bi[row] : bi[row] + bh[row];
      if (split) impl->bias[3 * H + o] = bh[row];
    }
  if (!impl->bf16()) {
    Tensor input_bias = b_ih.clone();
    if (cell == Cell::lstm)
      for (std::int64_t i = 0; i < G * H; ++i) input_bias.f32()[i] += bh[i];
    impl->int8 = compute == DType::i8;
    impl->input = Linear(w_ih, input_bias, {.compute = compute}, Int8Policy::where_it_pays);
    impl->recurrent = Linear(w_hh, cell == Cell::gru ? b_hh : Tensor(), {.compute = compute},
                             Int8Policy::where_it_pays);
  } else {
    // Fail at load, not at the first record, where the CPU has no bf16 RNN kernels.
    try {
      impl->prepare(1, 1, true);
    } catch (const dnnl::error& e) {
      throw ConfigError(std::string("rnn-seq2seq: matmul_dtype=bf16 needs a CPU with AVX-512 "
                                    "(oneDNN has no bf16 recurrent kernels here: ") +
                        e.what() + ")");
    }
  }
  impl_ = std::move(impl);
}

std::int64_t RnnLayer::input_size() const {
  return impl_->in;
}
std::int64_t RnnLayer::hidden_size() const {
  return impl_->hidden;
}
std::int64_t RnnLayer::gate_width() const {
  return impl_->gates * impl_->hidden;
}

void RnnLayer::list_linears(const std::string& prefix, LinearList& out) const {
  if (impl_->bf16()) return;
  out.emplace_back(prefix + ".input", &impl_->input);
  out.emplace_back(prefix + ".recurrent", &impl_->recurrent);
}

bool RnnLayer::has_input_gates() const {
  return !impl_->bf16();
}

void RnnLayer::input_gates(const float* x, std::int64_t rows, float* xg) const {
  if (!has_input_gates()) throw RuntimeError("rnn-seq2seq: no input gates in bf16");
  impl_->input.forward(x, rows, xg);
}

void RnnLayer::recur(std::span<const std::int32_t> lengths, std::span<const float* const> xg_rows,
                     std::span<float* const> y_rows) const {
  if (!has_input_gates()) throw RuntimeError("rnn-seq2seq: no input gates in bf16");
  if (lengths.empty() || lengths[0] == 0) return;
  impl_->recur(lengths, xg_rows, y_rows);
}

std::vector<std::int64_t> packed_offsets(std::span<const std::int32_t> lengths) {
  const std::int32_t steps = lengths.empty() ? 0 : lengths[0];
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(steps) + 1, 0);
  auto rows = static_cast<std::int64_t>(lengths.size());
  for (std::int32_t t = 0; t < steps; ++t) {
    while (lengths[rows - 1] <= t) --rows;
    offsets[t + 1] = offsets[t] + rows;
  }
  return offsets;
}

void RnnLayer::run(std::span<const std::int32_t> lengths, const float* x, float* y) const {
  const auto batch = static_cast<std::int32_t>(lengths.size());
  if (batch == 0 || lengths[0] == 0) return;
  const std::int32_t steps = lengths[0];
  const std::int64_t in = impl_->in, H = impl_->hidden;
  if ((batch == 1 || impl_->int8) && !impl_->bf16()) return impl_->run_packed(lengths, x, y);
  if (lengths.back() == steps)
    return impl_->execute(steps, batch, x, nullptr, nullptr, y, nullptr, nullptr);
  // One call per distinct length over the rows still running: in the packed layout the
  // segment's steps are contiguous. The state passes between calls in two buffers (no output
  // may alias an input; the first starts at zero); a call's leading rows are the next's rows.
  const bool lstm = impl_->cell == Cell::lstm;
  thread_local std::vector<float> h_buffer, c_buffer;
  float* h = grown(h_buffer, 2 * batch * H);
  float* c = lstm ? grown(c_buffer, 2 * batch * H) : nullptr;
  std::fill_n(h, batch * H, 0.0f);
  if (lstm) std::fill_n(c, batch * H, 0.0f);
  std::int32_t t0 = 0, rows = batch;
  std::int64_t offset = 0;  // packed rows before step t0
  for (int flip = 0; t0 < steps; flip ^= 1) {
    while (lengths[rows - 1] <= t0) --rows;
    const std::int32_t t1 = lengths[rows - 1], n = t1 - t0;
    const std::int64_t in_state = flip * batch * H, out_state = (flip ^ 1) * batch * H;
    impl_->execute(n, rows, x + offset * in, h + in_state, lstm ? c + in_state : nullptr,
                   y + offset * H, h + out_state, lstm ? c + out_state : nullptr);
    offset += static_cast<std::int64_t>(n) * rows;
    t0 = t1;
  }
}

void RnnLayer::step(std::int32_t batch, const float* x, const float* h, const float* c,
                    float* h_out, float* c_out) const {
  if (!impl_->bf16() && (batch == 1 || impl_->cell == Cell::gru || impl_->int8))
    return impl_->step_rows(batch, x, h, c, h_out, c_out);
  // dst_layer and dst_iter of one step are the same numbers; the layer output goes to h_out.
  thread_local std::vector<float> discard;
  impl_->execute(1, batch, x, h, c, h_out, grown(discard, batch * impl_->hidden), c_out);
}

}  // namespace masque::rnn
