// Softmax and log-softmax over the feature dimension (float), and scoring helpers (double).
#include <cmath>
#include <limits>

#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "numerics/simd.hpp"
#include "numerics/tensor_checks.hpp"

namespace masque {

using namespace numerics;

namespace {

MASQUE_VECTORIZE float row_max(const float* x, std::int64_t n) {
  return numerics::max_of(x, n);
}

// Sum of exp(x - shift), in double: float exponentials (relative error ~1e-7 each) summed
// without the ~1e-5 drift of a float sum over a large vocabulary.
MASQUE_VECTORIZE double sum_exp(const float* x, float shift, std::int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(fast_exp(x[i] - shift));
  return s;
}

MASQUE_VECTORIZE void exp_scale_row(float* x, float shift, float scale, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = fast_exp(x[i] - shift) * scale;
}

MASQUE_VECTORIZE void shift_row(float* x, float shift, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] -= shift;
}

// A row whose entries are all -inf has no mass: softmax gives zeros, logsumexp -inf.
bool empty_row(float max) {
  return max == -std::numeric_limits<float>::infinity();
}

}  // namespace

void softmax(Tensor& x) {
  const std::int64_t n = features(x, "softmax");
  const std::int64_t rows = numerics::rows(x, n);
  float* p = x.f32();
  for (std::int64_t r = 0; r < rows; ++r, p += n) {
    const float m = row_max(p, n);
    if (empty_row(m)) {
      std::fill(p, p + n, 0.0f);
      continue;
    }
    const double s = sum_exp(p, m, n);
    exp_scale_row(p, m, static_cast<float>(1.0 / s), n);
  }
}

void log_softmax(Tensor& x) {
  const std::int64_t n = features(x, "log_softmax");
  const std::int64_t rows = numerics::rows(x, n);
  float* p = x.f32();
  for (std::int64_t r = 0; r < rows; ++r, p += n) {
    const float m = row_max(p, n);
    if (empty_row(m)) continue;  // stays -inf
    shift_row(p, static_cast<float>(m + std::log(sum_exp(p, m, n))), n);
  }
}

}  // namespace masque
