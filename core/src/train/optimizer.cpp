// AdamW, gradient clipping and the fixed-order gradient sum.
#include "masque/train/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <istream>
#include <ostream>
#include <string>

#include "masque/error.hpp"
#include "masque/threading.hpp"
#include "numerics/parallel.hpp"
#include "numerics/simd.hpp"

namespace masque::train {

namespace {

constexpr char kMagic[] = "masque-adamw 1\n";

MASQUE_VECTORIZE void adamw_update(float* __restrict p, const float* __restrict g,
                                   float* __restrict m, float* __restrict v, std::int64_t n,
                                   float grad_scale, float decay_factor, float beta1, float beta2,
                                   float step_size, float bc2_sqrt, float eps) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;  // exactly the clipped gradient torch would have stored
    const float pi = p[i] * decay_factor;
    const float mi = m[i] * beta1 + gi * (1.0f - beta1);
    const float vi = v[i] * beta2 + gi * gi * (1.0f - beta2);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
  }
}

MASQUE_VECTORIZE double sum_of_squares(const float* g, std::int64_t n) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * g[i];
  return sum;
}

MASQUE_VECTORIZE void scale(float* g, std::int64_t n, float a) {
  for (std::int64_t i = 0; i < n; ++i) g[i] *= a;
}

MASQUE_VECTORIZE void add_into(float* __restrict out, const float* __restrict x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] += x[i];
}

template <typename T>
void write(std::ostream& out, const T& x) {
  out.write(reinterpret_cast<const char*>(&x), sizeof x);
}
template <typename T>
void read(std::istream& in, T& x, const char* what) {
  if (!in.read(reinterpret_cast<char*>(&x), sizeof x))
    throw RuntimeError(std::string("AdamW state: truncated at ") + what);
}

}  // namespace

AdamW::AdamW(AdamWOptions options, std::span<const std::int64_t> sizes) : options_(options) {
  if (!(options.beta1 >= 0.0 && options.beta1 < 1.0 && options.beta2 >= 0.0 &&
        options.beta2 < 1.0 && options.eps >= 0.0 && options.weight_decay >= 0.0))
    throw ConfigError("AdamW: betas must be in [0, 1), eps and weight_decay >= 0");
  for (std::int64_t n : sizes) {
    if (n < 0) throw RuntimeError("AdamW: negative parameter size");
    m_.emplace_back(n, 0.0f);
    v_.emplace_back(n, 0.0f);
  }
}

void AdamW::step(std::span<const Parameter> params, double lr, float grad_scale) {
  if (params.size() != m_.size())
    throw RuntimeError("AdamW: " + std::to_string(params.size()) + " parameters for " +
                       std::to_string(m_.size()) + " slots");
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].size != static_cast<std::int64_t>(m_[i].size()))
      throw RuntimeError("AdamW: parameter " + std::to_string(i) + " has " +
                         std::to_string(params[i].size) + " values, its slot " +
                         std::to_string(m_[i].size()));
  ++step_;
  const double t = static_cast<double>(step_);
  const double bc1 = 1.0 - std::pow(options_.beta1, t);
  const double bc2 = 1.0 - std::pow(options_.beta2, t);
  const auto step_size = static_cast<float>(lr / bc1);
  const auto bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const auto beta1 = static_cast<float>(options_.beta1);
  const auto beta2 = static_cast<float>(options_.beta2);
  const auto eps = static_cast<float>(options_.eps);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    const auto decay = static_cast<float>(p.decay ? 1.0 - lr * options_.weight_decay : 1.0);
    float *m = m_[i].data(), *v = v_[i].data();
    numerics::parallel_range(
        p.size, 12.0 * static_cast<double>(p.size), [&](std::int64_t b, std::int64_t e) {
          adamw_update(p.value + b, p.grad + b, m + b, v + b, e - b, grad_scale, decay, beta1,
                       beta2, step_size, bc2_sqrt, eps);
        });
  }
}

void AdamW::save(std::ostream& out) const {
  out.write(kMagic, sizeof kMagic - 1);
  write(out, options_.beta1);
  write(out, options_.beta2);
  write(out, options_.eps);
  write(out, options_.weight_decay);
  write(out, step_);
  write(out, static_cast<std::uint64_t>(m_.size()));
  for (std::size_t i = 0; i < m_.size(); ++i) {
    write(out, static_cast<std::uint64_t>(m_[i].size()));
    out.write(reinterpret_cast<const char*>(m_[i].data()), sizeof(float) * m_[i].size());
    out.write(reinterpret_cast<const char*>(v_[i].data()), sizeof(float) * v_[i].size());
  }
  if (!out) throw RuntimeError("AdamW state: write failed");
}

AdamW AdamW::load(std::istream& in, std::span<const std::int64_t> expected_sizes) {
  char magic[sizeof kMagic - 1];
  if (!in.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof magic) != 0)
    throw RuntimeError("AdamW state: not a masque-adamw 1 file");
  AdamWOptions o;
  read(in, o.beta1, "beta1");
  read(in, o.beta2, "beta2");
  read(in, o.eps, "eps");
  read(in, o.weight_decay, "weight_decay");
  std::int64_t step = 0;
  read(in, step, "step");
  std::uint64_t count = 0;
  read(in, count, "the parameter count");
  if (count != expected_sizes.size())
    throw RuntimeError("AdamW state: " + std::to_string(count) + " parameters, expected " +
                       std::to_string(expected_sizes.size()));
  AdamW a(o, expected_sizes);
  a.step_ = step;
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t n = 0;
    read(in, n, "a parameter size");
    if (n != static_cast<std::uint64_t>(expected_sizes[i]))
      throw RuntimeError("AdamW state: parameter " + std::to_string(i) + " has " +
                         std::to_string(n) + " values, expected " +
                         std::to_string(expected_sizes[i]));
    for (auto* moments : {&a.m_[i], &a.v_[i]})
      if (!in.read(reinterpret_cast<char*>(moments->data()), sizeof(float) * n))
        throw RuntimeError("AdamW state: truncated in parameter " + std::to_string(i));
  }
  return a;
}

double grad_norm(std::span<const std::span<float>> grads) {
  double sum = 0.0;
  for (const std::span<float>& g : grads)
    sum += sum_of_squares(g.data(), static_cast<std::int64_t>(g.size()));
  return std::sqrt(sum);
}

float clip_coefficient(double total, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  const double coef = max_norm / (total + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm) {
  const double total = grad_norm(grads);
  const float coef = clip_coefficient(total, max_norm);
  if (coef != 1.0f)
    for (const std::span<float>& g : grads)
      scale(g.data(), static_cast<std::int64_t>(g.size()), coef);
  return total;
}

void sum_in_order(std::span<const float* const> parts, std::int64_t n, float* out) {
  if (parts.empty()) {
    std::fill(out, out + n, 0.0f);
    return;
  }
  constexpr std::int64_t kChunk = 1 << 14;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads = numerics::threads_for(static_cast<double>(n) * parts.size() * 16);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
    if (out != parts[0]) std::memcpy(out + begin, parts[0] + begin, sizeof(float) * len);
    for (std::size_t p = 1; p < parts.size(); ++p) add_into(out + begin, parts[p] + begin, len);
  }
}

}  // namespace masque::train
