// CTranslate2's biased decoding (prefix_bias_beta, arXiv 2104.04454-style soft prefix): the
// next-token distribution of a hypothesis still on its prefix is mixed with the prefix token.
#include <cmath>

#include "masque/decoding.hpp"

namespace masque::decoding {

void bias_towards(std::span<float> row, TokenId token, double beta) {
  const double lse = log_sum_exp(row);
  const double keep = std::log1p(-beta);  // log(1 - beta)
  const auto t = static_cast<std::size_t>(token);
  const double target = row[t] - lse;
  for (float& v : row) v = static_cast<float>(v - lse + keep);
  row[t] = static_cast<float>(std::log((1 - beta) * std::exp(target) + beta));
}

}  // namespace masque::decoding
