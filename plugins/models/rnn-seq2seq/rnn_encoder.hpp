// The bidirectional recurrent encoder (torch nn.LSTM / nn.GRU with bidirectional=True), run
// so that padding never reaches a real state.
//
// Rows are sorted longest first and kept in torch's packed-sequence layout (RnnLayer::recur):
// pads are neither stored nor computed. The backward direction runs left to right on each row's
// real tokens reversed (row b's step t is token len_b - 1 - t). A layer's input gates for each
// direction are one product over its input in source order, the backward direction reading its
// rows reversed, and both recurrences write their states straight into the next layer's input,
// the top layer's into the memory: nothing is copied between layers.
//
// The first layer's input is an embedding row, so its input gates W_ih e + b depend on the token
// alone: when they fit the budget given, they are computed once for every source token and
// direction (RnnLayer::input_gates) and a token costs a table row instead of a product.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "masque/tensor.hpp"
#include "rnn_layer.hpp"

namespace masque::rnn {

struct EncoderOutput {
  std::int32_t batch = 0, length = 0;  // length: the longest row
  std::vector<std::int32_t> lengths;   // real tokens per row
  Tensor memory;                       // [batch, length, 2H]: [forward | backward]; pads zero
  Tensor final_state;  // [batch, 2H]: forward after the last token | backward after the first
};

struct EncoderLayer {
  RnnLayer forward, backward;
};

class Encoder {
 public:
  Encoder() = default;
  // gate_table_bytes: the most the first layer's input-gate tables (vocab x 2 directions x
  // gate_width() floats) may take; beyond it the gates are computed per call.
  Encoder(Tensor embeddings, std::vector<EncoderLayer> layers, std::int64_t gate_table_bytes);

  std::int64_t hidden_size() const { return layers_.front().forward.hidden_size(); }
  bool has_gate_tables() const { return !gate_table_forward_.empty(); }
  // The layers' Linears: "encoder.rnn.l<layer>[_reverse].input" / ".recurrent".
  void list_linears(LinearList& out) const;

  // rows[b]: row b's source ids (no pads). Ids outside the table: RecordError.
  EncoderOutput encode(const std::vector<std::vector<TokenId>>& rows) const;

 private:
  struct Packing;
  void run_layers(const Packing& packing, EncoderOutput& out) const;

  Tensor embeddings_;  // [source vocab, E]
  // [source vocab, gate_width()]: the first layer's input gates per token, each direction; or
  // empty (not within the budget).
  Tensor gate_table_forward_, gate_table_backward_;
  std::vector<EncoderLayer> layers_;
};

}  // namespace masque::rnn
