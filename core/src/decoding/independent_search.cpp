// The decoding loop of greedy search and sampling: every row is an independent sequence that
// takes one token per step; a row leaves the stepper as soon as it is finished.
#include <algorithm>
#include <string>

#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "masque/tensor.hpp"

namespace masque::decoding {

namespace {

struct Sequence {
  std::int32_t record = 0;
  std::int32_t index = 0;  // record * per_record + hypothesis
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
  double logprob_sum = 0;
  bool on_prefix = true;  // has followed the biased prefix so far
  std::int32_t step = 0;  // the record's decoding step (records admitted later start at 0)
};

class IndependentSearch {
 public:
  IndependentSearch(Stepper& stepper, const DecodingOptions& options, std::int32_t per_record,
                    TokenChooser& chooser)
      : stepper_(stepper),
        options_(options),
        per_record_(per_record),
        chooser_(chooser),
        vocab_(stepper.vocab_size()),
        plans_(plan_records(stepper, options)),
        end_tokens_(resolve_end_tokens(stepper, options)),
        processor_(options, end_tokens_, vocab_) {}

  std::vector<DecodeResult> run() {
    start();
    for (;;) {
      const std::int32_t admitted = admit();
      if (!alive_.empty())
        decode_step();
      else if (admitted == 0)
        break;
    }
    for (DecodeResult& result : results_)
      sort_hypotheses(result.hypotheses, result.hypotheses.size());
    return std::move(results_);
  }

 private:
  // One row per (record, hypothesis); records with nothing to decode get an empty hypothesis.
  void start() {
    results_.resize(plans_.size());
    for (std::int32_t r = 0; r < static_cast<std::int32_t>(plans_.size()); ++r) {
      results_[r].hypotheses.resize(static_cast<std::size_t>(per_record_));
      if (plans_[r].limit == 0) continue;
      for (std::int32_t h = 0; h < per_record_; ++h) add_sequence(r, h, r);
    }
    if (!alive_.empty() && !is_identity(keep_, plans_.size())) stepper_.select(keep_);
  }

  // Continuous batching: the records the stepper takes in join as rows after the live ones
  // (or replace the finished rows when none is live).
  std::int32_t admit() {
    const std::int32_t first = stepper_.num_records();
    const std::int32_t count = stepper_.admit(per_record_, !alive_.empty());
    if (count <= 0) return 0;
    const auto live = static_cast<std::int32_t>(alive_.size());
    keep_.resize(static_cast<std::size_t>(live));
    for (std::int32_t i = 0; i < live; ++i) keep_[i] = i;
    results_.resize(static_cast<std::size_t>(first + count));
    for (std::int32_t r = first; r < first + count; ++r) {
      plans_.push_back(plan_record(stepper_, options_, r));
      results_[r].hypotheses.resize(static_cast<std::size_t>(per_record_));
      if (plans_[r].limit == 0) continue;
      for (std::int32_t h = 0; h < per_record_; ++h) add_sequence(r, h, live + (r - first));
    }
    if (!is_identity(keep_, static_cast<std::size_t>(live + count))) stepper_.select(keep_);
    return count;
  }

  // `row`: the stepper row holding the record's prompt.
  void add_sequence(std::int32_t record, std::int32_t hypothesis, std::int32_t row) {
    Sequence& seq = alive_.emplace_back();
    seq.record = record;
    seq.index = record * per_record_ + hypothesis;
    const auto reserve = tokens_to_reserve(plans_[record].limit);
    seq.tokens.reserve(reserve);
    seq.logprobs.reserve(reserve);
    keep_.push_back(row);
  }

  void decode_step() {
    stepper_.logits(logits_);
    check_step_logits(logits_, alive_.size(), vocab_);
    keep_.clear();
    next_.clear();
    for (std::size_t i = 0; i < alive_.size(); ++i) {
      std::span<float> row(logits_.f32() + i * static_cast<std::size_t>(vocab_),
                           static_cast<std::size_t>(vocab_));
      step_row(static_cast<std::int32_t>(i), row);
    }
    drop_finished();
    if (!next_.empty()) stepper_.advance(next_);
  }

  void step_row(std::int32_t row_index, std::span<float> row) {
    Sequence& seq = alive_[row_index];
    const std::int32_t step = seq.step++;
    const RecordPlan& plan = plans_[seq.record];
    const bool forced = step < static_cast<std::int32_t>(plan.prefix.size());
    const TokenId token = forced ? plan.prefix[step] : choose(seq, plan, row, step);
    const bool ended = !forced && is_end_token(end_tokens_, token);
    if (!ended || options_.return_end_token) seq.tokens.push_back(token);
    const bool stopped = !ended && !forced && stepper_.stops(seq.record, seq.tokens);
    if (ended || stopped || step + 1 == plan.limit) {
      finish(seq, ended, stopped);
      return;
    }
    keep_.push_back(row_index);
    next_.push_back(token);
  }

  TokenId choose(Sequence& seq, const RecordPlan& plan, std::span<float> row, std::int32_t step) {
    processor_.apply(row, plan.context, seq.tokens);
    const bool biased = seq.on_prefix && step < static_cast<std::int32_t>(plan.biased.size());
    if (biased) bias_towards(row, plan.biased[step], options_.prefix_bias_beta);
    const double lse = biased ? 0.0 : log_sum_exp(row);  // a biased row holds log-probs
    const TokenId token = chooser_.choose(row, seq.index);
    if (token < 0 || token >= vocab_)
      throw RuntimeError("decoder chose token " + std::to_string(token) +
                         " outside the vocabulary");
    seq.on_prefix = biased && token == plan.biased[step];
    const double logprob = row[static_cast<std::size_t>(token)] - lse;
    seq.logprobs.push_back(static_cast<float>(logprob));
    seq.logprob_sum += logprob;
    return token;
  }

  // `stopped`: by a stop string, whose last token is one of the tokens.
  void finish(Sequence& seq, bool ended, bool stopped) {
    Hypothesis& h = results_[seq.record].hypotheses[seq.index % per_record_];
    const bool end_apart = ended && !options_.return_end_token;
    h.score = normalized_score(seq.logprob_sum, seq.tokens.size() + (end_apart ? 1 : 0),
                               options_.length_penalty);
    h.finished = ended || stopped;
    h.tokens = std::move(seq.tokens);
    h.logprobs = std::move(seq.logprobs);
  }

  // Finished rows leave the stepper, so later steps only compute live rows.
  void drop_finished() {
    if (keep_.size() == alive_.size()) return;
    if (!keep_.empty()) stepper_.select(keep_);
    for (std::size_t j = 0; j < keep_.size(); ++j)
      if (keep_[j] != static_cast<std::int32_t>(j)) std::swap(alive_[j], alive_[keep_[j]]);
    alive_.resize(keep_.size());
  }

  Stepper& stepper_;
  const DecodingOptions& options_;
  std::int32_t per_record_;
  TokenChooser& chooser_;
  std::int32_t vocab_;
  std::vector<RecordPlan> plans_;
  std::vector<TokenId> end_tokens_;
  LogitsProcessor processor_;
  std::vector<DecodeResult> results_;
  std::vector<Sequence> alive_;
  std::vector<std::int32_t> keep_;  // rows that go on after this step
  std::vector<TokenId> next_;       // their tokens for this step
  Tensor logits_;
};

}  // namespace

std::vector<DecodeResult> decode_independent(Stepper& stepper, const DecodingOptions& options,
                                             std::int32_t per_record, TokenChooser& chooser) {
  if (per_record < 1) throw RuntimeError("decode_independent: per_record must be >= 1");
  return IndependentSearch(stepper, options, per_record, chooser).run();
}

}  // namespace masque::decoding
