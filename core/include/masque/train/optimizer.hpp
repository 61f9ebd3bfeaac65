// AdamW exactly as torch.optim.AdamW (amsgrad=False, maximize=False), global-norm gradient
// clipping as torch.nn.utils.clip_grad_norm_, and the fixed-order sum of micro-batch gradients.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <vector>

namespace masque::train {

// One trainable tensor as the optimizer sees it: its values (updated in place) and gradient.
struct Parameter {
  float* value = nullptr;
  const float* grad = nullptr;
  std::int64_t size = 0;
  bool decay = true;  // weight decay: matrices and embeddings yes, biases and norm weights no
};

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // torch's default for AdamW
};

// The update of step t (t = 1, 2, ... after the increment), per element, with lr given per step:
//   p *= 1 - lr * weight_decay                       (decayed parameters only)
//   m  = beta1 m + (1 - beta1) g
//   v  = beta2 v + (1 - beta2) g^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Moments are f32 like torch's for f32 parameters; the scalar factors are computed in double.
class AdamW {
 public:
  AdamW() = default;
  // One slot of moments per parameter, sized as given (zeros, step 0).
  AdamW(AdamWOptions options, std::span<const std::int64_t> sizes);

  // Applies one step to `params` (in the order and sizes given at construction).
  // grad_scale multiplies every gradient as it is read (clip_coefficient: clipping fused into
  // the update, one pass over the gradients fewer; the results are those of clipping first).
  void step(std::span<const Parameter> params, double lr, float grad_scale = 1.0f);

  std::int64_t steps() const { return step_; }
  const AdamWOptions& options() const { return options_; }
  std::span<const float> exp_avg(std::size_t slot) const { return m_.at(slot); }
  std::span<const float> exp_avg_sq(std::size_t slot) const { return v_.at(slot); }

  // Checkpoint state: options, step and moments in a small binary format ("masque-adamw 1",
  // little-endian). load() throws RuntimeError naming what does not match (sizes, truncation).
  void save(std::ostream& out) const;
  static AdamW load(std::istream& in, std::span<const std::int64_t> expected_sizes);

 private:
  AdamWOptions options_;
  std::int64_t step_ = 0;
  std::vector<std::vector<float>> m_, v_;
};

// torch.nn.utils.clip_grad_norm_ (norm type 2): total = sqrt(sum of squares of every gradient,
// in double); coef = max_norm / (total + 1e-6); when coef < 1 every gradient is multiplied by
// it. Returns total (the norm before clipping). max_norm <= 0 only measures.
double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm);

// The two halves of clip_grad_norm: the total norm, and the factor clipping multiplies by
// (1 when max_norm <= 0 or the norm is within it).
double grad_norm(std::span<const std::span<float>> grads);
float clip_coefficient(double total, double max_norm);

// out[i] = parts[0][i] + parts[1][i] + ... in that order, for i < n: the sum of micro-batch
// gradient buffers whatever thread produced which, so a run is reproducible. Element ranges run
// on the calling thread's intra-op threads; out may be parts[0].
void sum_in_order(std::span<const float* const> parts, std::int64_t n, float* out);

}  // namespace masque::train
