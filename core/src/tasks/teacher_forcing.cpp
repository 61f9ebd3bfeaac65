#include "tasks/teacher_forcing.hpp"

#include <string>

#include "masque/error.hpp"
#include "tasks/common.hpp"

namespace masque {

void feed_targets(
    Stepper& stepper, std::span<const std::vector<TokenId>> targets, std::size_t extra,
    const std::function<void(std::size_t step, std::span<const std::int32_t> alive)>& visit) {
  std::vector<std::int32_t> alive, keep;
  for (std::size_t k = 0; k < targets.size(); ++k)
    if (targets[k].size() + extra > 0) alive.push_back(static_cast<std::int32_t>(k));
  if (alive.empty()) return;
  if (alive.size() != targets.size()) stepper.select(alive);
  std::vector<TokenId> next;
  for (std::size_t step = 0;; ++step) {
    visit(step, alive);
    keep.clear();
    next.clear();
    for (std::size_t row = 0; row < alive.size(); ++row) {
      const std::vector<TokenId>& target = targets[static_cast<std::size_t>(alive[row])];
      if (step + 1 < target.size() + extra) {
        keep.push_back(static_cast<std::int32_t>(row));
        next.push_back(target[step]);
      }
    }
    if (keep.empty()) return;
    if (keep.size() != alive.size()) {
      stepper.select(keep);
      for (std::size_t i = 0; i < keep.size(); ++i) alive[i] = alive[keep[i]];
      alive.resize(keep.size());
    }
    stepper.advance(next);
  }
}

std::vector<std::vector<double>> force_targets(Stepper& stepper,
                                               std::span<const std::vector<TokenId>> targets,
                                               TokenId end_token) {
  if (static_cast<std::size_t>(stepper.num_records()) != targets.size())
    throw RuntimeError("force_targets: " + std::to_string(targets.size()) + " targets for " +
                       std::to_string(stepper.num_records()) + " records");
  std::vector<std::vector<double>> logprobs(targets.size());
  Tensor logits;
  // One visit more than tokens: the last scores the end token.
  feed_targets(stepper, targets, 1, [&](std::size_t step, std::span<const std::int32_t> alive) {
    stepper.logits(logits);
    for (std::size_t row = 0; row < alive.size(); ++row) {
      const auto k = static_cast<std::size_t>(alive[row]);
      const TokenId token = step < targets[k].size() ? targets[k][step] : end_token;
      logprobs[k].push_back(token_logprob(tensor_row(logits, row), token));
    }
  });
  return logprobs;
}

}  // namespace masque
