#include "tasks/source_attention.hpp"

#include <algorithm>
#include <string>

#include "masque/error.hpp"
#include "tasks/teacher_forcing.hpp"

namespace masque {

namespace {

// Row `row` of recorded attention [heads, rows, 1, keys], columns [0, width), heads averaged.
std::vector<float> head_average(const Tensor& probs, std::int64_t row, std::int32_t width) {
  const std::int64_t heads = probs.dim(0), rows = probs.dim(1), keys = probs.dim(3);
  if (width > keys)
    throw RuntimeError("attention: " + std::to_string(width) + " source columns asked of " +
                       std::to_string(keys) + " recorded keys");
  std::vector<float> out(static_cast<std::size_t>(width), 0.0f);
  for (std::int64_t h = 0; h < heads; ++h) {
    const float* p = probs.f32() + (h * rows + row) * keys;
    for (std::int32_t j = 0; j < width; ++j) out[j] += p[j];
  }
  for (float& v : out) v /= static_cast<float>(heads);
  return out;
}

}  // namespace

std::vector<AttentionRows> force_attention(ModelStepper& stepper,
                                           std::span<const std::int32_t> record_of,
                                           std::span<const std::vector<TokenId>> targets,
                                           std::span<const std::int32_t> source_length) {
  if (record_of.size() != targets.size())
    throw RuntimeError("force_attention: " + std::to_string(targets.size()) + " targets for " +
                       std::to_string(record_of.size()) + " records");
  std::vector<AttentionRows> rows(targets.size());
  if (targets.empty()) return rows;
  // One stepper row per hypothesis, a copy of its record's row; a row per token fed.
  stepper.select(record_of);
  feed_targets(stepper, targets, 0, [&](std::size_t, std::span<const std::int32_t> alive) {
    for (std::size_t row = 0; row < alive.size(); ++row) {
      const auto k = static_cast<std::size_t>(alive[row]);
      rows[k].push_back(head_average(stepper.attention(), static_cast<std::int64_t>(row),
                                     source_length[static_cast<std::size_t>(record_of[k])]));
    }
  });
  return rows;
}

std::int32_t most_attended(std::span<const float> row) {
  if (row.empty()) return -1;
  return static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace masque
