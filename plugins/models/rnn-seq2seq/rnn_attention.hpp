// Attention of the decoder's top hidden state s over the encoder memory h_1..h_T of its row's
// source (pads excluded), and the attentional vector (Luong et al. 2015, OpenNMT-py):
//   bahdanau (additive):        score_j = v . tanh(W_q s + b_q + W_k h_j)
//   luong (multiplicative, general): score_j = s . (W_k h_j)
//   alpha = softmax over the row's real source positions, c = sum_j alpha_j h_j,
//   a = tanh(W_o [c | s] + b_o)
// W_k h_j does not depend on the step: keys() computes it once per source batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "masque/layers.hpp"
#include "masque/tensor.hpp"
#include "rnn_config.hpp"

namespace masque::rnn {

struct AttentionWeights {
  AttentionKind kind = AttentionKind::bahdanau;
  Linear query;   // bahdanau: W_q, b_q [A, Hd]
  Linear key;     // W_k [A, 2He] (luong: A = Hd), no bias
  Tensor v;       // bahdanau: [A]
  Linear output;  // W_o [Hd, 2He + Hd], b_o when configured
};

// The source side of one batch, shared by every row decoded from it.
struct SourceMemory {
  std::int32_t length = 0;            // T
  std::vector<std::int32_t> lengths;  // per source
  Tensor memory;                      // [sources, T, 2He]
  Tensor keys;                        // [sources, T, A]
};

// Step scratch, reused across steps.
struct AttentionScratch {
  Tensor query, joined;
  std::vector<float> scores;
};

class Attention {
 public:
  Attention() = default;
  explicit Attention(AttentionWeights weights) : w_(std::move(weights)) {}

  // "decoder.attention.key_proj", ".query_proj" (Bahdanau), ".out_proj".
  void list_linears(LinearList& out) const;

  // W_k h for every memory vector of [sources, T, M] whose position is below its source's
  // length: [sources * T, A] (zeros at the pads).
  Tensor keys(const Tensor& memory, std::span<const std::int32_t> lengths) const;
  // s [rows, Hd] -> the attentional vectors a [rows, Hd]; row r attends over source
  // source_of[r]. A source without tokens gives a zero context.
  void attend(const SourceMemory& source, std::span<const std::int32_t> source_of, const Tensor& s,
              AttentionScratch& scratch, Tensor& a) const;

 private:
  // The scores of one row over its source's real positions, softmaxed, in `scores`.
  void weigh(const SourceMemory& source, std::int32_t src, const float* s, const float* query,
             std::vector<float>& scores) const;

  AttentionWeights w_;
};

}  // namespace masque::rnn
