// Task `lm-generate`: continue each record (an empty one starts from BOS) with a decoder.
#include <algorithm>

#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "run/stream.hpp"
#include "tasks/chat_prompt.hpp"
#include "tasks/common.hpp"

namespace masque {

namespace {

class LmGenerateTask final : public Task {
 public:
  LmGenerateTask(const Pipeline& pipeline, const Plugins& plugins)
      : params_(pipeline.task_params),
        model_(*plugins.model),
        tokenizer_(plugins.tokenizer.get()),
        mask_(*plugins.mask),
        decoder_(*plugins.decoder),
        token_logprobs_(params_.get_bool("token_logprobs")),
        stops_(task_stop_strings(tokenizer_, params_.get_string_list("stop"), "task.stop")),
        limits_(continuous_limits(pipeline.run_params, decoder_)),
        constraint_(
            bind_constraint(plugins, tokenizer_, pipeline.at("decoder").params, end_tokens())),
        chat_(ChatPrompt::from_pipeline(pipeline)) {
    if (chat_ && !tokenizer_)
      throw ConfigError(
          "task.chat: a chat template renders text, and this pipeline has no "
          "tokenizer to tokenize it");
    if (!mask_.supports_incremental())
      throw ConfigError("lm-generate decodes incrementally, which the mask strategy '" +
                        pipeline.at("mask").entry->key() + "' does not allow (use causal)");
    check_decoder_tokens(pipeline.at("decoder").params, model_.info().vocab_size);
    if (StreamSink* stream = StreamSink::active())
      stream->set_detokenize(
          [t = tokenizer_](std::span<const TokenId> ids) { return detokenize(t, ids); });
  }

  void prepare(Item& item) const override {
    if (chat_ && !item.record.ids) {
      // The template writes the conversation's special tokens (BOS included): none added.
      Encoding e = tokenizer_->encode(chat_->render(item.record), false);
      item.tokens = std::move(e.ids);
      item.type_ids.assign(item.tokens.size(), 0);
    } else {
      tokenize_item(item, tokenizer_, &model_, true);
    }
    if (item.tokens.empty()) {
      TokenId bos = tokenizer_ && tokenizer_->special_tokens().bos >= 0
                        ? tokenizer_->special_tokens().bos
                        : model_.info().bos;
      if (bos < 0)
        throw RecordError("empty prompt, and neither the tokenizer nor the model has a BOS token");
      item.tokens = {bos};
      item.type_ids = {0};
    }
    check_length(item, item.tokens.size(), params_, model_);
    item.cost = item.tokens.size();
    item.data = std::const_pointer_cast<StopStrings>(record_stop_strings(item.record, tokenizer_));
  }

  bool batches_continuously() const override { return limits_.enabled; }

  std::vector<Result> process(std::span<Item* const> items) const override {
    std::vector<DecodeResult> decoded;
    if (limits_.enabled && items.size() > 1) {
      decoded = decode_continuously(items);
    } else {
      AdmittedRecords started = start_records(items);
      ModelStepper stepper(model_, std::move(started.state), std::move(started.logits),
                           std::move(started.records), end_tokens());
      stepper.count_steps(&steps_);
      decoded = decoder_.decode(stepper);
    }
    if (decoded.size() != items.size())
      throw RuntimeError("the decoder returned " + std::to_string(decoded.size()) +
                         " results for " + std::to_string(items.size()) + " records");
    std::vector<Result> results;
    for (std::size_t i = 0; i < items.size(); ++i) {
      Result r;
      r.id = items[i]->record.id;
      r.object["id"] = r.id;
      const StopStrings* stops = stops_of(*items[i]).get();
      try {
        const DecodeResult valid =
            valid_hypotheses(decoded.at(i), tokenizer_, stops, constraint_.get());
        add_hypotheses(r, valid, tokenizer_, token_logprobs_, stops);
      } catch (const RecordError& e) {
        results.push_back(error_result(r.id, e.what()));
        continue;
      }
      r.tokens += items[i]->tokens.size();
      results.push_back(std::move(r));
    }
    return results;
  }

  std::vector<std::string> tsv_columns() const override { return {"text", "score"}; }

  nlohmann::ordered_json summary() const override { return steps_.summary(); }
  nlohmann::ordered_json summary_state() const override { return steps_.state(); }
  void merge_summary_state(const nlohmann::ordered_json& state) override { steps_.merge(state); }

 private:
  // The record's own stop strings, else the task's (null: none).
  std::shared_ptr<const StopStrings> stops_of(const Item& item) const {
    return item.data ? std::static_pointer_cast<const StopStrings>(item.data) : stops_;
  }

  // Prefills `items` (their prompts, right-padded) into a new decoding state.
  AdmittedRecords start_records(std::span<Item* const> items) const {
    std::vector<SequenceSpec> specs(items.size());
    AdmittedRecords out;
    out.records.resize(items.size());
    const std::int32_t max_positions = model_.info().max_positions;
    for (std::size_t i = 0; i < items.size(); ++i) {
      specs[i].ids = items[i]->tokens;
      specs[i].token_types = items[i]->type_ids;
      specs[i].record_id = items[i]->record.id;
      StepperRecord& record = out.records[i];
      record.id = items[i]->record.id;
      record.stops = stops_of(*items[i]);
      record.constraint = constraint_;
      record.context = items[i]->tokens;
      if (max_positions > 0)
        record.max_steps = max_positions - static_cast<std::int32_t>(items[i]->tokens.size());
    }
    BuiltBatch built = build_batch(specs, mask_, model_.info().pad, -1);
    for (std::size_t i = 0; i < items.size(); ++i)
      built.batch.output_rows.push_back(
          static_cast<std::int32_t>(i * built.batch.length + items[i]->tokens.size() - 1));
    out.state = model_.start(built.batch, &out.logits);
    return out;
  }

  // The decoder asks for records as rows free up; they come in the group's order, started a
  // static batch at a time (AdmissionQueue).
  std::vector<DecodeResult> decode_continuously(std::span<Item* const> items) const {
    ModelStepper stepper(model_, nullptr, Tensor(), {}, end_tokens());
    stepper.count_steps(&steps_);
    return masque::decode_continuously(
        decoder_, stepper, items, limits_,
        [&](std::span<Item* const> batch) { return start_records(batch); });
  }

  // The tokenizer's eos, and every id the model's config says ends a sequence.
  std::vector<TokenId> end_tokens() const {
    std::vector<TokenId> out;
    if (tokenizer_ && tokenizer_->special_tokens().eos >= 0)
      out.push_back(tokenizer_->special_tokens().eos);
    for (const TokenId id : model_.info().end_tokens())
      if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
    return out;
  }

  const Params& params_;
  const Model& model_;
  const Tokenizer* tokenizer_;
  const MaskStrategy& mask_;
  const Decoder& decoder_;
  bool token_logprobs_;
  std::shared_ptr<const StopStrings> stops_;  // task.stop (null: none)
  ContinuousLimits limits_;
  std::shared_ptr<const TokenConstraint> constraint_;  // null: none
  std::unique_ptr<ChatPrompt> chat_;                   // null: records are prompts as they are
  mutable StepTally steps_;  // process() runs concurrently: StepTally is atomic
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<LmGenerateTask>(pipeline, plugins);
}

const TaskRegistration registration({
    .spec = {.name = "lm-generate",
             .description = "continue each record with a decoder (an empty record starts from "
                            "BOS): {id, text, tokens, score} (+ hypotheses for n-best)",
             .params = {{.name = "token_logprobs",
                         .type = ParamType::boolean,
                         .default_value = "false",
                         .help = "also output the log-probability of every generated token"},
                        {.name = "stop",
                         .type = ParamType::string_list,
                         .default_value = "[]",
                         .help = "stop strings: a hypothesis ends as soon as its decoded text "
                                 "holds one (matched across token boundaries) and its text "
                                 "ends just before it (\"tokens\" keep the token that completed "
                                 "it); a JSON record's own \"stop\" (a string or a list) "
                                 "replaces it for that record; not with --stream"},
                        {.name = "chat",
                         .type = ParamType::boolean,
                         .default_value = "false",
                         .help = "render each record with the model's chat template (a JSON "
                                 "record's \"messages\" and \"tools\", or its text as one user "
                                 "message) and continue the rendered prompt, which is tokenized "
                                 "without adding specials (docs/instruct.md); --chat"},
                        {.name = "system",
                         .type = ParamType::string,
                         .default_value = "",
                         .help = "with chat: a system message put first where a record's "
                                 "conversation has none (a text record's, or its own "
                                 "\"messages\"); --system"},
                        {.name = "chat_template",
                         .type = ParamType::path,
                         .default_value = "",
                         .help = "with chat: the folder whose chat template renders the records "
                                 "(chat_template.jinja or tokenizer_config.json; default: the "
                                 "tokenizer's folder, else the model's)"}},
             .required_sections = {"model", "mask", "decoder"},
             .optional_sections = {"tokenizer", "constraint"},
             .default_plugins = {{"mask", "causal"}},
             .model_kinds = {ModelKind::decoder_only, ModelKind::encoder_only}},
    .create = create,
});

}  // namespace

}  // namespace masque
