#include "tasks/teacher_forcing.hpp"

#include <string>

#include "masque/error.hpp"
#include "tasks/common.hpp"

namespace masque {

std::vector<std::vector<double>> force_targets(Stepper& stepper,
                                               std::span<const std::vector<TokenId>> targets,
                                               TokenId end_token) {
  if (static_cast<std::size_t>(stepper.num_records()) != targets.size())
    throw RuntimeError("force_targets: " + std::to_string(targets.size()) + " targets for " +
                       std::to_string(stepper.num_records()) + " records");
  std::vector<std::vector<double>> logprobs(targets.size());
  std::vector<std::int32_t> alive(targets.size()), keep;  // alive[row] = record
  for (std::size_t r = 0; r < targets.size(); ++r) alive[r] = static_cast<std::int32_t>(r);
  std::vector<TokenId> next;
  Tensor logits;
  for (std::size_t step = 0; !alive.empty(); ++step) {
    stepper.logits(logits);
    keep.clear();
    next.clear();
    for (std::size_t row = 0; row < alive.size(); ++row) {
      const std::vector<TokenId>& target = targets[static_cast<std::size_t>(alive[row])];
      const TokenId token = step < target.size() ? target[step] : end_token;
      logprobs[static_cast<std::size_t>(alive[row])].push_back(
          token_logprob(tensor_row(logits, row), token));
      if (step < target.size()) {
        keep.push_back(static_cast<std::int32_t>(row));
        next.push_back(token);
      }
    }
    if (keep.empty()) break;
    if (keep.size() != alive.size()) {
      stepper.select(keep);
      for (std::size_t i = 0; i < keep.size(); ++i) alive[i] = alive[keep[i]];
      alive.resize(keep.size());
    }
    stepper.advance(next);
  }
  return logprobs;
}

}  // namespace masque
