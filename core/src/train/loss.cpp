// Fused softmax cross-entropy (forward and gradient in one pass over each row's logits).
#include "masque/train/loss.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "masque/error.hpp"
#include "masque/threading.hpp"
#include "numerics/parallel.hpp"
#include "numerics/simd.hpp"

namespace masque::train {

namespace {

// sum_v exp(x_v - mx), the exps written to e (may be x) unless e is null.
MASQUE_VECTORIZE double exp_sum(const float* x, std::int64_t n, float mx, float* e) {
  double sum = 0.0;
  if (e) {
#pragma omp simd reduction(+ : sum)
    for (std::int64_t v = 0; v < n; ++v) {
      const float ev = numerics::fast_exp(x[v] - mx);
      e[v] = ev;
      sum += ev;
    }
  } else {
#pragma omp simd reduction(+ : sum)
    for (std::int64_t v = 0; v < n; ++v) sum += numerics::fast_exp(x[v] - mx);
  }
  return sum;
}

MASQUE_VECTORIZE double plain_sum(const float* x, std::int64_t n) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t v = 0; v < n; ++v) sum += x[v];
  return sum;
}

// e <- e * a - b.
MASQUE_VECTORIZE void affine(float* e, std::int64_t n, float a, float b) {
#pragma omp simd
  for (std::int64_t v = 0; v < n; ++v) e[v] = e[v] * a - b;
}

struct Row {
  double loss = 0.0;
  bool counted = false;
};

Row row_loss(const float* x, std::int64_t vocab, std::int32_t target, double inv_count,
             const CrossEntropyOptions& o, float* d) {
  if (target == o.ignore_index) {
    if (d) std::fill(d, d + vocab, 0.0f);
    return {};
  }
  const float mx = numerics::max_of(x, vocab);
  const float xt = x[target];  // read before d (possibly x) is overwritten
  const double smooth_sum = o.label_smoothing > 0.0 ? plain_sum(x, vocab) : 0.0;
  const double sum = exp_sum(x, vocab, mx, d);
  const double lse = mx + std::log(sum);
  const double eps = o.label_smoothing;
  const double loss = (1.0 - eps) * (lse - xt) + eps / vocab * (vocab * lse - smooth_sum);
  if (d) {
    affine(d, vocab, static_cast<float>(inv_count / sum),
           static_cast<float>(eps / vocab * inv_count));
    d[target] -= static_cast<float>((1.0 - eps) * inv_count);
  }
  return {loss, true};
}

}  // namespace

CrossEntropyResult cross_entropy(const float* logits, std::int64_t rows, std::int64_t vocab,
                                 std::span<const std::int32_t> targets, double count,
                                 const CrossEntropyOptions& o, float* dlogits) {
  if (static_cast<std::int64_t>(targets.size()) != rows)
    throw RuntimeError("cross_entropy: " + std::to_string(targets.size()) + " targets for " +
                       std::to_string(rows) + " rows");
  if (vocab <= 0) throw RuntimeError("cross_entropy: empty vocabulary");
  if (!o.weights.empty() && static_cast<std::int64_t>(o.weights.size()) != rows)
    throw RuntimeError("cross_entropy: " + std::to_string(o.weights.size()) + " weights for " +
                       std::to_string(rows) + " rows");
  if (!(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0))
    throw RuntimeError("cross_entropy: label_smoothing must be in [0, 1], got " +
                       std::to_string(o.label_smoothing));
  std::int64_t counted = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int32_t t = targets[r];
    if (t == o.ignore_index) continue;
    if (t < 0 || t >= vocab)
      throw RecordError("cross_entropy: row " + std::to_string(r) + " has target " +
                        std::to_string(t) + " outside the vocabulary of " + std::to_string(vocab));
    ++counted;
  }
  if (counted > 0 && !(count > 0.0))
    throw RuntimeError("cross_entropy: the token count must be positive");
  const double inv_count = counted > 0 ? 1.0 / count : 0.0;
  std::vector<Row> per_row(rows);
  const int threads = numerics::threads_for(20.0 * rows * vocab);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (std::int64_t r = 0; r < rows; ++r)
    per_row[r] = row_loss(logits + r * vocab, vocab, targets[r],
                          o.weights.empty() ? inv_count : inv_count * o.weights[r], o,
                          dlogits ? dlogits + r * vocab : nullptr);
  CrossEntropyResult result;
  for (std::int64_t r = 0; r < rows; ++r)
    result.loss_sum += o.weights.empty() ? per_row[r].loss : per_row[r].loss * o.weights[r];
  result.counted = counted;
  result.loss = result.loss_sum * inv_count;
  return result;
}

CrossEntropyResult cross_entropy(const Tensor& logits, std::span<const std::int32_t> targets,
                                 double count, const CrossEntropyOptions& options,
                                 Tensor* dlogits) {
  if (logits.dtype() != DType::f32 || logits.rank() == 0)
    throw RuntimeError("cross_entropy: logits must be an F32 tensor, got " +
                       to_string(logits.shape()));
  const std::int64_t vocab = logits.dim(-1);
  const std::int64_t rows = vocab == 0 ? 0 : logits.numel() / vocab;
  if (dlogits && dlogits != &logits) {
    if (dlogits->dtype() != DType::f32)
      *dlogits = Tensor(logits.shape());
    else
      dlogits->resize(logits.shape());
  }
  return cross_entropy(logits.f32(), rows, vocab, targets, count, options,
                       dlogits ? dlogits->f32() : nullptr);
}

}  // namespace masque::train
