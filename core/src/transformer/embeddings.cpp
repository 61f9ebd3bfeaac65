// Embeddings: token table, learned or sinusoidal positions, token types and a norm. Sinusoids
// are tabulated for the first kSinusoidRows positions only and computed on the fly past them
// (the same floats): memory does not grow with what a config claims.
#include <algorithm>
#include <cmath>
#include <vector>

#include "masque/error.hpp"
#include "masque/ops.hpp"
#include "masque/transformer/network.hpp"

namespace masque::transformer {

namespace {
constexpr std::int32_t kSinusoidRows = 4096;
}  // namespace

Sinusoids::Sinusoids(const PositionSpec& spec, std::int32_t dim)
    : spec_(spec), dim_(dim), w_(dim / 2) {
  const std::int32_t half = dim / 2;
  // w_j = max_timescale^(-j / denominator) in float32 steps, as CTranslate2 computes them.
  const float denominator = static_cast<float>(spec.denominator_half_minus_one ? half - 1 : half);
  const float inc = std::log(static_cast<float>(spec.max_timescale)) / denominator;
  for (std::int32_t j = 0; j < half; ++j)
    w_[j] = static_cast<float>(std::exp(static_cast<double>(-inc * static_cast<float>(j))));
  const std::int32_t rows =
      spec.max_positions > 0 ? std::min(spec.max_positions, kSinusoidRows) : kSinusoidRows;
  table_.resize(static_cast<std::size_t>(rows) * dim);
  for (std::int32_t p = 0; p < rows; ++p) encode(p, table_.data() + std::int64_t{p} * dim);
}

void Sinusoids::add_to(std::span<const std::int32_t> positions, Tensor& x) const {
  std::vector<float> scratch;
  const std::int64_t rows = static_cast<std::int64_t>(table_.size()) / dim_;
  for (std::size_t r = 0; r < positions.size(); ++r) {
    const float* pe;
    if (positions[r] < rows) {
      pe = table_.data() + std::int64_t{positions[r]} * dim_;
    } else {
      scratch.resize(dim_);
      encode(positions[r], scratch.data());
      pe = scratch.data();
    }
    float* xr = x.f32() + static_cast<std::int64_t>(r) * dim_;
    for (std::int32_t c = 0; c < dim_; ++c) xr[c] += pe[c];
  }
}

void Sinusoids::encode(std::int32_t position, float* row) const {
  const std::int32_t half = dim_ / 2;
  const auto p = static_cast<float>(position + spec_.first_position);
  for (std::int32_t j = 0; j < half; ++j) {
    const double angle = p * w_[j];  // the float product, as CTranslate2 rounds it
    const auto s = static_cast<float>(std::sin(angle)), c = static_cast<float>(std::cos(angle));
    if (spec_.layout == SinusoidLayout::concat_sin_cos) {
      row[j] = s;
      row[half + j] = c;
    } else {
      row[2 * j] = s;
      row[2 * j + 1] = c;
    }
  }
}

Embeddings::Embeddings(const EmbeddingSpec& spec, const WeightReader& weights)
    : positions_(spec.positions),
      tokens_(weights.stored(spec.tokens)),
      scale_(spec.scale),
      types_(weights.tensor(spec.token_types)),
      norm_(spec.norm, weights) {
  if (positions_.kind == PositionKind::learned) learned_ = weights.tensor(positions_.table);
  if (positions_.kind == PositionKind::sinusoidal)
    sinusoids_ =
        std::make_shared<const Sinusoids>(positions_, static_cast<std::int32_t>(tokens_.dim(1)));
}

void Embeddings::forward(std::span<const TokenId> ids, std::span<const std::int32_t> positions,
                         std::span<const std::int32_t> token_types, Tensor& out) const {
  embedding(tokens_, ids, out, scale_);
  if (positions_.kind == PositionKind::learned) {
    const std::int64_t dim = learned_.dim(1);
    for (std::size_t r = 0; r < positions.size(); ++r) {
      const float* pe = learned_.f32() + (std::int64_t{positions[r]} + positions_.offset) * dim;
      float* xr = out.f32() + static_cast<std::int64_t>(r) * dim;
      for (std::int64_t c = 0; c < dim; ++c) xr[c] += pe[c];
    }
  } else if (positions_.kind == PositionKind::sinusoidal) {
    sinusoids_->add_to(positions, out);
  }
  if (types_.numel() != 0) add_embedding(types_, token_types, out);
  if (!norm_.empty()) norm_.forward(out, out);
}

}  // namespace masque::transformer
