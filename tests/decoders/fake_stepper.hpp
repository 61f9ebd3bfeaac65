// Fake steppers for the decoder tests: logits are a deterministic function of a row's history
// (the record's context followed by the tokens the row has received), so a record's logits do
// not depend on its batch, its row or the order of calls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "masque/decoder.hpp"

namespace masque::test {

// Fills `out` (vocab entries) for one history.
using LogitsModel = std::function<void(std::span<const TokenId> history, std::span<float> out)>;

struct FakeRecord {
  std::vector<TokenId> context;
  std::vector<TokenId> prefix;
  std::int32_t max_steps = -1;
  std::uint64_t id = 0;
};

// Also checks the decoder side of the protocol: logits() before every advance(), one token
// per row, row indices in range.
class FakeStepper final : public Stepper {
 public:
  FakeStepper(std::int32_t vocab, std::vector<FakeRecord> records, LogitsModel model,
              std::vector<TokenId> default_end_tokens = {2}, bool fixed_length = false);

  std::int32_t num_records() const override;
  std::int32_t vocab_size() const override { return vocab_; }
  std::uint64_t record_id(std::int32_t record) const override;
  std::span<const TokenId> context(std::int32_t record) const override;
  std::span<const TokenId> forced_prefix(std::int32_t record) const override;
  std::int32_t max_steps(std::int32_t record) const override;
  bool fixed_length() const override { return fixed_length_; }
  std::vector<TokenId> default_end_tokens() const override { return default_end_tokens_; }

  void logits(Tensor& out) override;
  void advance(std::span<const TokenId> tokens) override;
  void select(std::span<const std::int32_t> rows) override;

  // Stepper::stops: hypotheses whose tokens satisfy `rule` end there (a task's stop strings).
  void set_stop_rule(std::function<bool(std::span<const TokenId>)> rule) {
    stop_rule_ = std::move(rule);
  }
  bool stops(std::int32_t, std::span<const TokenId> tokens) const override {
    return stop_rule_ && stop_rule_(tokens);
  }

  // Rows present at each logits() call.
  const std::vector<std::size_t>& rows_per_step() const { return rows_per_step_; }

 private:
  struct Row {
    std::int32_t record = 0;
    std::vector<TokenId> tokens;
  };
  std::vector<TokenId> history(const Row& row) const;

  std::int32_t vocab_;
  std::vector<FakeRecord> records_;
  LogitsModel model_;
  std::vector<TokenId> default_end_tokens_;
  bool fixed_length_;
  std::vector<Row> rows_;
  bool logits_given_ = false;
  std::vector<std::size_t> rows_per_step_;
  std::function<bool(std::span<const TokenId>)> stop_rule_;
};

// A bigram model given as probabilities: the logits are their logs, so log-probs are exactly
// what the table says (up to float rounding). Key -1 = the empty history.
LogitsModel bigram_model(std::map<TokenId, std::vector<double>> table);

// Pseudo-random logits in [-3, 3) from a hash of (seed, history, token).
LogitsModel hashed_model(std::uint64_t seed);

// The same logits whatever the history.
LogitsModel constant_model(std::vector<float> logits);

}  // namespace masque::test
