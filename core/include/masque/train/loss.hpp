// Softmax cross-entropy over a vocabulary, forward and backward fused.
//
// Definition (torch.nn.functional.cross_entropy with ignore_index and label_smoothing eps, but
// divided by a count the caller gives): for a counted row r with target t over V classes,
//
//   loss_r = (1 - eps) * (-log p_t) + (eps / V) * sum_v (-log p_v),   p = softmax(logits_r)
//   loss   = sum_r loss_r / count
//   dlogits_r = (p - (1 - eps) onehot(t) - eps / V) / count,   0 for ignored rows
//
// Rows whose target is ignore_index are not counted and get zero gradient. `count` is the
// number of counted tokens of the whole optimizer step (all micro-batches), so that gradients
// of micro-batches add up to the step's mean; with one micro-batch it is this call's count.
// The softmax is never stored: exps go straight into dlogits, which may be the logits buffer
// itself (in place, the usual case: a [tokens, vocab] buffer exists once). Per-row log-sum-exps
// are taken in double; rows run in parallel and the loss is summed in row order.
#pragma once

#include <cstdint>
#include <span>

#include "masque/tensor.hpp"

namespace masque::train {

struct CrossEntropyOptions {
  std::int32_t ignore_index = -100;
  double label_smoothing = 0.0;  // eps in [0, 1]
  // Per row (empty: 1): loss_r and dlogits_r are multiplied by weights[r] (diffusion's 1/t).
  std::span<const double> weights{};
};

struct CrossEntropyResult {
  double loss_sum = 0.0;     // sum of loss_r over this call's counted rows
  std::int64_t counted = 0;  // rows whose target is not ignore_index
  double loss = 0.0;         // loss_sum / count: this call's share of the step's loss
};

// logits [rows, vocab] (row-major); targets [rows]; dlogits [rows, vocab] written (may equal
// logits; null: loss only). A target outside [0, vocab) other than ignore_index is a
// RecordError naming the row. count > 0 unless no row is counted.
CrossEntropyResult cross_entropy(const float* logits, std::int64_t rows, std::int64_t vocab,
                                 std::span<const std::int32_t> targets, double count,
                                 const CrossEntropyOptions& options, float* dlogits);

// Tensor form: logits [..., vocab]; dlogits resized like logits unless null or logits itself.
CrossEntropyResult cross_entropy(const Tensor& logits, std::span<const std::int32_t> targets,
                                 double count, const CrossEntropyOptions& options, Tensor* dlogits);

}  // namespace masque::train
