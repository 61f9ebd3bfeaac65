// One recurrent layer in one direction (a torch nn.LSTM / nn.GRU layer): two Linears over
// torch's own weight layout — the input side W_ih x + b, for all of a sequence's steps in one
// product, and the recurrent side W_hh h per step — and the LSTM or GRU cell in a vectorized
// loop, in f32, bf16 or int8. A batched f32 LSTM decoding step runs on oneDNN's `lstm_forward`
// primitive instead where it has a brgemm kernel (AVX-512), at least as fast there; at one row the
// Linears stream the recurrent weights faster (Linear::streams_one_row), and oneDNN 2.6 runs the
// linear-before-reset GRU on a slower reference driver and has no bf16/int8 path worth taking.
//
// For the primitive the torch weights are reordered once into oneDNN's ldigo / ldgo layouts:
// torch stacks gates as rows [4*H, in] in the order i f g o, as oneDNN does (i f c o), with one
// bias per gate (b_ih + b_hh).
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
  // `compute` f32, bf16 (the products' inputs and weights rounded to bfloat16, f32
  // accumulation; states, cell and outputs stay f32; ConfigError where the CPU lacks AVX-512)
  // or i8 (the products as int8 Linears where libmasque's int8 rule says int8 pays:
  // Int8Policy::where_it_pays; weights per output, inputs per row), the cell in f32.
  RnnLayer(Cell cell, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
           const Tensor& b_hh, DType compute = DType::f32);

  std::int64_t input_size() const;
  std::int64_t hidden_size() const;
  std::int64_t gate_width() const;  // G * H

  // The input gates of `rows` inputs x [rows][in] -> xg [rows][gate_width()], in torch's gate
  // order (each row on its own: the same numbers in any batch).
  void input_gates(const float* x, std::int64_t rows, float* xg) const;
  // The layer's Linears (`prefix`.input, `prefix`.recurrent).
  void list_linears(const std::string& prefix, LinearList& out) const;

  // A packed sequence of rows from a zero state: row b runs lengths[b] steps, the rows sorted
  // longest first, in torch's packed-sequence layout (packed_offsets()): packed row p's input
  // gates are read at xg_rows[p] (gate_width() floats, as input_gates() computes them) and its
  // hidden state is written to y_rows[p] (H floats). Rows may be anywhere: the bidirectional
  // encoder reads the backward direction's gates in reverse and writes both directions straight
  // into the next layer's input. No padded step is computed.
  void recur(std::span<const std::int32_t> lengths, std::span<const float* const> xg_rows,
             std::span<float* const> y_rows) const;
  // One step of `batch` rows from the state (h, c) [batch][H] (c: LSTM only, else null):
  // x [batch][in] -> h_out, c_out. No output may alias an input.
  void step(std::int32_t batch, const float* x, const float* h, const float* c, float* h_out,
            float* c_out) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace masque::rnn
