#include "tasks/diffusion.hpp"

#include <algorithm>
#include <cmath>

#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "masque/random.hpp"
#include "tasks/common.hpp"

namespace masque {

namespace {

// The mask of a source and its slots (segments 0 and 1).
SequenceMask slot_mask(const MaskStrategy& mask, std::int32_t source_length, std::int32_t slots,
                       std::uint64_t record_id) {
  std::vector<std::int32_t> segments(static_cast<std::size_t>(source_length), 0);
  segments.resize(static_cast<std::size_t>(source_length + slots), 1);
  MaskRequest request;
  request.length = source_length + slots;
  request.segments = segments;
  request.record_id = record_id;
  SequenceMask m = mask.build(request);
  if (!m.dense.empty())
    throw ConfigError(
        "diffusion-generate: the mask strategy gives a dense mask; the slots' blocks are read "
        "from its ranks (bidirectional, block-causal)");
  if (m.size() < static_cast<std::size_t>(request.length))
    throw RuntimeError("diffusion-generate: the mask strategy returned " +
                       std::to_string(m.size()) + " ranks for " + std::to_string(request.length) +
                       " tokens");
  return m;
}

std::vector<std::int32_t> blocks_of(const SequenceMask& m, std::int32_t source_length,
                                    std::int32_t slots) {
  std::vector<std::int32_t> blocks;
  for (std::int32_t p = source_length; p < source_length + slots; ++p) {
    if (p == source_length || m.rank[p] != m.rank[p - 1])
      blocks.push_back(1);
    else
      ++blocks.back();
  }
  return blocks;
}

// Whether finished blocks can stay in a KV cache: every block ranks above every token before
// it (so none of those sees it, and it sees them as in a full forward), all content, no query
// tokens. Bidirectional fails: its source and slots share rank 0.
bool cacheable(const SequenceMask& m, std::int32_t source_length, std::int32_t slots) {
  const auto n = static_cast<std::size_t>(source_length + slots);
  if (m.size() != n || source_length < 1) return false;
  for (TokenRole role : m.role)
    if (role != TokenRole::content) return false;
  std::int32_t highest = *std::max_element(m.rank.begin(), m.rank.begin() + source_length);
  for (std::size_t p = static_cast<std::size_t>(source_length); p < n; ++p) {
    if (m.rank[p] == m.rank[p - 1] && p > static_cast<std::size_t>(source_length)) continue;
    if (m.rank[p] <= highest) return false;  // a new block that an earlier token would see
    highest = m.rank[p];
  }
  return true;
}

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

struct Row {
  std::size_t index = 0;  // of its input and output
  const DiffusionInput* input = nullptr;
  SequenceMask mask;            // over source + slots
  std::vector<TokenId> tokens;  // source + slots
  std::vector<std::uint8_t> masked;
  std::size_t block = 0, block_begin = 0;  // current block and its first slot
  std::vector<std::int32_t> schedule;      // of the current block
  std::size_t step_in_block = 0;
  // The cached path: slots [commit_begin, block_begin), a finished block not in the cache yet.
  std::size_t commit_begin = 0;
  std::vector<std::int32_t> candidates;  // this step's still-masked slots of the block
};

// A step of several tokens per row (StepInput::length), padded rows.
struct BlockStep {
  std::vector<TokenId> tokens;
  std::vector<std::int32_t> positions, types, ranks, output_rows;
  std::vector<TokenRole> roles;
  StepInput input(std::int32_t width, bool append) const {
    StepInput in;
    in.tokens = tokens;
    in.positions = positions;
    in.token_types = types;
    in.append = append;
    in.length = width;
    in.ranks = ranks;
    in.roles = roles;
    in.output_rows = output_rows;
    in.want_logits = !output_rows.empty();
    return in;
  }
};

class Denoiser {
 public:
  // `cached`: every input's mask is cacheable() and the model takes several tokens a step.
  Denoiser(const Model& model, const MaskStrategy& mask, TokenId mask_token,
           const DiffusionOptions& options, std::span<const DiffusionInput> inputs, bool cached)
      : model_(model),
        mask_(mask),
        mask_token_(mask_token),
        options_(options),
        inputs_(inputs),
        cached_(cached) {
    out_.resize(inputs.size());
    masks_.resize(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const DiffusionInput& in = inputs[i];
      const auto n = static_cast<std::int32_t>(in.source.size());
      DiffusionOutput& o = out_[i];
      o.tokens.assign(static_cast<std::size_t>(std::max(in.slots, 0)), mask_token);
      o.step.assign(o.tokens.size(), -1);
      o.logprob.assign(o.tokens.size(), 0.0);
      if (in.slots <= 0) continue;
      masks_[i] = slot_mask(mask, n, in.slots, in.record_id);
      o.blocks = blocks_of(masks_[i], n, in.slots);
    }
  }

  std::vector<DiffusionOutput> run(const DiffusionBatching& batching) && {
    for (DiffusionOutput& o : out_) o.cached = cached_ && !o.blocks.empty();
    const auto all = static_cast<std::int32_t>(inputs_.size());
    const std::int32_t max_rows = batching.max_rows > 0 ? batching.max_rows : std::max(all, 1);
    while (true) {
      admit(max_rows, batching.max_tokens);
      if (rows_.empty()) break;
      step();
    }
    return std::move(out_);
  }

 private:
  // The next inputs join once an eighth of the rows is free (joining copies the cache).
  void admit(std::int32_t max_rows, std::size_t max_tokens) {
    const auto active = static_cast<std::int32_t>(rows_.size());
    const std::int32_t free_rows = max_rows - active;
    if (active > 0 && (free_rows < std::max(1, max_rows / 8) || (cached_ && !state_->can_append())))
      return;
    std::vector<Row> joining;
    std::size_t longest = 0;
    while (next_ < inputs_.size() && static_cast<std::int32_t>(joining.size()) < free_rows) {
      const DiffusionInput& in = inputs_[next_];
      if (in.slots <= 0) {
        ++next_;
        continue;
      }
      const std::size_t cost = in.source.size() + static_cast<std::size_t>(in.slots);
      const std::size_t padded = std::max(longest, cost);
      if (!joining.empty() && max_tokens > 0 && padded * (joining.size() + 1) > max_tokens) break;
      longest = padded;
      joining.push_back(new_row(next_++));
    }
    if (joining.empty()) return;
    if (cached_) prefill(joining);
    for (Row& row : joining) rows_.push_back(std::move(row));
  }

  Row new_row(std::size_t i) {
    const DiffusionInput& in = inputs_[i];
    Row row;
    row.index = i;
    row.input = &in;
    row.mask = std::move(masks_[i]);
    row.tokens = in.source;
    row.tokens.resize(in.source.size() + static_cast<std::size_t>(in.slots), mask_token_);
    row.masked.assign(static_cast<std::size_t>(in.slots), 1);
    row.schedule = diffusion_schedule(out_[i].blocks[0], in.slots, options_.steps);
    return row;
  }

  // The joining rows' sources into the cache, after the rows already there.
  void prefill(std::span<const Row> joining) {
    std::vector<SequenceSpec> specs(joining.size());
    std::vector<SequenceMask> masks(joining.size());
    for (std::size_t r = 0; r < joining.size(); ++r) {
      const Row& row = joining[r];
      const std::size_t n = row.input->source.size();
      specs[r].ids = row.input->source;
      specs[r].token_types.assign(n, 0);
      specs[r].record_id = row.input->record_id;
      masks[r].rank.assign(row.mask.rank.begin(),
                           row.mask.rank.begin() + static_cast<std::ptrdiff_t>(n));
      masks[r].role.assign(row.mask.role.begin(),
                           row.mask.role.begin() + static_cast<std::ptrdiff_t>(n));
      masks[r].window = row.mask.window;
    }
    const BuiltBatch built = assemble_batch(specs, std::move(masks), model_.info().pad, -1);
    std::unique_ptr<DecodeState> started = model_.start(built.batch, nullptr);
    if (!state_ || state_->rows() == 0)
      state_ = std::move(started);
    else
      state_->append(*started);
  }

  std::size_t block_end(const Row& row) const {
    return row.block_begin + static_cast<std::size_t>(out_[row.index].blocks[row.block]);
  }

  // One denoising step of every row (the logits of its candidates, row by row), then the rule.
  void step() {
    for (Row& row : rows_) {
      row.candidates.clear();
      for (std::size_t s = row.block_begin; s < block_end(row); ++s)
        if (row.masked[s]) row.candidates.push_back(static_cast<std::int32_t>(s));
    }
    Tensor logits;
    if (cached_) {
      commit_blocks();
      denoise_cached(logits);
    } else {
      denoise_full(logits);
    }
    std::size_t first = 0;  // the current row's first logits row
    std::vector<Row> still;
    std::vector<std::int32_t> kept;
    for (std::size_t a = 0; a < rows_.size(); ++a) {
      Row& row = rows_[a];
      const bool more = fill(row, logits, first);
      first += row.candidates.size();
      if (!more) continue;
      kept.push_back(static_cast<std::int32_t>(a));
      still.push_back(std::move(row));
    }
    if (cached_ && still.size() != rows_.size()) state_->select(kept);
    rows_ = std::move(still);
  }

  // The recompute path: each row as far as its current block, in one full forward (later
  // blocks are invisible to it under a blocked mask, and under one block there are none).
  void denoise_full(Tensor& logits) const {
    std::vector<SequenceSpec> specs(rows_.size());
    for (std::size_t a = 0; a < rows_.size(); ++a) {
      const Row& row = rows_[a];
      const std::size_t n = row.input->source.size(), end = n + block_end(row);
      specs[a].ids.assign(row.tokens.begin(),
                          row.tokens.begin() + static_cast<std::ptrdiff_t>(end));
      specs[a].segments.assign(n, 0);
      specs[a].segments.resize(end, 1);
      specs[a].token_types = specs[a].segments;
      specs[a].record_id = row.input->record_id;
    }
    BuiltBatch built = build_batch(specs, mask_, model_.info().pad, -1);
    const auto length = static_cast<std::size_t>(built.batch.length);
    for (std::size_t a = 0; a < rows_.size(); ++a)
      for (std::int32_t s : rows_[a].candidates)
        built.batch.output_rows.push_back(static_cast<std::int32_t>(
            a * length + rows_[a].input->source.size() + static_cast<std::size_t>(s)));
    logits = model_.forward(built.batch).logits;
  }

  // Slots spans[a] = [begin, end) of every row a as a step of several tokens per row, padded
  // to the widest; `outputs`: with the candidates' logits.
  using Span = std::pair<std::size_t, std::size_t>;
  BlockStep block_step(std::span<const Span> spans, bool outputs, std::int32_t& width) const {
    width = 0;
    for (const auto& [begin, end] : spans)
      width = std::max(width, static_cast<std::int32_t>(end - begin));
    BlockStep b;
    const std::size_t total = rows_.size() * static_cast<std::size_t>(width);
    b.tokens.assign(total, 0);
    b.positions.assign(total, 0);
    b.types.assign(total, 1);
    b.ranks.assign(total, 0);
    b.roles.assign(total, TokenRole::pad);
    for (std::size_t a = 0; a < rows_.size(); ++a) {
      const Row& row = rows_[a];
      const std::size_t n = row.input->source.size();
      const auto [begin, end] = spans[a];
      std::size_t next = 0;  // the next candidate
      for (std::size_t s = begin; s < end; ++s) {
        const std::size_t i = a * static_cast<std::size_t>(width) + (s - begin);
        b.tokens[i] = row.tokens[n + s];
        b.positions[i] = static_cast<std::int32_t>(n + s);
        b.ranks[i] = row.mask.rank[n + s];
        b.roles[i] = TokenRole::content;
        if (outputs && next < row.candidates.size() &&
            row.candidates[next] == static_cast<std::int32_t>(s)) {
          b.output_rows.push_back(static_cast<std::int32_t>(i));
          ++next;
        }
      }
    }
    return b;
  }

  // Finished blocks join the cache (the rows without one pad this step).
  void commit_blocks() {
    std::vector<Span> spans;
    for (const Row& row : rows_) spans.emplace_back(row.commit_begin, row.block_begin);
    if (std::all_of(spans.begin(), spans.end(), [](const Span& s) { return s.first == s.second; }))
      return;
    std::int32_t width = 0;
    const BlockStep b = block_step(spans, false, width);
    Tensor unused;
    model_.step(*state_, b.input(width, true), unused);
    for (Row& row : rows_) row.commit_begin = row.block_begin;
  }

  // The current blocks against the cache, not kept.
  void denoise_cached(Tensor& logits) const {
    std::vector<Span> spans;
    for (const Row& row : rows_) spans.emplace_back(row.block_begin, block_end(row));
    std::int32_t width = 0;
    const BlockStep b = block_step(spans, true, width);
    model_.step(*state_, b.input(width, false), logits);
  }

  // The rule on one row's candidates (logits rows first..): fills the slots it picks; false
  // once the row is finished.
  bool fill(Row& row, const Tensor& logits, std::size_t first) {
    DiffusionOutput& o = out_[row.index];
    const auto& c = row.candidates;
    // One stream per (seed, record, step): the same draws in any batch.
    SplitMix64 rng(
        mix_seed(options_.seed, row.input->record_id, static_cast<std::uint64_t>(o.steps)));
    std::vector<TokenId> token(c.size());
    std::vector<double> logprob(c.size());
    confidence_.assign(c.size(), 0.0f);
    for (std::size_t k = 0; k < c.size(); ++k) {
      const std::span<const float> row_logits = tensor_row(logits, first + k);
      token[k] = choose(row_logits, options_.temperature, rng, weights_);
      logprob[k] = static_cast<double>(row_logits[static_cast<std::size_t>(token[k])]) -
                   decoding::log_sum_exp(row_logits);
      confidence_[k] = options_.random_remasking ? static_cast<float>(rng.uniform())
                                                 : static_cast<float>(std::exp(logprob[k]));
    }
    const std::int32_t count = std::min<std::int32_t>(row.schedule[row.step_in_block],
                                                      static_cast<std::int32_t>(c.size()));
    decoding::top_k(confidence_, count, picked_);  // ties: the earlier slot
    for (std::int32_t k : picked_) {
      const auto s = static_cast<std::size_t>(c[static_cast<std::size_t>(k)]);
      row.masked[s] = 0;
      row.tokens[row.input->source.size() + s] = token[static_cast<std::size_t>(k)];
      o.tokens[s] = token[static_cast<std::size_t>(k)];
      o.step[s] = o.steps;
      o.logprob[s] = logprob[static_cast<std::size_t>(k)];
    }
    ++o.steps;
    if (++row.step_in_block < row.schedule.size()) return true;
    row.block_begin = block_end(row);
    if (++row.block == o.blocks.size()) return false;
    row.schedule = diffusion_schedule(o.blocks[row.block], row.input->slots, options_.steps);
    row.step_in_block = 0;
    return true;
  }

  const Model& model_;
  const MaskStrategy& mask_;
  TokenId mask_token_;
  DiffusionOptions options_;
  std::span<const DiffusionInput> inputs_;
  std::vector<DiffusionOutput> out_;
  std::vector<SequenceMask> masks_;  // per input, until it joins
  bool cached_;
  std::size_t next_ = 0;  // the next input to join
  std::vector<Row> rows_;
  std::unique_ptr<DecodeState> state_;  // the cached path: one row per rows_ entry
  std::vector<double> weights_;
  std::vector<float> confidence_;
  std::vector<std::int32_t> picked_;
};

}  // namespace

std::vector<std::int32_t> diffusion_blocks(const MaskStrategy& mask, std::int32_t source_length,
                                           std::int32_t slots) {
  return blocks_of(slot_mask(mask, source_length, slots, 0), source_length, slots);
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

std::vector<DiffusionOutput> diffusion_decode(const Model& model, const MaskStrategy& mask,
                                              TokenId mask_token,
                                              std::span<const DiffusionInput> inputs,
                                              const DiffusionOptions& options,
                                              const DiffusionBatching& batching) {
  // Records whose masks keep finished blocks cached decode apart from the others, so that each
  // takes the same path (and gives the same bits) in any batch.
  const bool several = !options.recompute && takes_several_tokens(model);
  std::vector<DiffusionInput> parts[2];
  std::vector<std::size_t> where[2];
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const DiffusionInput& in = inputs[i];
    const auto n = static_cast<std::int32_t>(in.source.size());
    const bool cached = several && in.slots > 0 &&
                        cacheable(slot_mask(mask, n, in.slots, in.record_id), n, in.slots);
    parts[cached].push_back(in);
    where[cached].push_back(i);
  }
  std::vector<DiffusionOutput> out(inputs.size());
  for (const bool cached : {false, true}) {
    if (parts[cached].empty()) continue;
    std::vector<DiffusionOutput> decoded =
        Denoiser(model, mask, mask_token, options, parts[cached], cached).run(batching);
    for (std::size_t k = 0; k < decoded.size(); ++k) out[where[cached][k]] = std::move(decoded[k]);
  }
  return out;
}

}  // namespace masque
