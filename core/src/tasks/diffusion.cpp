#include "tasks/diffusion.hpp"

#include <algorithm>
#include <cmath>

#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "masque/random.hpp"
#include "tasks/common.hpp"

namespace masque {

std::vector<std::int32_t> diffusion_blocks(const MaskStrategy& mask, std::int32_t source_length,
                                           std::int32_t slots) {
  std::vector<std::int32_t> segments(static_cast<std::size_t>(source_length), 0);
  segments.resize(static_cast<std::size_t>(source_length + slots), 1);
  MaskRequest request;
  request.length = source_length + slots;
  request.segments = segments;
  const SequenceMask m = mask.build(request);
  if (!m.dense.empty())
    throw ConfigError(
        "diffusion-generate: the mask strategy gives a dense mask; the slots' blocks are read "
        "from its ranks (bidirectional, block-causal)");
  std::vector<std::int32_t> blocks;
  for (std::int32_t p = source_length; p < source_length + slots; ++p) {
    if (p == source_length || m.rank[p] != m.rank[p - 1])
      blocks.push_back(1);
    else
      ++blocks.back();
  }
  return blocks;
}

std::vector<std::int32_t> diffusion_schedule(std::int32_t n, std::int32_t total,
                                             std::int32_t steps) {
  std::int32_t t = n;
  if (steps > 0 && total > 0)
    t = static_cast<std::int32_t>(
        std::ceil(static_cast<double>(steps) * n / static_cast<double>(total)));
  t = std::clamp(t, 1, std::max(n, 1));
  std::vector<std::int32_t> counts(static_cast<std::size_t>(t), n / t);
  for (std::int32_t i = 0; i < n % t; ++i) ++counts[static_cast<std::size_t>(i)];
  return counts;
}

namespace {

struct Row {
  const DiffusionInput* input = nullptr;
  std::vector<TokenId> tokens;  // source + slots
  std::vector<std::uint8_t> masked;
  std::size_t block = 0, block_begin = 0;  // current block and its first slot
  std::vector<std::int32_t> schedule;      // of the current block
  std::size_t step_in_block = 0;
};

// A token from a logits row: its argmax, or a sample at `temperature` (one draw of `rng`).
TokenId choose(std::span<const float> logits, double temperature, SplitMix64& rng,
               std::vector<double>& weights) {
  if (temperature <= 0) return decoding::argmax(logits);
  const float top = *std::max_element(logits.begin(), logits.end());
  weights.resize(logits.size());
  decoding::exp_weights(logits, top, temperature, weights);
  double total = 0;
  for (double w : weights) total += w;
  const double target = rng.uniform() * total;
  double sum = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    sum += weights[i];
    if (sum > target && weights[i] > 0) return static_cast<TokenId>(i);
  }
  return decoding::argmax(logits);  // rounding left the draw past the last weight
}

}  // namespace

std::vector<DiffusionOutput> diffusion_decode(const Model& model, const MaskStrategy& mask,
                                              TokenId mask_token,
                                              std::span<const DiffusionInput> inputs,
                                              const DiffusionOptions& options) {
  std::vector<DiffusionOutput> out(inputs.size());
  std::vector<Row> rows(inputs.size());
  std::vector<std::size_t> active;
  for (std::size_t r = 0; r < inputs.size(); ++r) {
    const DiffusionInput& in = inputs[r];
    Row& row = rows[r];
    row.input = &in;
    row.tokens = in.source;
    row.tokens.resize(in.source.size() + static_cast<std::size_t>(in.slots), mask_token);
    row.masked.assign(static_cast<std::size_t>(in.slots), 1);
    out[r].tokens.assign(static_cast<std::size_t>(in.slots), mask_token);
    out[r].step.assign(static_cast<std::size_t>(in.slots), -1);
    out[r].logprob.assign(static_cast<std::size_t>(in.slots), 0.0);
    if (in.slots <= 0) continue;
    out[r].blocks = diffusion_blocks(mask, static_cast<std::int32_t>(in.source.size()), in.slots);
    row.schedule = diffusion_schedule(out[r].blocks[0], in.slots, options.steps);
    active.push_back(r);
  }
  std::vector<double> weights;
  std::vector<float> confidence;
  std::vector<std::int32_t> picked;
  while (!active.empty()) {
    // Each row as far as its current block: later blocks are invisible to it under a blocked
    // mask, and under one block there are none.
    std::vector<SequenceSpec> specs(active.size());
    std::vector<std::vector<std::int32_t>> candidates(active.size());
    for (std::size_t a = 0; a < active.size(); ++a) {
      const Row& row = rows[active[a]];
      const std::size_t n = row.input->source.size();
      const std::size_t end =
          row.block_begin + static_cast<std::size_t>(out[active[a]].blocks[row.block]);
      specs[a].ids.assign(row.tokens.begin(),
                          row.tokens.begin() + static_cast<std::ptrdiff_t>(n + end));
      specs[a].segments.assign(n, 0);
      specs[a].segments.resize(n + end, 1);
      specs[a].token_types = specs[a].segments;
      specs[a].record_id = row.input->record_id;
      for (std::size_t s = row.block_begin; s < end; ++s)
        if (row.masked[s]) candidates[a].push_back(static_cast<std::int32_t>(s));
    }
    BuiltBatch built = build_batch(specs, mask, model.info().pad, -1);
    for (std::size_t a = 0; a < active.size(); ++a)
      for (std::int32_t s : candidates[a])
        built.batch.output_rows.push_back(static_cast<std::int32_t>(
            a * static_cast<std::size_t>(built.batch.length) +
            rows[active[a]].input->source.size() + static_cast<std::size_t>(s)));
    const ForwardResult result = model.forward(built.batch);
    std::size_t first = 0;  // the current row's first output row
    std::vector<std::size_t> still;
    for (std::size_t a = 0; a < active.size(); ++a) {
      const std::size_t r = active[a];
      Row& row = rows[r];
      DiffusionOutput& o = out[r];
      const auto& c = candidates[a];
      // One stream per (seed, record, step): the same draws in any batch.
      SplitMix64 rng(
          mix_seed(options.seed, row.input->record_id, static_cast<std::uint64_t>(o.steps)));
      std::vector<TokenId> token(c.size());
      std::vector<double> logprob(c.size());
      confidence.assign(c.size(), 0.0f);
      for (std::size_t k = 0; k < c.size(); ++k) {
        const std::span<const float> logits = tensor_row(result.logits, first + k);
        token[k] = choose(logits, options.temperature, rng, weights);
        logprob[k] = static_cast<double>(logits[static_cast<std::size_t>(token[k])]) -
                     decoding::log_sum_exp(logits);
        confidence[k] = options.random_remasking ? static_cast<float>(rng.uniform())
                                                 : static_cast<float>(std::exp(logprob[k]));
      }
      first += c.size();
      const std::int32_t count = std::min<std::int32_t>(row.schedule[row.step_in_block],
                                                        static_cast<std::int32_t>(c.size()));
      decoding::top_k(confidence, count, picked);  // ties: the earlier slot
      for (std::int32_t k : picked) {
        const auto s = static_cast<std::size_t>(c[static_cast<std::size_t>(k)]);
        row.masked[s] = 0;
        row.tokens[row.input->source.size() + s] = token[static_cast<std::size_t>(k)];
        o.tokens[s] = token[static_cast<std::size_t>(k)];
        o.step[s] = o.steps;
        o.logprob[s] = logprob[static_cast<std::size_t>(k)];
      }
      ++o.steps;
      if (++row.step_in_block == row.schedule.size()) {
        row.block_begin += static_cast<std::size_t>(o.blocks[row.block]);
        if (++row.block == o.blocks.size()) continue;
        row.schedule = diffusion_schedule(o.blocks[row.block], row.input->slots, options.steps);
        row.step_in_block = 0;
      }
      still.push_back(r);
    }
    active = std::move(still);
  }
  return out;
}

}  // namespace masque
