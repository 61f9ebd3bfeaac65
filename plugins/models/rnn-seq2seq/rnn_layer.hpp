// One recurrent layer in one direction (a torch nn.LSTM / nn.GRU layer) on oneDNN's
// `lstm_forward` or `lbr_gru_forward` primitive. In f32, a single row runs on two Linears and
// the cell instead (the one-row product streams the weights faster than the primitive), and so
// does a GRU's decoding step at any row count (oneDNN 2.6 runs the GRU on its slower reference
// driver). In int8 every run and step is on the two Linears (oneDNN 2.6 has an int8 LSTM
// primitive but no int8 linear-before-reset GRU, and one path keeps both cells alike).
//
// The torch weights are reordered once at construction into oneDNN's ldigo / ldgo layouts:
// torch stacks gates as rows [G*H, in] in the order i f g o (LSTM) and r z n (GRU); oneDNN wants
// [in][gate][H] in the order i f c o (LSTM: the same) and u r o (linear-before-reset GRU, u = z),
// with one bias per gate (b_ih + b_hh) plus, for the GRU, the new gate's hidden bias b_hn on its
// own (it sits inside r * (W_hn h + b_hn)).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "masque/layers.hpp"
#include "masque/tensor.hpp"
#include "rnn_config.hpp"

namespace masque::rnn {

// torch's PackedSequence layout of rows sorted longest first: step t holds the rows still
// running (b with lengths[b] > t) together, row b of step t at offsets[t] + b; offsets has
// lengths[0] + 1 entries, the last being the total of the lengths.
std::vector<std::int64_t> packed_offsets(std::span<const std::int32_t> lengths);

class RnnLayer {
 public:
  RnnLayer() = default;
  // w_ih [G*H, in], w_hh [G*H, H], b_ih and b_hh [G*H] in torch's gate order (G = 4 LSTM, 3 GRU).
  // `compute` f32, or bf16: inputs, hidden states and weights rounded to bfloat16 for the
  // products (f32 accumulation, f32 cell state and outputs; throws where the CPU lacks it), or
  // i8: the two products as int8 Linears where libmasque's int8 rule says int8 pays
  // (Int8Policy::where_it_pays; weights per output, inputs per row), the cell in f32.
  RnnLayer(Cell cell, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
           const Tensor& b_hh, DType compute = DType::f32);

  std::int64_t input_size() const;
  std::int64_t hidden_size() const;
  std::int64_t gate_width() const;  // G * H

  // Whether run() computes the input gates W_ih x + b as a product of its own (f32 and int8;
  // in bf16 oneDNN's primitive computes them inside), so that they can be precomputed.
  bool has_input_gates() const;
  // The input gates of `rows` inputs x [rows][in] -> xg [rows][gate_width()], in torch's gate
  // order, as run() computes them (each row on its own: the same numbers in any batch).
  void input_gates(const float* x, std::int64_t rows, float* xg) const;
  // The layer's Linears (`prefix`.input, `prefix`.recurrent), where it runs on them (f32 and
  // int8; bf16 runs on oneDNN's RNN primitive: none).
  void list_linears(const std::string& prefix, LinearList& out) const;
  // run() on rows anywhere in memory (f32 and int8): packed row p's input gates are read at
  // xg_rows[p] (gate_width() floats, as input_gates() computes them) and its hidden state is
  // written to y_rows[p] (H floats). The bidirectional encoder reads the backward direction's
  // gates in reverse and writes both directions straight into the next layer's input.
  void recur(std::span<const std::int32_t> lengths, std::span<const float* const> xg_rows,
             std::span<float* const> y_rows) const;

  // A packed sequence of rows from a zero state: row b runs lengths[b] steps, the rows sorted
  // longest first; x [total][in] -> y [total][H] (the hidden state after each step), both in
  // the packed layout (packed_offsets()). Runs as one primitive call per distinct length over
  // the rows still running: no padded step is stored or computed.
  void run(std::span<const std::int32_t> lengths, const float* x, float* y) const;
  // One step of `batch` rows from the state (h, c) [batch][H] (c: LSTM only, else null):
  // x [batch][in] -> h_out, c_out. No output may alias an input.
  void step(std::int32_t batch, const float* x, const float* h, const float* c, float* h_out,
            float* c_out) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace masque::rnn
