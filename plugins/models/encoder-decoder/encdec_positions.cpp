#include "encdec_positions.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "masque/error.hpp"

namespace masque::encdec {

namespace {

// w_j = max_timescale^(-j / denominator), j < half. Float32 steps, as in CTranslate2:
// inc = log(max_timescale) / denominator; w_j = exp(-inc * j).
std::vector<float> inverse_timescales(const PositionConfig& config, std::int32_t half) {
  const float denominator = static_cast<float>(config.denominator_half_minus_one ? half - 1 : half);
  const float inc = std::log(static_cast<float>(config.max_timescale)) / denominator;
  std::vector<float> w(half);
  for (std::int32_t j = 0; j < half; ++j)
    w[j] = static_cast<float>(std::exp(static_cast<double>(-inc * static_cast<float>(j))));
  return w;
}

}  // namespace

PositionTable PositionTable::sinusoidal(const PositionConfig& config, std::int32_t dim) {
  const std::int32_t half = dim / 2;
  const std::vector<float> w = inverse_timescales(config, half);
  PositionTable t;
  t.size_ = config.max_positions;
  t.table_ = Tensor({t.size_, dim});
  for (std::int32_t pos = 0; pos < t.size_; ++pos) {
    float* row = t.table_.f32() + std::int64_t{pos} * dim;
    const auto p = static_cast<float>(pos + config.first_position);
    for (std::int32_t j = 0; j < half; ++j) {
      const double angle = p * w[j];  // the float product, as CTranslate2 rounds it
      const auto s = static_cast<float>(std::sin(angle)), c = static_cast<float>(std::cos(angle));
      if (config.layout == SinusoidLayout::concat_sin_cos) {
        row[j] = s;
        row[half + j] = c;
      } else {
        row[2 * j] = s;
        row[2 * j + 1] = c;
      }
    }
  }
  return t;
}

PositionTable PositionTable::learned(Tensor table, std::int32_t offset,
                                     std::int32_t max_positions) {
  PositionTable t;
  t.table_ = std::move(table);
  t.offset_ = offset;
  t.size_ = max_positions;
  return t;
}

void PositionTable::check(std::span<const std::int32_t> positions) const {
  for (std::int32_t p : positions)
    if (p < 0 || p >= size_)
      throw RecordError("position " + std::to_string(p) + " is outside the model's " +
                        std::to_string(size_) + " positions");
}

void PositionTable::add_to(std::span<const std::int32_t> positions, Tensor& x) const {
  const std::int64_t dim = table_.dim(1);
  float* out = x.f32();
  for (std::size_t r = 0; r < positions.size(); ++r) {
    const float* pe = row(positions[r]);
    float* xr = out + static_cast<std::int64_t>(r) * dim;
    for (std::int64_t c = 0; c < dim; ++c) xr[c] += pe[c];
  }
}

}  // namespace masque::encdec
