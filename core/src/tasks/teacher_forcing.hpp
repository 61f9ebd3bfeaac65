// Teacher forcing through a Stepper: the log-probability of given target tokens, the way a
// decoder would have produced them (CTranslate2's score_batch, Marian's scorer).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "masque/decoder.hpp"

namespace masque {

// Feeds target k through stepper row k, all targets batched: `visit(step, alive)` sees the
// stepper after target[k][0..step) was fed to each alive row (alive[row] = k), for step in
// [0, targets[k].size() + extra); rows whose visits are done leave the stepper (select), and
// targets with none never enter it.
void feed_targets(
    Stepper& stepper, std::span<const std::vector<TokenId>> targets, std::size_t extra,
    const std::function<void(std::size_t step, std::span<const std::int32_t> alive)>& visit);

// For every record of `stepper` (row r = record r), log p(target[t] | source, target[<t]) for
// each target token, then log p(end_token | ...): plain log-softmax of the model's logits, in
// double. Records of different lengths share the steps; finished rows leave the stepper.
std::vector<std::vector<double>> force_targets(Stepper& stepper,
                                               std::span<const std::vector<TokenId>> targets,
                                               TokenId end_token);

}  // namespace masque
