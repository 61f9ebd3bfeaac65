// Teacher forcing through a Stepper: the log-probability of given target tokens, the way a
// decoder would have produced them (CTranslate2's score_batch, Marian's scorer).
#pragma once

#include <span>
#include <vector>

#include "masque/decoder.hpp"

namespace masque {

// For every record of `stepper` (row r = record r), log p(target[t] | source, target[<t]) for
// each target token, then log p(end_token | ...): plain log-softmax of the model's logits, in
// double. Records of different lengths share the steps; finished rows leave the stepper.
std::vector<std::vector<double>> force_targets(Stepper& stepper,
                                               std::span<const std::vector<TokenId>> targets,
                                               TokenId end_token);

}  // namespace masque
