// Pieces shared by the model tasks: record tokens, padded batches under a mask strategy,
// and a Stepper that drives a model for the decoder plugins.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "masque/decoder.hpp"
#include "masque/mask.hpp"
#include "masque/model.hpp"
#include "masque/ops.hpp"
#include "masque/tokenizer.hpp"
#include "tasks/stop_strings.hpp"
#include "tasks/task.hpp"

namespace masque {

// The record's tokens: its `ids` when given (checked against the model's vocabulary), else the
// tokenizer's encoding of its text (with the special tokens the model expects when
// add_special). Also fills item.type_ids. RecordError when neither is possible.
void tokenize_item(Item& item, const Tokenizer* tokenizer, const Model* model, bool add_special);

// Fails the record when it has more tokens than allowed (the task's max_record_tokens, or the
// model's maximum positions when that is 0).
void check_length(const Item& item, std::size_t tokens, const Params& task_params,
                  const Model& model);

// An optional integer array field of a JSON-lines record ("order", "segments", ...).
std::optional<std::vector<std::int32_t>> int_array_field(const Record& record, const char* name);
// The record's `order` field (a factorization order), or empty when it has none; an empty array
// is an error rather than the mask's own order, which it would silently become.
std::vector<std::int32_t> order_field(const Record& record);

// The task parameter `mask_token_id` (-1 = the tokenizer's [MASK]) and its value: the id of the
// [MASK] / query token, or -1 when there is none. `require_mask_token` makes that a ConfigError.
ParamSpec mask_token_param();
TokenId mask_token(const Params& task_params, const Tokenizer* tokenizer);
TokenId require_mask_token(const Params& task_params, const Tokenizer* tokenizer, const char* task);

// One sequence of a batch as a task sees it.
struct SequenceSpec {
  std::vector<TokenId> ids;               // content tokens
  std::vector<std::int32_t> token_types;  // per content token, or empty
  std::vector<std::int32_t> segments;     // for the mask strategy, or empty
  std::vector<std::int32_t> order;        // explicit factorization order, or empty
  std::uint64_t record_id = 0;
};

// A padded batch under `mask`. Query tokens the strategy appends get `query_token` (e.g.
// [MASK]) with the position they predict. masks[b] is what the strategy returned for row b.
struct BuiltBatch {
  Batch batch;
  std::vector<SequenceMask> masks;
};
BuiltBatch build_batch(std::span<const SequenceSpec> sequences, const MaskStrategy& mask,
                       TokenId pad_token, TokenId query_token);
// The same from masks a strategy built with a request of the task's own (context flags, the
// query stream): masks[b].query_positions are absolute positions.
BuiltBatch assemble_batch(std::span<const SequenceSpec> sequences, std::vector<SequenceMask> masks,
                          TokenId pad_token, TokenId query_token);

// The tasks' one home for rows of [rows, width] tensors (logits, hidden states).
std::span<const float> tensor_row(const Tensor& tensor, std::size_t row);
// Row `row` of `from` into row `to_row` of `to` (same width, `to` large enough).
void copy_row(const Tensor& from, std::size_t row, Tensor& to, std::size_t to_row);
// Gathering whole rows is the numerics' gather_rows (masque/ops.hpp).

// log p(id) under a logits row: logits[id] - log-sum-exp (decoding::log_sum_exp, in double).
// RecordError for an id outside the row.
double token_logprob(std::span<const float> logits, TokenId id);

// Decodes ids to text with the tokenizer, or joins ids with spaces when there is none.
std::string detokenize(const Tokenizer* tokenizer, std::span<const TokenId> ids);

// Drives a Model for a decoder plugin: rows start as one per record.
struct StepperRecord {
  std::uint64_t id = 0;
  std::vector<TokenId> context;  // prompt / source, for repetition penalties
  std::vector<TokenId> prefix;   // forced target prefix
  std::int32_t max_steps = -1;
  // Ids the record may produce (a vocabulary map), allowed[id] != 0; empty: all.
  std::vector<std::uint8_t> allowed;
  // Where the record's hypotheses end (a task's stop strings, or its input's own); or null.
  std::shared_ptr<const StopStrings> stops;
  // What its outputs must match (the pipeline's constraint): the stepper masks each row's
  // logits to the tokens it allows; or null.
  std::shared_ptr<const TokenConstraint> constraint;
};

// Continuous batching: records a task starts when the decoder has room for them.
struct AdmittedRecords {
  std::unique_ptr<DecodeState> state;  // one row per record (model.start() on their batch)
  Tensor logits;                       // [records, vocab_size]: each row's next-token logits
  std::vector<StepperRecord> records;
};

struct Admission {
  std::int32_t max_rows = 0;  // rows in use at most (run.max_batch_size)
  // Starts up to `max_records` (>= 1) of the records the task holds back, in their order;
  // none left: no record.
  std::function<AdmittedRecords(std::int32_t max_records)> next;
};

// Continuous batching's limits from the run section (run.batching, max_batch_size,
// max_batch_tokens); off with run.batching: static, without a run section, or with a decoder
// that cannot admit records as it goes (return_alternatives).
struct ContinuousLimits {
  bool enabled = false;
  std::int32_t max_rows = 0;
  std::size_t max_tokens = 0;
  // How many of `items` (in order) one admission takes: at most `room` and, past the first,
  // as many as fit max_tokens padded to the longest (item.cost).
  std::size_t admissible(std::span<Item* const> items, std::int32_t room) const;
};
ContinuousLimits continuous_limits(const Params& run_params, const Decoder& decoder);
// The same for a task that decodes without a decoder plugin (diffusion-generate).
ContinuousLimits continuous_limits(const Params& run_params);

// Continuous batching's source of records: it starts them a static batch at a time (the
// encoder and the prompts' prefill run at full width: up to max_batch_size records within
// max_batch_tokens) and hands them out in input order as rows free up, a few at a time.
class AdmissionQueue {
 public:
  using Start = std::function<AdmittedRecords(std::span<Item* const>)>;
  AdmissionQueue(std::span<Item* const> items, const ContinuousLimits& limits, Start start);
  // Admission::next: up to `room` (>= 1) records; none left: none.
  AdmittedRecords next(std::int32_t room);
  // Records handed out so far.
  std::size_t admitted() const { return admitted_; }

 private:
  std::span<Item* const> items_;
  ContinuousLimits limits_;
  Start start_;
  std::size_t started_ = 0, admitted_ = 0;
  // Started records not handed out yet, last record in row 0: the next ones leave from the end,
  // where the state keeps its other rows without copying them.
  AdmittedRecords started_batch_;
  std::int32_t left_ = 0;  // rows of started_batch_ still waiting
};

class ModelStepper;

// Continuous batching of `items`: `stepper` (holding no record yet) admits them from an
// AdmissionQueue over `start` while `decoder` decodes; the results come in the items' order.
std::vector<DecodeResult> decode_continuously(const Decoder& decoder, ModelStepper& stepper,
                                              std::span<Item* const> items,
                                              const ContinuousLimits& limits,
                                              AdmissionQueue::Start start);

// How full a task's decoding batches were: the model steps and the rows they advanced (a
// generating task's summary). Rows per step well below max_batch_size mean batches that ran
// mostly empty; continuous batching keeps them nearer full.
class StepTally {
 public:
  void add(std::size_t rows) {
    steps_.fetch_add(1, std::memory_order_relaxed);
    rows_.fetch_add(rows, std::memory_order_relaxed);
  }
  // {"decoding_steps", "decoded_rows", "rows_per_step"}
  nlohmann::ordered_json summary() const;
  // The additive part of summary(), and its merge (Task::summary_state).
  nlohmann::ordered_json state() const;
  void merge(const nlohmann::ordered_json& state);

 private:
  std::atomic<std::uint64_t> steps_{0}, rows_{0};
};

class ModelStepper final : public Stepper {
 public:
  // `state` comes from model.start(); `logits` holds the logits of each row's last prompt token
  // (decoder-only and UniLM). For encoder-decoder models `start_token` >= 0 is fed first.
  // `record` (optional, outliving the stepper): every model step records that attention, and
  // `attention` holds what produced the current logits, [heads, rows, 1, keys] (for
  // decoder-only and UniLM models: the prompt's last token's, taken from the prefill).
  ModelStepper(const Model& model, std::unique_ptr<DecodeState> state, Tensor logits,
               std::vector<StepperRecord> records, std::vector<TokenId> end_tokens,
               TokenId start_token = -1, std::int32_t step_token_type = -1,
               const AttentionRecording* record = nullptr, Tensor attention = Tensor());

  std::int32_t num_records() const override { return static_cast<std::int32_t>(records_.size()); }
  std::int32_t vocab_size() const override { return model_.info().vocab_size; }
  std::uint64_t record_id(std::int32_t record) const override { return records_[record].id; }
  std::span<const TokenId> context(std::int32_t record) const override {
    return records_[record].context;
  }
  std::span<const TokenId> forced_prefix(std::int32_t record) const override {
    return records_[record].prefix;
  }
  std::int32_t max_steps(std::int32_t record) const override { return records_[record].max_steps; }
  std::vector<TokenId> default_end_tokens() const override { return end_tokens_; }

  // The rows' logits, the ids their records may not produce set to the lowest float.
  void logits(Tensor& out) override;
  void advance(std::span<const TokenId> tokens) override;
  void select(std::span<const std::int32_t> rows) override;
  std::unique_ptr<Stepper> fork() const override;
  // Continuous batching: admit() takes records from `admission` (a stepper without one admits
  // none). The stepper may then start with no record and no state (null). Not with attention
  // recording.
  void set_admission(Admission admission) { admission_ = std::move(admission); }
  // Every model step from now on, and its forks', is counted in `tally` (outliving them).
  void count_steps(StepTally* tally) { tally_ = tally; }
  // The record's StepperRecord::stops.
  bool stops(std::int32_t record, std::span<const TokenId> tokens) const override;
  // A model whose state cannot take rows (DecodeState::can_append) gets new records only once
  // every row is finished: static batches of max_batch_size rows.
  std::int32_t admit(std::int32_t rows_per_record, bool keep_rows) override;
  // The state, logits and records of a stepper no decoder has run yet (a route's start() for
  // continuous batching, whose stepper then admits them).
  AdmittedRecords release() &&;
  // The recorded attention behind the current logits (see the constructor); empty without one.
  const Tensor& attention() const { return attention_; }

 private:
  void step(std::span<const TokenId> tokens);  // feeds the model, nothing else
  const Model& model_;
  std::unique_ptr<DecodeState> state_;
  Tensor logits_;
  Tensor spare_;  // the other logits buffer for select()
  std::vector<StepperRecord> records_;
  std::vector<TokenId> end_tokens_;
  std::int32_t step_token_type_;
  std::vector<std::int32_t> types_;
  std::vector<std::int32_t> row_records_;           // the record of each row
  std::vector<TokenConstraint::State> row_states_;  // each row's constraint state (if any)
  bool restricted_ = false;                         // some record has an `allowed` set
  bool forked_ = false;                             // made by fork(): not streamed
  const AttentionRecording* record_ = nullptr;
  Tensor attention_;  // [heads, rows, 1, keys]: record_->probs of the last step
  Admission admission_;
  StepTally* tally_ = nullptr;
};

// JSON for a decoded hypothesis list (shared by lm-generate and seq2seq). With `stops`, each
// text ends before its first stop string ("tokens" keep every generated id).
void add_hypotheses(Result& result, const DecodeResult& decoded, const Tokenizer* tokenizer,
                    bool with_logprobs, const StopStrings* stops = nullptr);
// A hypothesis's output text: its tokens decoded, cut before a stop string.
std::string hypothesis_text(const Hypothesis& h, const Tokenizer* tokenizer,
                            const StopStrings* stops);

// The pipeline's constraint bound to the task's tokenizer, or null without one. Its end tokens
// are the decoder's `end_tokens`, else `default_end_tokens`. ConfigError without a tokenizer.
std::shared_ptr<const TokenConstraint> bind_constraint(const Plugins& plugins,
                                                       const Tokenizer* tokenizer,
                                                       const Params& decoder_params,
                                                       std::vector<TokenId> default_end_tokens);
// The hypotheses whose text satisfies `constraint` (all of them without one), best first;
// RecordError saying why when none does, so a record never gets an invalid answer.
DecodeResult valid_hypotheses(const DecodeResult& decoded, const Tokenizer* tokenizer,
                              const StopStrings* stops, const TokenConstraint* constraint);

}  // namespace masque
