#include "beam_search.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "masque/error.hpp"
#include "masque/tensor.hpp"

namespace masque::beam {

namespace {

using decoding::is_end_token;

// CTranslate2's score for beams that must not win (secondary beams under a forced prefix).
constexpr double kSecondary = -1e10;
// CTranslate2's initial score of the replicated beams (float lowest).
constexpr double kUnreachable = -3.4028234663852886e38;

// One live row of the stepper.
struct Beam {
  std::vector<TokenId> tokens;  // forced prefix and generated tokens
  std::vector<float> logprobs;  // of the generated tokens
  double score = 0;             // cumulative, not normalized
  bool on_prefix = true;        // has followed the biased prefix so far
};

struct Candidate {
  double score = 0;  // the beam's cumulative score plus this token's log-prob
  float logprob = 0;
  bool scored = false;    // false for forced prefix tokens
  std::int32_t beam = 0;  // index among the record's beams
  TokenId token = 0;
};

// Best first; ties go to the lower flat index (beam, then token), as in a flattened top-k.
bool better(const Candidate& a, const Candidate& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.beam != b.beam) return a.beam < b.beam;
  return a.token < b.token;
}

// A record still being decoded; its beams are the rows first_row .. first_row + num_beams - 1.
struct ActiveRecord {
  std::int32_t record = 0;
  std::int32_t first_row = 0;
  std::int32_t num_beams = 1;
  bool top_finished = false;  // candidate 0 finished at some step
  std::int32_t step = 0;      // the record's decoding step (admitted records start at 0)
  std::vector<Hypothesis> finished;
};

// Capacity reserved per beam so that extending beams does not allocate in the loop.
std::size_t reserve_per_beam(const std::vector<decoding::RecordPlan>& plans) {
  std::int32_t longest = 0;
  for (const auto& plan : plans) longest = std::max(longest, plan.limit);
  return decoding::tokens_to_reserve(longest);
}

class BeamSearch {
 public:
  BeamSearch(Stepper& stepper, const DecodingOptions& options, const BeamOptions& beam)
      : stepper_(stepper),
        options_(options),
        beam_size_(beam.beam_size),
        num_hypotheses_(static_cast<std::size_t>(beam.num_hypotheses)),
        max_finished_(static_cast<std::size_t>(max_finished(beam))),
        vocab_(stepper.vocab_size()),
        plans_(decoding::plan_records(stepper, options)),
        end_tokens_(decoding::resolve_end_tokens(stepper, options)),
        processor_(options, end_tokens_, vocab_),
        reserve_(reserve_per_beam(plans_)) {}

  std::vector<DecodeResult> run() {
    start();
    for (;;) {
      const std::int32_t admitted = admit();
      if (!active_.empty())
        decode_step();
      else if (admitted == 0)
        break;
    }
    return std::move(results_);
  }

 private:
  // One beam per record; with fewer than 2K tokens, K beams at once (all but the first
  // scored as the lowest float) so that there are 2K candidates from the first step, which
  // is what CTranslate2 does.
  void start() {
    results_.resize(plans_.size());
    std::vector<std::int32_t> rows;
    for (std::int32_t r = 0; r < static_cast<std::int32_t>(plans_.size()); ++r)
      add_record(r, r, rows);
    if (!rows.empty() && !decoding::is_identity(rows, plans_.size())) stepper_.select(rows);
  }

  // Record `r`, whose prompt is stepper row `row`, gets its first beams (rows of `rows`).
  void add_record(std::int32_t r, std::int32_t row, std::vector<std::int32_t>& rows) {
    if (plans_[r].limit == 0) {
      results_[r].hypotheses.emplace_back();  // nothing to decode: empty, score 0
      return;
    }
    const std::int32_t beams = 2 * beam_size_ > vocab_ ? beam_size_ : 1;
    ActiveRecord& a = active_.emplace_back();
    a.record = r;
    a.first_row = static_cast<std::int32_t>(rows.size());
    a.num_beams = beams;
    for (std::int32_t b = 0; b < beams; ++b) {
      rows.push_back(row);
      new_beam(beams_, beam_count_).score = b == 0 ? 0.0 : kUnreachable;
    }
  }

  // Continuous batching: records the stepper takes in join after the live beams, or replace
  // the finished rows when no record is active (a record counts beam_size rows).
  std::int32_t admit() {
    const std::int32_t first = stepper_.num_records();
    const std::int32_t count = stepper_.admit(beam_size_, !active_.empty());
    if (count <= 0) return 0;
    // The stepper's rows are now the live beams, then one prompt row per admitted record;
    // add_record appends beams, so the live count is taken before it runs.
    const std::size_t live = beam_count_;
    std::vector<std::int32_t> rows(live);
    for (std::size_t i = 0; i < live; ++i) rows[i] = static_cast<std::int32_t>(i);
    results_.resize(static_cast<std::size_t>(first + count));
    for (std::int32_t r = first; r < first + count; ++r) {
      plans_.push_back(decoding::plan_record(stepper_, options_, r));
      add_record(r, static_cast<std::int32_t>(live) + (r - first), rows);
    }
    if (!decoding::is_identity(rows, live + static_cast<std::size_t>(count))) stepper_.select(rows);
    return count;
  }

  // A cleared beam at the end of `pool`, reusing a previous beam's buffers when there is one.
  Beam& new_beam(std::vector<Beam>& pool, std::size_t& count) {
    if (count == pool.size()) {
      Beam& b = pool.emplace_back();
      b.tokens.reserve(reserve_);
      b.logprobs.reserve(reserve_);
    }
    Beam& b = pool[count++];
    b.tokens.clear();
    b.logprobs.clear();
    b.score = 0;
    b.on_prefix = true;
    return b;
  }

  void decode_step() {
    stepper_.logits(logits_);
    decoding::check_step_logits(logits_, beam_count_, vocab_);
    next_count_ = 0;
    origins_.clear();
    next_tokens_.clear();
    std::size_t kept = 0;
    for (ActiveRecord& a : active_) {
      const auto first_new_row = static_cast<std::int32_t>(next_count_);
      if (step_record(a, a.step++)) {
        results_[a.record].hypotheses = std::move(a.finished);
        continue;
      }
      a.first_row = first_new_row;
      a.num_beams = static_cast<std::int32_t>(next_count_) - first_new_row;
      if (&active_[kept] != &a) active_[kept] = std::move(a);
      ++kept;
    }
    active_.resize(kept);
    std::swap(beams_, next_beams_);
    beam_count_ = next_count_;
    if (origins_.empty()) return;
    if (!decoding::is_identity(origins_, logits_.dim(0))) stepper_.select(origins_);
    stepper_.advance(next_tokens_);
  }

  // One step of one record; true when the record is done.
  bool step_record(ActiveRecord& a, std::int32_t step) {
    const decoding::RecordPlan& plan = plans_[a.record];
    const auto prefix_length = static_cast<std::int32_t>(plan.prefix.size());
    const auto count = static_cast<std::int32_t>(
        std::min<std::int64_t>(2 * beam_size_, std::int64_t{a.num_beams} * vocab_));
    if (step < prefix_length) {
      forced_candidates(plan.prefix[step], count);
    } else {
      scored_candidates(a, plan, count, step);
      if (prefix_length > 0 && step == prefix_length) demote_secondary_ends(a);
    }
    const bool last = step + 1 == plan.limit;
    fill_slots(a, std::min(beam_size_, count), step >= prefix_length, last);
    if (is_done(a, last)) {
      finalize(a);
      return true;
    }
    continue_beams(a, step);
    return false;
  }

  void forced_candidates(TokenId token, std::int32_t count) {
    candidates_.clear();
    for (std::int32_t k = 0; k < count; ++k)
      candidates_.push_back({.score = k == 0 ? 0.0 : kSecondary, .token = token});
  }

  void scored_candidates(const ActiveRecord& a, const decoding::RecordPlan& plan,
                         std::int32_t count, std::int32_t step) {
    candidates_.clear();
    beam_lse_.resize(static_cast<std::size_t>(a.num_beams));
    for (std::int32_t b = 0; b < a.num_beams; ++b) add_beam_candidates(a, plan, b, count, step);
    if (a.num_beams > 1) {
      // A beam's own candidates are already ordered; only the merge needs sorting.
      std::partial_sort(candidates_.begin(), candidates_.begin() + count, candidates_.end(),
                        better);
      candidates_.resize(static_cast<std::size_t>(count));
    }
  }

  // The beam's best `count` tokens: no other token of this beam can be among the best `count`.
  void add_beam_candidates(const ActiveRecord& a, const decoding::RecordPlan& plan, std::int32_t b,
                           std::int32_t count, std::int32_t step) {
    Beam& beam = beams_[static_cast<std::size_t>(a.first_row + b)];
    std::span<float> row = logits_row(a.first_row + b);
    processor_.apply(row, plan.context, beam.tokens);
    const bool biased = beam.on_prefix && step < static_cast<std::int32_t>(plan.biased.size());
    if (biased) decoding::bias_towards(row, plan.biased[step], options_.prefix_bias_beta);
    const double lse = biased ? 0.0 : decoding::log_sum_exp(row);  // biased: log-probs
    beam_lse_[static_cast<std::size_t>(b)] = lse;
    decoding::top_k(row, count, top_ids_);
    for (std::int32_t id : top_ids_) {
      const double logprob = row[static_cast<std::size_t>(id)] - lse;
      candidates_.push_back({.score = beam.score + logprob,
                             .logprob = static_cast<float>(logprob),
                             .scored = true,
                             .beam = b,
                             .token = id});
    }
  }

  // CTranslate2's guard at the first free step after a prefix: a secondary end candidate
  // becomes token 0 of beam 0 with score -1e10.
  void demote_secondary_ends(const ActiveRecord& a) {
    const std::span<float> row = logits_row(a.first_row);
    for (std::size_t k = 1; k < candidates_.size(); ++k) {
      if (!is_end_token(end_tokens_, candidates_[k].token)) continue;
      candidates_[k] = {.score = kSecondary,
                        .logprob = static_cast<float>(row[0] - beam_lse_[0]),
                        .scored = true,
                        .beam = 0,
                        .token = 0};
    }
  }

  // Slots 0..slots-1 take candidates 0..slots-1; finished ones (an end token, a stop string)
  // are registered and replaced by the next unused candidate that does not finish.
  void fill_slots(ActiveRecord& a, std::int32_t slots, bool free_step, bool last) {
    slots_.clear();
    std::size_t spare = static_cast<std::size_t>(slots);
    for (std::int32_t k = 0; k < slots; ++k) {
      const Candidate& c = candidates_[static_cast<std::size_t>(k)];
      const bool ended = free_step && is_end_token(end_tokens_, c.token);
      const bool stopped = free_step && !ended && stops(a, c);
      std::size_t slot = static_cast<std::size_t>(k);
      if (ended || stopped || last) {
        if (k == 0) a.top_finished = true;
        register_hypothesis(a, c, ended, stopped);
        slot = refill(a, spare, slot);
      }
      slots_.push_back(slot);
    }
  }

  // The candidate's tokens decode to a stop string (Stepper::stops).
  bool stops(const ActiveRecord& a, const Candidate& c) {
    const Beam& origin = beams_[static_cast<std::size_t>(a.first_row + c.beam)];
    stop_scratch_.assign(origin.tokens.begin(), origin.tokens.end());
    stop_scratch_.push_back(c.token);
    return stepper_.stops(a.record, stop_scratch_);
  }

  std::size_t refill(const ActiveRecord& a, std::size_t& spare, std::size_t fallback) {
    for (; spare < candidates_.size(); ++spare)
      if (!is_end_token(end_tokens_, candidates_[spare].token) && !stops(a, candidates_[spare]))
        return spare++;
    return fallback;
  }

  // Its score is normalized here: the length counts an end token kept apart.
  void register_hypothesis(ActiveRecord& a, const Candidate& c, bool ended, bool stopped) {
    const Beam& origin = beams_[static_cast<std::size_t>(a.first_row + c.beam)];
    Hypothesis& h = a.finished.emplace_back();
    h.tokens.reserve(origin.tokens.size() + 1);
    h.tokens.assign(origin.tokens.begin(), origin.tokens.end());
    if (!ended || options_.return_end_token) h.tokens.push_back(c.token);
    h.logprobs.reserve(origin.logprobs.size() + 1);
    h.logprobs.assign(origin.logprobs.begin(), origin.logprobs.end());
    if (c.scored) h.logprobs.push_back(c.logprob);
    h.score = decoding::normalized_score(
        c.score, h.tokens.size() + (ended && !options_.return_end_token ? 1 : 0),
        options_.length_penalty);
    h.finished = ended || stopped;
  }

  bool is_done(const ActiveRecord& a, bool last) const {
    if (last) return true;
    if (options_.length_penalty == 0) return a.top_finished && a.finished.size() >= num_hypotheses_;
    return a.finished.size() >= max_finished_;
  }

  void finalize(ActiveRecord& a) const { decoding::sort_hypotheses(a.finished, num_hypotheses_); }

  void continue_beams(const ActiveRecord& a, std::int32_t step) {
    const std::span<const TokenId> biased = plans_[a.record].biased;
    for (std::size_t slot : slots_) {
      const Candidate& c = candidates_[slot];
      const std::int32_t origin_row = a.first_row + c.beam;
      const Beam& origin = beams_[static_cast<std::size_t>(origin_row)];
      Beam& next = new_beam(next_beams_, next_count_);
      next.on_prefix = origin.on_prefix && step < static_cast<std::int32_t>(biased.size()) &&
                       c.token == biased[step];
      next.tokens.assign(origin.tokens.begin(), origin.tokens.end());
      next.tokens.push_back(c.token);
      next.logprobs.assign(origin.logprobs.begin(), origin.logprobs.end());
      if (c.scored) next.logprobs.push_back(c.logprob);
      next.score = c.score;
      origins_.push_back(origin_row);
      next_tokens_.push_back(c.token);
    }
  }

  std::span<float> logits_row(std::int32_t row) {
    return {logits_.f32() + static_cast<std::size_t>(row) * static_cast<std::size_t>(vocab_),
            static_cast<std::size_t>(vocab_)};
  }

  Stepper& stepper_;
  const DecodingOptions& options_;
  std::int32_t beam_size_;
  std::size_t num_hypotheses_;
  std::size_t max_finished_;
  std::int32_t vocab_;
  std::vector<decoding::RecordPlan> plans_;
  std::vector<TokenId> end_tokens_;
  decoding::LogitsProcessor processor_;
  std::vector<DecodeResult> results_;
  std::vector<ActiveRecord> active_;
  // Rows of the stepper (beams_) and the rows being built for the next step (next_beams_);
  // swapped every step so their buffers are reused.
  std::vector<Beam> beams_, next_beams_;
  std::size_t beam_count_ = 0, next_count_ = 0;
  std::vector<Candidate> candidates_;
  std::vector<std::size_t> slots_;
  std::vector<TokenId> stop_scratch_;  // a candidate's tokens, for Stepper::stops
  std::vector<std::int32_t> origins_;  // old row of each next row
  std::vector<TokenId> next_tokens_;
  std::vector<std::int32_t> top_ids_;
  std::vector<double> beam_lse_;
  std::size_t reserve_;  // tokens per beam reserved up front
  Tensor logits_;
};

}  // namespace

std::int32_t max_finished(const BeamOptions& options) {
  return static_cast<std::int32_t>(
      std::round(static_cast<float>(options.beam_size) * static_cast<float>(options.patience)));
}

std::vector<DecodeResult> beam_search(Stepper& stepper, const DecodingOptions& options,
                                      const BeamOptions& beam) {
  return BeamSearch(stepper, options, beam).run();
}

}  // namespace masque::beam
