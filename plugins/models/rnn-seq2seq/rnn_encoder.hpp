// The bidirectional recurrent encoder (torch nn.LSTM / nn.GRU with bidirectional=True), run
// so that padding never reaches a real state.
//
// oneDNN has no packed sequences. Right padding is harmless to the forward direction (pads come
// after every real step, and their outputs are dropped), but the backward direction would start
// from the pads. So each layer runs two left-to-right primitives: the forward one on the tokens
// as given, the backward one on each row's real tokens reversed (row b's step t is token
// len_b - 1 - t); the outputs are put back in source order and concatenated, which is the next
// layer's input. Rows are sorted longest first and kept in torch's packed-sequence layout
// (RnnLayer::run): pads are neither stored nor computed. Cost: a primitive call per distinct
// length per layer and direction, and a copy of each layer's output.
//
// The first layer's input is an embedding row, so its input gates W_ih e + b depend on the token
// alone: when they fit the budget given, they are computed once for every source token and
// direction (RnnLayer::input_gates) and a token costs a row copy instead of a product; that
// layer's recurrence then runs on its Linears at any batch (RnnLayer::run_from_gates).
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
  // gate_width() floats) may take; beyond it (or in bf16) the gates are computed per call.
  Encoder(Tensor embeddings, std::vector<EncoderLayer> layers, std::int64_t gate_table_bytes);

  std::int64_t hidden_size() const { return layers_.front().forward.hidden_size(); }
  bool has_gate_tables() const { return !gate_table_forward_.empty(); }
  // The layers' Linears: "encoder.rnn.l<layer>[_reverse].input" / ".recurrent".
  void list_linears(LinearList& out) const;

  // rows[b]: row b's source ids (no pads). Ids outside the table: RecordError.
  EncoderOutput encode(const std::vector<std::vector<TokenId>>& rows) const;

 private:
  Tensor embeddings_;  // [source vocab, E]
  // [source vocab, gate_width()]: the first layer's input gates per token, each direction; or
  // empty (not within the budget).
  Tensor gate_table_forward_, gate_table_backward_;
  std::vector<EncoderLayer> layers_;
};

}  // namespace masque::rnn
