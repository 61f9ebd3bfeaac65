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

#include "masque/error.hpp"
#include "masque/threading.hpp"

namespace masque::rnn {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dims = memory::dims;

// Primitives are created per (steps, rows, stateful, threads); a run with many distinct source
// lengths and batch sizes would otherwise keep adding. Beyond this, the cache starts over.
constexpr std::size_t kMaxCached = 128;

}  // namespace

struct RnnLayer::Impl {
  struct Prepared {
    dnnl::primitive primitive;
    memory::desc scratchpad;
    memory weights_layer, weights_iter;  // in the primitive's layout
  };
  using Key = std::tuple<std::int32_t, std::int32_t, bool, int>;

  Cell cell = Cell::lstm;
  std::int64_t in = 0, hidden = 0, gates = 0;
  std::vector<float> weights_layer, weights_iter, bias;  // ldigo, ldigo, ldgo
  mutable std::mutex mutex;
  mutable std::map<Key, std::shared_ptr<const Prepared>> cache;
  mutable std::vector<std::pair<memory::desc, memory>> reordered_layer, reordered_iter;

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
    return {Dims{steps, rows, width}, memory::data_type::f32, Tag::tnc};
  }
  memory::desc state_md(std::int32_t rows, bool present) const {
    if (!present) return {};
    return {Dims{1, 1, rows, hidden}, memory::data_type::f32, Tag::ldnc};
  }

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

  std::shared_ptr<const Prepared> prepare(std::int32_t steps, std::int32_t rows,
                                          bool stateful) const {
    const Key key{steps, rows, stateful, thread_count()};
    const std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    if (cache.size() >= kMaxCached) cache.clear();

    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const auto src = sequence_md(steps, rows, in), dst = sequence_md(steps, rows, hidden);
    const auto state = state_md(rows, stateful);
    const auto direction = dnnl::rnn_direction::unidirectional_left2right;
    const auto prop = dnnl::prop_kind::forward_inference;
    auto prepared = std::make_shared<Prepared>();
    // Weights in `any` layout: oneDNN picks its packed / blocked one (the fast kernels need
    // it); they are reordered from ldigo once per layout (see weights_in()).
    const auto weights_layer_any = with_any(weights_layer_md());
    const auto weights_iter_any = with_any(weights_iter_md());
    if (cell == Cell::lstm) {
      dnnl::lstm_forward::desc d(prop, direction, src, state, state, weights_layer_any,
                                 weights_iter_any, bias_md(), dst, state, state);
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

  // h, c, h_out, c_out: null for a run from the zero state whose final state is not wanted.
  void execute(std::int32_t steps, std::int32_t rows, const float* x, const float* h,
               const float* c, float* y, float* h_out, float* c_out) const {
    if (steps == 0 || rows == 0) return;
    const bool stateful = h != nullptr;
    const auto prepared = prepare(steps, rows, stateful);
    // oneDNN's kernels expect a 64-byte aligned scratchpad.
    thread_local std::vector<char> scratch;
    scratch.resize(prepared->scratchpad.get_size() + 64);
    void* scratchpad = scratch.data();
    std::size_t space = scratch.size();
    std::align(64, prepared->scratchpad.get_size(), scratchpad, space);
    auto mem = [](const memory::desc& md, const void* data) {
      return memory(md, cpu(), const_cast<void*>(data));
    };
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC_LAYER, mem(sequence_md(steps, rows, in), x)},
        {DNNL_ARG_WEIGHTS_LAYER, prepared->weights_layer},
        {DNNL_ARG_WEIGHTS_ITER, prepared->weights_iter},
        {DNNL_ARG_BIAS, mem(bias_md(), bias.data())},
        {DNNL_ARG_DST_LAYER, mem(sequence_md(steps, rows, hidden), y)},
        {DNNL_ARG_SCRATCHPAD, mem(prepared->scratchpad, scratchpad)},
    };
    if (stateful) {
      const auto state = state_md(rows, true);
      args.emplace(DNNL_ARG_SRC_ITER, mem(state, h));
      args.emplace(DNNL_ARG_DST_ITER, mem(state, h_out));
      if (cell == Cell::lstm) {
        args.emplace(DNNL_ARG_SRC_ITER_C, mem(state, c));
        args.emplace(DNNL_ARG_DST_ITER_C, mem(state, c_out));
      }
    }
    prepared->primitive.execute(stream(), args);
    stream().wait();
  }
};

RnnLayer::RnnLayer(Cell cell, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                   const Tensor& b_hh) {
  auto impl = std::make_shared<Impl>();
  impl->cell = cell;
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
  impl_ = std::move(impl);
}

std::int64_t RnnLayer::input_size() const {
  return impl_->in;
}
std::int64_t RnnLayer::hidden_size() const {
  return impl_->hidden;
}

void RnnLayer::run(std::span<const std::int32_t> lengths, const float* x, float* y) const {
  const auto batch = static_cast<std::int32_t>(lengths.size());
  if (batch == 0 || lengths[0] == 0) return;
  const std::int32_t steps = lengths[0];
  const std::int64_t in = impl_->in, H = impl_->hidden;
  if (lengths.back() == steps)
    return impl_->execute(steps, batch, x, nullptr, nullptr, y, nullptr, nullptr);
  const bool lstm = impl_->cell == Cell::lstm;
  // The state between segments (two buffers: no output may alias an input), and the segment's
  // rows of x and y when fewer than all rows run.
  std::vector<float> h(2 * batch * H, 0.0f), c(lstm ? 2 * batch * H : 0, 0.0f), xs, ys;
  std::int32_t t0 = 0, rows = batch;
  for (int flip = 0; t0 < steps; flip ^= 1) {
    while (lengths[rows - 1] <= t0) --rows;
    const std::int32_t t1 = lengths[rows - 1], n = t1 - t0;
    const float* xi = x + static_cast<std::int64_t>(t0) * batch * in;
    float* yo = y + static_cast<std::int64_t>(t0) * batch * H;
    if (rows < batch) {
      xs.resize(static_cast<std::size_t>(n) * rows * in);
      ys.resize(static_cast<std::size_t>(n) * rows * H);
      for (std::int32_t t = 0; t < n; ++t)
        std::copy_n(xi + t * batch * in, rows * in, xs.data() + t * rows * in);
    }
    float* h_in = h.data() + flip * batch * H;
    float* h_out = h.data() + (flip ^ 1) * batch * H;
    float* c_in = lstm ? c.data() + flip * batch * H : nullptr;
    float* c_out = lstm ? c.data() + (flip ^ 1) * batch * H : nullptr;
    impl_->execute(n, rows, rows < batch ? xs.data() : xi, h_in, c_in,
                   rows < batch ? ys.data() : yo, h_out, c_out);
    if (rows < batch)
      for (std::int32_t t = 0; t < n; ++t) {
        float* dst = yo + t * batch * H;
        std::copy_n(ys.data() + t * rows * H, rows * H, dst);
        std::fill(dst + rows * H, dst + batch * H, 0.0f);
      }
    t0 = t1;
  }
}

void RnnLayer::step(std::int32_t batch, const float* x, const float* h, const float* c,
                    float* h_out, float* c_out) const {
  // dst_layer and dst_iter of one step are the same numbers; the layer output goes to h_out.
  thread_local std::vector<float> discard;
  discard.resize(static_cast<std::size_t>(batch) * impl_->hidden);
  impl_->execute(1, batch, x, h, c, h_out, discard.data(), c_out);
}

}  // namespace masque::rnn
