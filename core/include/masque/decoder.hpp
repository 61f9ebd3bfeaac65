// Plugin kind `decoder`: chooses tokens, step by step, from a Stepper the task provides.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "masque/plugin.hpp"
#include "masque/tensor.hpp"
#include "masque/tokenizer.hpp"

namespace masque {

// What a decoder drives. Implemented by the task (lm-generate, seq2seq, plm-generate...).
// Rows: at the start there is one row per record (row r = record r); select() reorders,
// replicates (beams) or drops rows.
class BOOST_SYMBOL_VISIBLE Stepper {
 public:
  virtual ~Stepper();
  virtual std::int32_t num_records() const = 0;
  virtual std::int32_t vocab_size() const = 0;
  // Stable id of a record (its number in the input): seeds per-record random streams, so a
  // record's output does not depend on its batch or position in it.
  virtual std::uint64_t record_id(std::int32_t record) const = 0;
  // Tokens the record already has (the prompt), for repetition penalties.
  virtual std::span<const TokenId> context(std::int32_t record) const = 0;
  // Tokens the decoder must emit first (a target prefix); their log-probs are not scored.
  virtual std::span<const TokenId> forced_prefix(std::int32_t record) const;
  // A hard limit on the number of steps for the record (model context left, number of masks
  // to fill); -1 = none.
  virtual std::int32_t max_steps(std::int32_t record) const;
  // Exactly max_steps() tokens are produced and end tokens have no meaning (plm-generate).
  virtual bool fixed_length() const;
  // End tokens used when the decoder's `end_tokens` parameter is empty (model EOS).
  virtual std::vector<TokenId> default_end_tokens() const = 0;

  // Logits [rows, vocab_size] of the current rows.
  virtual void logits(Tensor& out) = 0;
  // Appends one token to every current row.
  virtual void advance(std::span<const TokenId> tokens) = 0;
  // New row i becomes old row rows[i].
  virtual void select(std::span<const std::int32_t> rows) = 0;
  // An independent copy of the current rows and records (a look-ahead, e.g. for
  // return_alternatives). The default throws RuntimeError: the stepper cannot be copied.
  virtual std::unique_ptr<Stepper> fork() const;
  // Continuous batching: takes in records the task holds back, each as one new row with its
  // logits ready, as many as fit the task's row limit once each has `rows_per_record` rows (at
  // least one when no row is left). With `keep_rows` the new rows come after the current ones;
  // without, every current row is finished and the new rows replace them (rows 0..count-1). Call
  // it with finished rows already dropped. Returns how many came in: they are records
  // num_records() - count .. num_records() - 1. The default: 0 (a fixed set of records).
  virtual std::int32_t admit(std::int32_t rows_per_record, bool keep_rows);
  // True when a hypothesis of `record` whose tokens (forced prefix and generated, the newest
  // last) are `tokens` is finished by the text they decode to (a task's stop strings): the
  // decoder then ends it as it ends one at an end token, with the token kept. Default: false.
  virtual bool stops(std::int32_t record, std::span<const TokenId> tokens) const;
};

struct Hypothesis {
  std::vector<TokenId> tokens;  // forced prefix + generated tokens, end token excluded
  std::vector<float> logprobs;  // log-prob of each scored token, end token included if produced
  double score = 0.0;           // what the decoder ranks by (length-normalized for beam)
  bool finished = false;        // stopped by an end token or a stop string (false: a length limit)
};

struct DecodeResult {
  std::vector<Hypothesis> hypotheses;  // best first, at least one
};

// Contract: decode() is const and may run concurrently on different steppers.
class BOOST_SYMBOL_VISIBLE Decoder : public Plugin {
 public:
  virtual std::vector<DecodeResult> decode(Stepper& stepper) const = 0;
  // Continuous batching: decode() calls stepper.admit() as rows finish, until it returns 0
  // with no row left, and decodes every admitted record (one result per record, in record
  // order). A task may then start the stepper with no record at all. Default: false.
  virtual bool admits_records() const;
};

}  // namespace masque
