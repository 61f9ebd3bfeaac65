// Rotary position embedding (Hugging Face rotate_half convention).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "masque/error.hpp"
#include "masque/layers.hpp"
#include "numerics/simd.hpp"

namespace masque {

namespace {

void rescale(const RopeScaling& s, std::vector<double>& inv_freq) {
  constexpr double kPi = 3.14159265358979323846;
  if (s.kind == RopeScaling::Kind::none) return;
  if (!(s.factor > 0.0) ||
      (s.kind == RopeScaling::Kind::llama3 &&
       (!(s.low_freq_factor > 0.0) || !(s.high_freq_factor > s.low_freq_factor) ||
        !(s.original_max_positions > 0.0))))
    throw ConfigError("rotary embedding: invalid rope scaling (factor " + std::to_string(s.factor) +
                      ", low_freq_factor " + std::to_string(s.low_freq_factor) +
                      ", high_freq_factor " + std::to_string(s.high_freq_factor) +
                      ", original_max_position_embeddings " +
                      std::to_string(s.original_max_positions) + ")");
  for (double& f : inv_freq) {
    if (s.kind == RopeScaling::Kind::linear) {
      f /= s.factor;
      continue;
    }
    const double wavelength = 2.0 * kPi / f;
    if (wavelength < s.original_max_positions / s.high_freq_factor) continue;
    if (wavelength > s.original_max_positions / s.low_freq_factor) {
      f /= s.factor;
      continue;
    }
    const double a = (s.original_max_positions / wavelength - s.low_freq_factor) /
                     (s.high_freq_factor - s.low_freq_factor);
    f = (1.0 - a) * f / s.factor + a * f;
  }
}

}  // namespace

Rotary::Rotary(std::int32_t head_dim, double theta, std::int32_t max_positions,
               std::int32_t rotary_dim)
    : Rotary(head_dim, theta, max_positions, rotary_dim, RopeScaling{}) {}

Rotary::Rotary(std::int32_t head_dim, double theta, std::int32_t max_positions,
               std::int32_t rotary_dim, const RopeScaling& scaling)
    : head_dim_(head_dim),
      rotary_dim_(rotary_dim == 0 ? head_dim : rotary_dim),
      // A config's claim (a million positions) costs nothing: the table covers the first few
      // thousand, later positions are computed on the fly to the same floats.
      max_positions_(std::min(max_positions, kRotaryTableRows)),
      theta_(theta) {
  if (head_dim_ <= 0 || rotary_dim_ <= 0 || rotary_dim_ > head_dim_ || rotary_dim_ % 2 != 0 ||
      max_positions_ < 0 || !(theta_ > 0.0))
    throw ConfigError("rotary embedding: invalid head_dim " + std::to_string(head_dim_) +
                      ", rotary_dim " + std::to_string(rotary_dim_) + ", theta " +
                      std::to_string(theta_));
  const std::int32_t half = rotary_dim_ / 2;
  inv_freq_.resize(half);
  for (std::int32_t i = 0; i < half; ++i)
    inv_freq_[i] = std::pow(theta_, -2.0 * i / static_cast<double>(rotary_dim_));
  rescale(scaling, inv_freq_);
  auto table =
      std::make_shared<std::vector<float>>(static_cast<std::size_t>(max_positions_) * 2 * half);
  for (std::int32_t p = 0; p < max_positions_; ++p) {
    float* row = table->data() + static_cast<std::size_t>(p) * 2 * half;
    for (std::int32_t i = 0; i < half; ++i) {
      row[i] = static_cast<float>(std::cos(p * inv_freq_[i]));
      row[half + i] = static_cast<float>(std::sin(p * inv_freq_[i]));
    }
  }
  table_ = std::move(table);
}

void Rotary::angles(std::int32_t position, float* cos_out, float* sin_out) const {
  for (std::size_t i = 0; i < inv_freq_.size(); ++i) {
    cos_out[i] = static_cast<float>(std::cos(position * inv_freq_[i]));
    sin_out[i] = static_cast<float>(std::sin(position * inv_freq_[i]));
  }
}

namespace {

// x[i], x[i + half] <- x[i] cos - x[i + half] sin, x[i + half] cos + x[i] sin.
MASQUE_VECTORIZE void rotate(float* __restrict x, const float* __restrict cos,
                             const float* __restrict sin, std::int32_t half) {
  float* x2 = x + half;
  for (std::int32_t i = 0; i < half; ++i) {
    const float a = x[i], b = x2[i];
    x[i] = a * cos[i] - b * sin[i];
    x2[i] = b * cos[i] + a * sin[i];
  }
}

}  // namespace

void Rotary::apply(float* x, std::int64_t rows, std::int64_t row_stride, std::int32_t heads,
                   std::span<const std::int32_t> positions) const {
  if (head_dim_ == 0) throw RuntimeError("Rotary used before construction");
  if (static_cast<std::int64_t>(positions.size()) != rows)
    throw RuntimeError("rotary embedding: " + std::to_string(positions.size()) + " positions for " +
                       std::to_string(rows) + " rows");
  const std::int32_t half = rotary_dim_ / 2;
  std::vector<float> scratch;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int32_t p = positions[r];
    if (p < 0) throw RecordError("negative position id " + std::to_string(p));
    const float* cos;
    if (p < max_positions_) {
      cos = table_->data() + static_cast<std::size_t>(p) * 2 * half;
    } else {
      scratch.resize(2 * half);
      angles(p, scratch.data(), scratch.data() + half);
      cos = scratch.data();
    }
    float* row = x + r * row_stride;
    for (std::int32_t h = 0; h < heads; ++h) rotate(row + h * head_dim_, cos, cos + half, half);
  }
}

void Rotary::apply(Tensor& x, std::int32_t heads, std::span<const std::int32_t> positions) const {
  const std::int64_t width = static_cast<std::int64_t>(heads) * head_dim_;
  if (x.dtype() != DType::f32 || x.rank() == 0 || x.dim(-1) != width)
    throw RuntimeError("rotary embedding: expected F32 rows of " + std::to_string(heads) + " x " +
                       std::to_string(head_dim_) + " features, got " + to_string(x.shape()));
  apply(x.f32(), x.numel() / width, width, heads, positions);
}

namespace {

// The parts' type when they all have it, else f32.
DType common_type(std::span<const Tensor> parts) {
  const DType first = parts.front().dtype();
  for (const auto& p : parts)
    if (p.dtype() != first) return DType::f32;
  return first;
}

}  // namespace

Tensor concat_rows(std::span<const Tensor> parts) {
  if (parts.empty()) throw RuntimeError("concat_rows: nothing to concatenate");
  const std::int64_t cols = parts.front().rank() == 2 ? parts.front().dim(1) : -1;
  std::int64_t rows = 0;
  for (const auto& p : parts) {
    if (p.rank() != 2 || p.dim(1) != cols)
      throw RuntimeError("concat_rows: expected 2-D tensors of " + std::to_string(cols) +
                         " columns, got " + to_string(p.shape()));
    rows += p.dim(0);
  }
  const DType type = common_type(parts);
  Tensor out({rows, cols}, type);
  auto* o = static_cast<std::uint8_t*>(out.raw());
  for (const auto& p : parts) {
    const Tensor f = p.dtype() == type ? p : p.to_f32();
    std::memcpy(o, f.raw(), f.bytes());
    o += f.bytes();
  }
  return out;
}

}  // namespace masque
