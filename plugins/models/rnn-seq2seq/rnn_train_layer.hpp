// One recurrent layer in one direction for training: oneDNN's `lstm_forward` / `lbr_gru_forward`
// in prop_kind forward_training (which leaves a workspace) and `lstm_backward` /
// `lbr_gru_backward` on it.
//
// The weights change every optimizer step, so they are brought from torch's layout (the
// ParameterSet's) into oneDNN's at every forward (load(): the gate reorder of rnn_layer.hpp, then
// one reorder per primitive layout, forward and backward). Gradients come back in oneDNN's plain
// layouts, which the backward primitives accumulate into over the calls of one backward pass
// (oneDNN's RNN backward adds to diff_weights_* and diff_bias); to_torch() adds them to the
// torch-layout gradients, splitting the summed bias as the forward summed it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include <dnnl.hpp>

#include "masque/tensor.hpp"
#include "rnn_config.hpp"

namespace masque::rnn {

class TrainLayer {
 public:
  // This step's weights in oneDNN's layouts.
  struct Weights {
    std::vector<float> layer, iter, bias;  // ldigo, ldigo, ldgo
    std::vector<std::pair<dnnl::memory::desc, dnnl::memory>> layer_in, iter_in;  // per layout
  };
  // Gradients in oneDNN's plain layouts, summed over a backward pass's calls.
  struct Grads {
    std::vector<float> layer, iter, bias;
    void zero();
  };
  // One forward call, kept for its backward (its inputs copied, its outputs and workspace).
  struct Run {
    std::int32_t steps = 0, rows = 0;
    std::vector<float> x, h0, c0, y, h, c;  // c0, c: LSTM only
    dnnl::memory workspace;
  };

  TrainLayer(Cell cell, std::int64_t in, std::int64_t hidden);

  std::int64_t input_size() const { return in_; }
  std::int64_t hidden_size() const { return hidden_; }
  Grads new_grads() const;

  // torch's w_ih [G*H, in], w_hh [G*H, H], b_ih, b_hh [G*H] into `w`.
  void load(const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
            Weights& w) const;
  // `steps` steps of `rows` rows from the state (h0, c0) [rows][H] (c0: LSTM only, else null):
  // x [steps][rows][in] -> run.y [steps][rows][H], run.h, run.c (the final state).
  void forward(Weights& w, std::int32_t steps, std::int32_t rows, const float* x, const float* h0,
               const float* c0, Run& run) const;
  // Given dy [steps][rows][H] and the final state's dh, dc [rows][H] (null: zero): writes dx
  // [steps][rows][in], dh0 and dc0 [rows][H] (dc0: LSTM only) and adds the weights' gradients
  // to `g`.
  void backward(Weights& w, const Run& run, const float* dy, const float* dh, const float* dc,
                float* dx, float* dh0, float* dc0, Grads& g) const;
  // Adds `g` to the torch-layout gradients.
  void to_torch(const Grads& g, Tensor& dw_ih, Tensor& dw_hh, Tensor& db_ih, Tensor& db_hh) const;

 private:
  struct Primitives {
    dnnl::primitive forward, backward;
    dnnl::memory::desc forward_scratchpad, backward_scratchpad, workspace;
    dnnl::memory::desc forward_layer, forward_iter, backward_layer, backward_iter;
  };
  std::shared_ptr<const Primitives> prepare(std::int32_t steps, std::int32_t rows) const;
  dnnl::memory::desc weights_layer_md() const;
  dnnl::memory::desc weights_iter_md() const;
  dnnl::memory::desc bias_md() const;
  dnnl::memory::desc sequence_md(std::int32_t steps, std::int32_t rows, std::int64_t width) const;
  dnnl::memory::desc state_md(std::int32_t rows) const;
  // w's weights in layout `to` (reordered from ldigo once per layout and step).
  dnnl::memory weights_in(Weights& w, bool layer, const dnnl::memory::desc& to) const;

  Cell cell_;
  std::int64_t in_ = 0, hidden_ = 0, gates_ = 0;
  std::int64_t order_[4];  // oneDNN gate g is torch gate order_[g]
  // Primitives per (steps, rows, threads), behind a pointer so the layer can move.
  struct Cache {
    std::mutex mutex;
    std::map<std::tuple<std::int32_t, std::int32_t, int>, std::shared_ptr<const Primitives>> map;
  };
  std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();
};

}  // namespace masque::rnn
