#include "rnn_layer.hpp"
#include "rnn_dnnl.hpp"

#include <algorithm>
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

// Primitives are created per (rows, threads); a run with many distinct batch sizes would
// otherwise keep adding. Beyond this, the cache starts over.
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
// c <- f c + i g, h_out = o tanh(c), also stored to `y` (a sequence's output row) when given.
// The pointers do not alias (restrict: without it GCC does not vectorize the loop).
template <bool kToY>
MASQUE_VECTORIZE void lstm_cell(const float* __restrict__ xg, const float* __restrict__ hg,
                                std::int64_t H, float* __restrict__ c, float* __restrict__ h_out,
                                float* __restrict__ y) {
  for (std::int64_t k = 0; k < H; ++k) {
    const float i = sigmoid(xg[k] + hg[k]);
    const float f = sigmoid(xg[H + k] + hg[H + k]);
    const float g = fast_tanh(xg[2 * H + k] + hg[2 * H + k]);
    const float o = sigmoid(xg[3 * H + k] + hg[3 * H + k]);
    c[k] = f * c[k] + i * g;
    const float state = o * fast_tanh(c[k]);
    h_out[k] = state;
    if constexpr (kToY) y[k] = state;
  }
}

// torch's GRU cell on one row, gates r z n: xg = W_ih x + b_ih, hg = W_hh h + b_hh;
// n = tanh(xg_n + r hg_n), h_out = (1 - z) n + z h (and y, as above).
template <bool kToY>
MASQUE_VECTORIZE void gru_cell(const float* __restrict__ xg, const float* __restrict__ hg,
                               const float* __restrict__ h, std::int64_t H,
                               float* __restrict__ h_out, float* __restrict__ y) {
  for (std::int64_t k = 0; k < H; ++k) {
    const float r = sigmoid(xg[k] + hg[k]);
    const float z = sigmoid(xg[H + k] + hg[H + k]);
    const float n = fast_tanh(xg[2 * H + k] + r * hg[2 * H + k]);
    const float state = (1.0f - z) * n + z * h[k];
    h_out[k] = state;
    if constexpr (kToY) y[k] = state;
  }
}

}  // namespace

struct RnnLayer::Impl {
  // oneDNN's lstm_forward for one step of `rows` rows, with its weights in the primitive's layout.
  struct Prepared {
    dnnl::primitive primitive;
    memory::desc scratchpad;
    memory weights_layer, weights_iter;
  };
  using Key = std::tuple<std::int32_t, int>;  // rows, threads

  Cell cell = Cell::lstm;
  DType compute = DType::f32;
  std::int64_t in = 0, hidden = 0, gates = 0;
  // input: W_ih x + b_ih (+ b_hh for the LSTM); recurrent: W_hh h (+ b_hh for the GRU), both in
  // torch's gate order.
  Linear input, recurrent;
  // The f32 LSTM's weights for the primitive: ldigo, ldigo, ldgo (empty otherwise).
  std::vector<float> weights_layer, weights_iter, bias;
  mutable std::mutex mutex;
  mutable std::map<Key, std::shared_ptr<const Prepared>> cache;
  mutable std::vector<std::pair<memory::desc, memory>> reordered_layer, reordered_iter;

  // Whether a step of `rows` rows runs on the primitive (see the header): only where oneDNN runs
  // it on brgemm (AVX-512). Without AVX-512 its gemm driver sums a row differently for different
  // row counts, so a row's result would depend on its batch; the Linears (on the 1x1
  // convolution there) do not.
  bool on_primitive(std::int32_t rows) const {
    return cell == Cell::lstm && compute == DType::f32 && rows > 1 && rnn_on_brgemm();
  }
  static bool rnn_on_brgemm() {
    static const bool yes = [] {
      switch (dnnl::get_effective_cpu_isa()) {
        case dnnl::cpu_isa::avx512_core:
        case dnnl::cpu_isa::avx512_core_vnni:
        case dnnl::cpu_isa::avx512_core_bf16:
        case dnnl::cpu_isa::avx512_core_amx:
          return true;
        default:
          return false;
      }
    }();
    return yes;
  }

  memory::desc weights_layer_md() const {
    return {Dims{1, 1, in, gates, hidden}, memory::data_type::f32, Tag::ldigo};
  }
  memory::desc weights_iter_md() const {
    return {Dims{1, 1, hidden, gates, hidden}, memory::data_type::f32, Tag::ldigo};
  }
  memory::desc bias_md() const {
    return {Dims{1, 1, gates, hidden}, memory::data_type::f32, Tag::ldgo};
  }
  memory::desc step_md(std::int32_t rows, std::int64_t width) const {
    return {Dims{1, rows, width}, memory::data_type::f32, Tag::tnc};
  }
  memory::desc state_md(std::int32_t rows) const {
    return {Dims{1, 1, rows, hidden}, memory::data_type::f32, Tag::ldnc};
  }
  // The layer's weights in `any` layout: oneDNN picks its packed / blocked one.
  static memory::desc with_any(const memory::desc& md) {
    return {md.dims(), md.data_type(), Tag::any};
  }

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

  std::shared_ptr<const Prepared> prepare(std::int32_t rows) const {
    const Key key{rows, thread_count()};
    const std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    if (cache.size() >= kMaxCached) {
      // The reordered weights go too: a corpus of varied batch sizes would otherwise keep
      // adding copies of them where the packed layouts differ per shape.
      cache.clear();
      reordered_layer.clear();
      reordered_iter.clear();
    }
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const auto state = state_md(rows);
    dnnl::lstm_forward::desc d(
        dnnl::prop_kind::forward_inference, dnnl::rnn_direction::unidirectional_left2right,
        step_md(rows, in), state, state, with_any(weights_layer_md()), with_any(weights_iter_md()),
        bias_md(), step_md(rows, hidden), state, state);
    dnnl::lstm_forward::primitive_desc pd(d, attr, cpu());
    auto prepared = std::make_shared<Prepared>();
    prepared->primitive = dnnl::lstm_forward(pd);
    prepared->scratchpad = pd.scratchpad_desc();
    prepared->weights_layer =
        weights_in(pd.weights_layer_desc(), weights_layer_md(), weights_layer);
    prepared->weights_iter = weights_in(pd.weights_iter_desc(), weights_iter_md(), weights_iter);
    cache.emplace(key, prepared);
    return prepared;
  }

  // The recurrence from the input gates of each packed row (RnnLayer::recur): per step W_hh h
  // over the rows still running, then the cell per row. The state lives in two buffers of the
  // batch's rows (a step's rows are a prefix of the previous step's); the cell also stores each
  // new state at its row's destination.
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
      // The step's gate rows are scattered (table rows, reversed rows), and the cells waited
      // on their loads: fetched while the product runs (bench/rnn, batch 32: 3-5 % off an int8
      // encode, 2 % off an f32 GRU's).
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t k = 0; k < G * H; k += 16)
          __builtin_prefetch(xg_rows[offsets[t] + r] + k, 0, 2);
      recurrent.forward(h_in, rows, hg);
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t p = offsets[t] + r;
        cell_row(xg_rows[p], hg + r * G * H, h_in + r * H, c + r * H, h_out + r * H, y_rows[p]);
      }
    }
  }

  // One step of `rows` rows on the two Linears, then the cell per row.
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
  // LSTM's cell state c [H] is updated in place (the GRU has none: c unused). h_out [H], and a
  // copy at y unless null.
  void cell_row(const float* xg, const float* hg, const float* h, float* c, float* h_out,
                float* y = nullptr) const {
    if (cell == Cell::lstm)
      y ? lstm_cell<true>(xg, hg, hidden, c, h_out, y)
        : lstm_cell<false>(xg, hg, hidden, c, h_out, y);
    else
      y ? gru_cell<true>(xg, hg, h, hidden, h_out, y)
        : gru_cell<false>(xg, hg, h, hidden, h_out, y);
  }

  // One LSTM step of `rows` rows on the primitive.
  void step_primitive(std::int32_t rows, const float* x, const float* h, const float* c,
                      float* h_out, float* c_out) const {
    const auto prepared = prepare(rows);
    // oneDNN's kernels expect a 64-byte aligned scratchpad.
    thread_local std::vector<char> scratch;
    std::size_t space = prepared->scratchpad.get_size() + 64;
    void* scratchpad = grown(scratch, space);
    std::align(64, prepared->scratchpad.get_size(), scratchpad, space);
    // dst_layer and dst_iter of one step are the same numbers; the layer output goes to h_out.
    thread_local std::vector<float> discard;
    auto mem = [](const memory::desc& md, const void* data) {
      return memory(md, cpu(), const_cast<void*>(data));
    };
    const auto state = state_md(rows);
    prepared->primitive.execute(stream(),
                                {{DNNL_ARG_SRC_LAYER, mem(step_md(rows, in), x)},
                                 {DNNL_ARG_SRC_ITER, mem(state, h)},
                                 {DNNL_ARG_SRC_ITER_C, mem(state, c)},
                                 {DNNL_ARG_WEIGHTS_LAYER, prepared->weights_layer},
                                 {DNNL_ARG_WEIGHTS_ITER, prepared->weights_iter},
                                 {DNNL_ARG_BIAS, mem(bias_md(), bias.data())},
                                 {DNNL_ARG_DST_LAYER, mem(step_md(rows, hidden), h_out)},
                                 {DNNL_ARG_DST_ITER, mem(state, grown(discard, rows * hidden))},
                                 {DNNL_ARG_DST_ITER_C, mem(state, c_out)},
                                 {DNNL_ARG_SCRATCHPAD, mem(prepared->scratchpad, scratchpad)}});
    stream().wait();
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
  impl->compute = compute;
  impl->gates = cell == Cell::lstm ? 4 : 3;
  const std::int64_t G = impl->gates, H = w_hh.dim(1), I = w_ih.dim(1);
  impl->in = I;
  impl->hidden = H;
  const float* bh = b_hh.f32();
  Tensor input_bias = b_ih.clone();
  if (cell == Cell::lstm)
    for (std::int64_t i = 0; i < G * H; ++i) input_bias.f32()[i] += bh[i];
  // Where the CPU has no bf16 matmuls, oneDNN refuses one when the layer is built or at its
  // first product: either way the error says what to do.
  const auto no_bf16 = [](const std::exception& e) {
    return ConfigError(std::string("rnn-seq2seq: matmul_dtype=bf16 needs a CPU with AVX-512 "
                                   "(oneDNN has no bf16 matmul kernels here: ") +
                       e.what() + ")");
  };
  try {
    impl->input = Linear(w_ih, input_bias, {.compute = compute}, Int8Policy::where_it_pays);
    impl->recurrent = Linear(w_hh, cell == Cell::gru ? b_hh : Tensor(), {.compute = compute},
                             Int8Policy::where_it_pays);
  } catch (const RuntimeError& e) {
    if (compute != DType::bf16) throw;
    throw no_bf16(e);
  }
  if (cell == Cell::lstm && compute == DType::f32) {
    // torch's [4*H, in] rows in the order i f g o -> oneDNN's [in][gate][H], the same order.
    const float* wi = w_ih.f32();
    const float* wh = w_hh.f32();
    impl->weights_layer.resize(I * G * H);
    impl->weights_iter.resize(H * G * H);
    for (std::int64_t row = 0; row < G * H; ++row) {
      for (std::int64_t i = 0; i < I; ++i) impl->weights_layer[i * G * H + row] = wi[row * I + i];
      for (std::int64_t j = 0; j < H; ++j) impl->weights_iter[j * G * H + row] = wh[row * H + j];
    }
    impl->bias.assign(input_bias.f32(), input_bias.f32() + G * H);
  }
  if (compute == DType::bf16) {
    // Fail at load, not at the first record, where the CPU has no bf16 matmuls.
    try {
      const std::vector<float> zeros(static_cast<std::size_t>(H), 0.0f);
      std::vector<float> out(static_cast<std::size_t>(G * H));
      impl->recurrent.forward(zeros.data(), 1, out.data());
    } catch (const std::exception& e) {
      throw no_bf16(e);
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
  out.emplace_back(prefix + ".input", &impl_->input);
  out.emplace_back(prefix + ".recurrent", &impl_->recurrent);
}

void RnnLayer::input_gates(const float* x, std::int64_t rows, float* xg) const {
  impl_->input.forward(x, rows, xg);
}

void RnnLayer::recur(std::span<const std::int32_t> lengths, std::span<const float* const> xg_rows,
                     std::span<float* const> y_rows) const {
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

void RnnLayer::step(std::int32_t batch, const float* x, const float* h, const float* c,
                    float* h_out, float* c_out) const {
  if (batch == 0) return;
  if (impl_->on_primitive(batch)) return impl_->step_primitive(batch, x, h, c, h_out, c_out);
  impl_->step_rows(batch, x, h, c, h_out, c_out);
}

}  // namespace masque::rnn
