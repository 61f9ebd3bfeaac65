// return_alternatives (CTranslate2's decode_alternatives): a look-ahead copy of the stepper runs
// the forced prefixes; where a record's prefix ends, its best next tokens are expanded and a
// copy of the look-ahead at that point, one row per expansion, is completed by the decoder's
// own search. Records are grouped by prefix length, so each group's completion has one step
// budget, as CTranslate2's per-record completion has.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "masque/decoding.hpp"
#include "masque/error.hpp"

namespace masque::decoding {

namespace {

constexpr float kBlocked = std::numeric_limits<float>::lowest();
// Alternative i of record r gets the record id r * kIdStride + i (its own sampling stream).
constexpr std::uint64_t kIdStride = 1u << 16;

struct Expansion {
  TokenId token = 0;
  float logprob = 0;
};

// One row per expansion of a group's records (same prefix length), after the expansion token.
class AlternativesStepper final : public Stepper {
 public:
  struct Row {
    std::int32_t record = 0;  // in the base stepper
    std::int32_t index = 0;   // alternative number
  };
  AlternativesStepper(const Stepper& base, std::unique_ptr<Stepper> rows, std::vector<Row> records,
                      std::int32_t consumed)
      : base_(base), rows_(std::move(rows)), records_(std::move(records)), consumed_(consumed) {}

  std::int32_t num_records() const override { return static_cast<std::int32_t>(records_.size()); }
  std::int32_t vocab_size() const override { return base_.vocab_size(); }
  std::uint64_t record_id(std::int32_t r) const override {
    return base_.record_id(records_[r].record) * kIdStride +
           static_cast<std::uint64_t>(records_[r].index);
  }
  std::span<const TokenId> context(std::int32_t r) const override {
    return base_.context(records_[r].record);
  }
  std::int32_t max_steps(std::int32_t r) const override {
    const std::int32_t hard = base_.max_steps(records_[r].record);
    return hard < 0 ? -1 : std::max(hard - consumed_, 0);
  }
  std::vector<TokenId> default_end_tokens() const override { return base_.default_end_tokens(); }
  void logits(Tensor& out) override { rows_->logits(out); }
  void advance(std::span<const TokenId> tokens) override { rows_->advance(tokens); }
  void select(std::span<const std::int32_t> rows) override { rows_->select(rows); }

 private:
  const Stepper& base_;
  std::unique_ptr<Stepper> rows_;
  std::vector<Row> records_;
  std::int32_t consumed_;
};

class Alternatives {
 public:
  Alternatives(Stepper& stepper, const DecodingOptions& options, std::int32_t num_hypotheses,
               const Search& search)
      : stepper_(stepper),
        options_(options),
        num_hypotheses_(num_hypotheses),
        search_(search),
        plans_(plan_records(stepper, options)),
        end_tokens_(resolve_end_tokens(stepper, options)),
        processor_(options, end_tokens_, stepper.vocab_size()),
        expansions_(plans_.size()),
        results_(plans_.size()) {}

  std::vector<DecodeResult> run() {
    std::vector<std::int32_t> rows;  // records that get an expansion
    for (std::int32_t r = 0; r < static_cast<std::int32_t>(plans_.size()); ++r) {
      const RecordPlan& plan = plans_[r];
      if (static_cast<std::int32_t>(plan.prefix.size()) >= plan.limit) {
        Hypothesis& h = results_[r].hypotheses.emplace_back();
        h.tokens.assign(plan.prefix.begin(), plan.prefix.begin() + plan.limit);
        continue;
      }
      rows.push_back(r);
    }
    if (rows.empty()) return std::move(results_);
    std::unique_ptr<Stepper> ahead = stepper_.fork();
    if (!is_identity(rows, plans_.size())) ahead->select(rows);
    look_ahead(*ahead, std::move(rows));
    return std::move(results_);
  }

 private:
  // Runs the prefixes; at each step, the records whose prefix ends there are expanded and
  // completed, then leave the look-ahead.
  void look_ahead(Stepper& ahead, std::vector<std::int32_t> records) {
    Tensor logits;
    std::vector<std::int32_t> keep, ending;
    std::vector<TokenId> next;
    for (std::size_t step = 0; !records.empty(); ++step) {
      ahead.logits(logits);
      keep.clear();
      next.clear();
      ending.clear();
      for (std::size_t row = 0; row < records.size(); ++row) {
        const RecordPlan& plan = plans_[records[row]];
        if (plan.prefix.size() == step) {
          expand(records[row], logits, row);
          ending.push_back(static_cast<std::int32_t>(row));
        } else {
          keep.push_back(static_cast<std::int32_t>(row));
          next.push_back(plan.prefix[step]);
        }
      }
      if (!ending.empty()) complete(ahead, records, ending, static_cast<std::int32_t>(step));
      if (keep.empty()) return;
      if (keep.size() != records.size()) {
        ahead.select(keep);
        for (std::size_t i = 0; i < keep.size(); ++i) records[i] = records[keep[i]];
        records.resize(keep.size());
      }
      ahead.advance(next);
    }
  }

  // The record's best next tokens, end tokens blocked (CTranslate2 expands with a one-step beam
  // search of width num_hypotheses and min length 1).
  void expand(std::int32_t record, const Tensor& logits, std::size_t row) {
    const auto vocab = static_cast<std::size_t>(logits.dim(1));
    scratch_.assign(logits.f32() + row * vocab, logits.f32() + (row + 1) * vocab);
    std::span<float> values(scratch_);
    processor_.apply(values, plans_[record].context, {});
    for (TokenId e : end_tokens_) values[static_cast<std::size_t>(e)] = kBlocked;
    const double lse = log_sum_exp(values);
    top_k(values, num_hypotheses_, top_);
    for (std::int32_t id : top_) {
      const double logprob = values[static_cast<std::size_t>(id)] - lse;
      if (std::exp(logprob) < options_.min_alternative_expansion_prob) break;
      expansions_[record].push_back({id, static_cast<float>(logprob)});
    }
  }

  // A copy of the look-ahead holding one row per expansion of the `ending` rows, advanced with
  // the expansion tokens and completed by the decoder's search.
  void complete(const Stepper& ahead, const std::vector<std::int32_t>& records,
                const std::vector<std::int32_t>& ending, std::int32_t prefix_length) {
    std::vector<std::int32_t> rows;
    std::vector<TokenId> tokens;
    std::vector<AlternativesStepper::Row> alternatives;
    for (std::int32_t row : ending) {
      const std::int32_t record = records[static_cast<std::size_t>(row)];
      for (std::size_t i = 0; i < expansions_[record].size(); ++i) {
        rows.push_back(row);
        tokens.push_back(expansions_[record][i].token);
        alternatives.push_back({record, static_cast<std::int32_t>(i)});
      }
      if (expansions_[record].empty()) {  // nothing likely enough: the prefix alone
        Hypothesis& h = results_[record].hypotheses.emplace_back();
        const auto& prefix = plans_[record].prefix;
        h.tokens.assign(prefix.begin(), prefix.end());
      }
    }
    if (alternatives.empty()) return;
    const std::int32_t consumed = prefix_length + 1;
    std::vector<DecodeResult> completions(alternatives.size());
    DecodingOptions rest = options_;
    rest.return_alternatives = false;
    rest.max_new_tokens = options_.max_new_tokens - consumed;
    rest.min_new_tokens = std::max(options_.min_new_tokens - consumed, 0);
    if (rest.max_new_tokens > 0) {
      std::unique_ptr<Stepper> copy = ahead.fork();
      copy->select(rows);
      copy->advance(tokens);
      AlternativesStepper stepper(stepper_, std::move(copy), alternatives, consumed);
      completions = search_(stepper, rest);
      if (completions.size() != alternatives.size())
        throw RuntimeError("decode_alternatives: the search returned " +
                           std::to_string(completions.size()) + " results for " +
                           std::to_string(alternatives.size()) + " alternatives");
    }
    for (std::size_t a = 0; a < alternatives.size(); ++a)
      add_hypothesis(alternatives[a], completions[a]);
  }

  void add_hypothesis(const AlternativesStepper::Row& alternative, const DecodeResult& completion) {
    const RecordPlan& plan = plans_[alternative.record];
    const Expansion& e =
        expansions_[alternative.record][static_cast<std::size_t>(alternative.index)];
    Hypothesis& h = results_[alternative.record].hypotheses.emplace_back();
    h.tokens.assign(plan.prefix.begin(), plan.prefix.end());
    h.tokens.push_back(e.token);
    h.logprobs.push_back(e.logprob);
    h.score = e.logprob;
    if (completion.hypotheses.empty()) return;  // the step budget ended with the expansion
    const Hypothesis& rest = completion.hypotheses.front();
    h.tokens.insert(h.tokens.end(), rest.tokens.begin(), rest.tokens.end());
    h.logprobs.insert(h.logprobs.end(), rest.logprobs.begin(), rest.logprobs.end());
    h.score += rest.score;
    h.finished = rest.finished;
  }

  Stepper& stepper_;
  const DecodingOptions& options_;
  std::int32_t num_hypotheses_;
  const Search& search_;
  std::vector<RecordPlan> plans_;
  std::vector<TokenId> end_tokens_;
  LogitsProcessor processor_;
  std::vector<std::vector<Expansion>> expansions_;  // per record
  std::vector<DecodeResult> results_;
  std::vector<float> scratch_;
  std::vector<std::int32_t> top_;
};

}  // namespace

std::vector<DecodeResult> decode_alternatives(Stepper& stepper, const DecodingOptions& options,
                                              std::int32_t num_hypotheses, const Search& search) {
  if (num_hypotheses < 1) throw ConfigError("num_hypotheses must be >= 1");
  if (options.prefix_bias_beta > 0)
    throw ConfigError("prefix_bias_beta (a biased prefix) cannot be used with return_alternatives");
  return Alternatives(stepper, options, num_hypotheses, search).run();
}

}  // namespace masque::decoding
