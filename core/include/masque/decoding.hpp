// Decoding options and building blocks shared by the decoder plugins (greedy, sample, beam).
//
// Names and semantics follow CTranslate2's decoding options (max_decoding_length,
// min_decoding_length, end_token, repetition_penalty, no_repeat_ngram_size, length_penalty).
//
// Conventions common to every decoder:
// - A record's decoding *step* counts from 0 and includes the forced prefix: step s produces
//   the record's (s+1)-th token. max_new_tokens and min_new_tokens count steps, so forced prefix
//   tokens and the end token each count as one.
// - Logits are processed in this order: repetition penalty, then min_new_tokens and
//   no_repeat_ngram_size, which set blocked tokens to the lowest float.
// - A token's log-prob is log_softmax (computed in double) of the *processed* logits, before
//   any temperature or top-k/top-p restriction: what CTranslate2 reports as token scores.
//   Forced prefix tokens are not scored and have no entry in Hypothesis::logprobs.
// - A hypothesis score is sum(logprobs) / length^length_penalty, where length counts the
//   tokens including the forced prefix, plus the end token when one was produced.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <vector>

#include <boost/config.hpp>

#include "masque/decoder.hpp"
#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "masque/tokenizer.hpp"

namespace masque {

// The options every decoder plugin accepts.
struct DecodingOptions {
  std::int32_t max_new_tokens = 256;      // steps allowed per record (end token included)
  std::int32_t min_new_tokens = 0;        // end tokens are blocked while step < min_new_tokens
  std::vector<TokenId> end_tokens;        // empty: the stepper's default_end_tokens()
  double repetition_penalty = 1.0;        // CTRL / CTranslate2 / HF: > 1 discourages repeats
  std::int32_t no_repeat_ngram_size = 0;  // 0: off
  double length_penalty = 1.0;            // exponent of the length in the score normalization
  // Token sequences never generated: a single token is always blocked, a longer sequence's
  // last token is blocked right after the rest of it (CTranslate2 suppress_sequences).
  std::vector<std::vector<TokenId>> suppress_sequences;
  bool return_end_token = false;  // keep a produced end token in Hypothesis::tokens
  // > 0: the target prefix is a soft bias instead of forced (CTranslate2 prefix_bias_beta):
  // while a row has followed the prefix, its next-token distribution is
  // (1 - beta) * p + beta * onehot(prefix[step]).
  double prefix_bias_beta = 0;
  // After the target prefix, expand the num_hypotheses most likely tokens and complete each
  // with the decoder's own search (CTranslate2 return_alternatives); expansions less likely
  // than min_alternative_expansion_prob are dropped.
  bool return_alternatives = false;
  double min_alternative_expansion_prob = 0;
};

// Reads the options declared by decoder_param_specs(). Throws ConfigError for values that
// the declared ranges cannot express (a non-positive repetition penalty, min > max, a bias
// with return_alternatives).
DecodingOptions parse_decoding_options(const Params& params);

// ConfigError when a decoder's token ids (end_tokens, suppress_sequences) fall outside a model
// vocabulary of `vocab_size` ids. `decoder_params` are a decoder section's values; options a
// plugin does not declare are not checked. Tasks call it once, before any record.
void check_decoder_tokens(const Params& decoder_params, std::int32_t vocab_size);

// The parameter list of a decoder plugin: the shared options followed by the plugin's own.
// The strings are owned by libmasque (static storage), so the result may back a descriptor.
std::vector<ParamSpec> decoder_param_specs(std::initializer_list<ParamSpec> own);

namespace decoding {

// What one record asks for, resolved once per decode() call.
struct RecordPlan {
  std::span<const TokenId> context;  // the prompt (repetition penalty, n-gram blocking)
  std::span<const TokenId> prefix;   // forced first tokens (empty when biased)
  std::span<const TokenId> biased;   // the prefix as a soft bias (prefix_bias_beta > 0)
  std::int32_t limit = 0;            // steps allowed; 0 = nothing to decode
};

// One plan per record. With a fixed_length() stepper the limit is max_steps(record) (which
// must be set); otherwise min(max_new_tokens, max_steps(record) when not -1).
std::vector<RecordPlan> plan_records(const Stepper& stepper, const DecodingOptions& options);
// The plan of one record (one admitted by continuous batching). Its spans point into the
// stepper's record, which must stay where it is (a moved std::vector keeps its buffer).
RecordPlan plan_record(const Stepper& stepper, const DecodingOptions& options, std::int32_t record);

// Capacity to reserve for a hypothesis that may take `limit` tokens, capped so that a huge
// max_new_tokens does not allocate up front (vectors grow past it as usual).
std::size_t tokens_to_reserve(std::int32_t limit);

// RuntimeError unless a step's logits are [rows, vocab] f32: what a Stepper must return.
void check_step_logits(const Tensor& logits, std::size_t rows, std::int32_t vocab);

// The end tokens in effect: none for a fixed_length() stepper (end tokens have no meaning
// there), else options.end_tokens or the stepper's defaults. Throws ConfigError for ids
// outside the vocabulary.
std::vector<TokenId> resolve_end_tokens(const Stepper& stepper, const DecodingOptions& options);

inline bool is_end_token(std::span<const TokenId> end_tokens, TokenId token) {
  for (TokenId e : end_tokens)
    if (e == token) return true;
  return false;
}

// Applies the repetition penalty, min_new_tokens and no_repeat_ngram_size to logits rows.
// Keeps scratch state: use one instance per decode() call (not shared between threads).
class BOOST_SYMBOL_VISIBLE LogitsProcessor {
 public:
  LogitsProcessor(const DecodingOptions& options, std::vector<TokenId> end_tokens,
                  std::int32_t vocab_size);

  // `history` = the row's tokens so far (forced prefix and generated); its length is the
  // decoding step.
  void apply(std::span<float> logits, std::span<const TokenId> context,
             std::span<const TokenId> history);

 private:
  void penalize_repetitions(std::span<float> logits, std::span<const TokenId> context,
                            std::span<const TokenId> history);
  void penalize_once(std::span<float> logits, TokenId token);
  void block_end_tokens(std::span<float> logits) const;
  void suppress_sequences(std::span<float> logits, std::span<const TokenId> context,
                          std::span<const TokenId> history) const;
  void block_repeated_ngrams(std::span<float> logits, std::span<const TokenId> context,
                             std::span<const TokenId> history) const;

  double repetition_penalty_;
  std::int32_t min_new_tokens_;
  std::int32_t ngram_size_;
  std::vector<std::vector<TokenId>> suppressed_;
  std::vector<TokenId> end_tokens_;
  std::vector<std::uint32_t> seen_;  // per token: the stamp of the last row that penalized it
  std::uint32_t stamp_ = 0;
};

// Turns a row of processed logits into CTranslate2's biased log-probs:
// log((1 - beta) * softmax(row) + beta * onehot(token)).
void bias_towards(std::span<float> row, TokenId token, double beta);

// log(sum(exp(logits))), accumulated in double. -inf for an all -inf row.
double log_sum_exp(std::span<const float> logits);

// out[i] = exp((values[i] - max) / temperature) in double, for `max` >= every value and
// temperature > 0; `out` has at least values.size() entries. Vectorized: sampling weights
// of a whole vocabulary.
void exp_weights(std::span<const float> values, float max, double temperature,
                 std::span<double> out);

// The index of the largest value; the smallest index among exact ties.
std::int32_t argmax(std::span<const float> values);

// The k largest values' indices into `out`, best first (ties: smaller index first), without
// sorting the whole row. `out` is also scratch: keep it across calls to avoid allocations.
void top_k(std::span<const float> values, std::int32_t k, std::vector<std::int32_t>& out);

// sum / length^length_penalty; 0 for an empty hypothesis.
double normalized_score(double logprob_sum, std::size_t length, double length_penalty);

// Best first; ties keep their order. Keeps at most `keep` hypotheses.
void sort_hypotheses(std::vector<Hypothesis>& hypotheses, std::size_t keep);

// True when `rows` is 0, 1, ..., n-1 for the current row count n (select() is then a no-op).
bool is_identity(std::span<const std::int32_t> rows, std::size_t current_rows);

// Picks the next token of one sequence from its processed logits (greedy: argmax; sample: a
// draw from the sequence's own random stream).
class BOOST_SYMBOL_VISIBLE TokenChooser {
 public:
  virtual ~TokenChooser();
  // `sequence` = record * per_record + hypothesis index (stable while rows are dropped).
  virtual TokenId choose(std::span<const float> logits, std::int32_t sequence) = 0;
};

// Decodes `per_record` independent sequences per record, one token per step each, with the
// shared rules (forced prefix, end tokens, min/max length, penalties); finished rows are
// dropped from the stepper. Each record's hypotheses come back best first.
std::vector<DecodeResult> decode_independent(Stepper& stepper, const DecodingOptions& options,
                                             std::int32_t per_record, TokenChooser& chooser);

// CTranslate2's return_alternatives: each record's forced prefix is run, the num_hypotheses
// most likely next tokens are expanded (end tokens blocked, the logits processors applied;
// expansion stops at the first token whose probability is below
// min_alternative_expansion_prob), and each expansion is completed by `search` (the decoder's
// own search, one hypothesis per record) with max/min_new_tokens reduced by the prefix and the
// expansion. A hypothesis is prefix + expansion + completion; its logprobs start with the
// expansion's; its score is the expansion's log-prob plus the completion's score (as
// CTranslate2); the hypotheses come in expansion order. Needs Stepper::fork(). A record with
// no expansion returns its prefix, unfinished and scored 0.
using Search = std::function<std::vector<DecodeResult>(Stepper&, const DecodingOptions&)>;
std::vector<DecodeResult> decode_alternatives(Stepper& stepper, const DecodingOptions& options,
                                              std::int32_t num_hypotheses, const Search& search);

}  // namespace decoding
}  // namespace masque
