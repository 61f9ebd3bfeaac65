#include "tasks/pooling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "masque/error.hpp"

namespace masque {

Pooling parse_pooling(const std::string& name, ModelKind kind) {
  if (name == "cls") return Pooling::cls;
  if (name == "mean") return Pooling::mean;
  if (name == "last") return Pooling::last;
  if (name == "max") return Pooling::max;
  if (name == "auto") return kind == ModelKind::encoder_only ? Pooling::cls : Pooling::last;
  throw ConfigError("task.pooling: expected auto, cls, mean, max or last, got '" + name + "'");
}

const char* to_string(Pooling pooling) {
  switch (pooling) {
    case Pooling::cls:
      return "cls";
    case Pooling::mean:
      return "mean";
    case Pooling::last:
      return "last";
    case Pooling::max:
      return "max";
  }
  return "?";
}

std::vector<std::int32_t> pooled_rows(Pooling pooling, std::int32_t length, std::int32_t skip) {
  switch (pooling) {
    case Pooling::cls:
      return {0};
    case Pooling::last:
      return {length - 1};
    case Pooling::mean:
    case Pooling::max:
      break;
  }
  std::vector<std::int32_t> rows;
  for (std::int32_t t = std::clamp(skip, 0, length); t < length; ++t) rows.push_back(t);
  return rows;
}

void normalize_l2(std::vector<float>& v) {
  double norm = 0.0;
  for (float x : v) norm += double{x} * x;
  const double scale = 1.0 / std::max(std::sqrt(norm), 1e-12);
  for (float& x : v) x = static_cast<float>(x * scale);
}

std::vector<float> pool(const Tensor& hidden, std::size_t first, std::size_t rows, bool normalize,
                        Pooling pooling) {
  const auto width = static_cast<std::size_t>(hidden.dim(-1));
  const bool max = pooling == Pooling::max;
  std::vector<double> sum(width, max ? -std::numeric_limits<double>::infinity() : 0.0);
  for (std::size_t r = first; r < first + rows; ++r) {
    const float* h = hidden.f32() + r * width;
    for (std::size_t i = 0; i < width; ++i)
      sum[i] = max ? std::max(sum[i], double{h[i]}) : sum[i] + h[i];
  }
  double scale = rows > 0 ? (max ? 1.0 : 1.0 / static_cast<double>(rows)) : 0.0;
  if (normalize) {
    double norm = 0.0;
    for (double v : sum) norm += v * v;
    norm = std::sqrt(norm) * scale;
    // torch.nn.functional.normalize's eps: a zero vector stays zero.
    scale /= std::max(norm, 1e-12);
  }
  std::vector<float> out(width);
  for (std::size_t i = 0; i < width; ++i) out[i] = static_cast<float>(sum[i] * scale);
  return out;
}

}  // namespace masque
