// Task `seq2seq`: source in, target out, with any decoder plugin. How the model runs (one
// BERT-like model under the UniLM mask, or an encoder-decoder) is the route's business
// (tasks/seq2seq_route.hpp). A target prefix (a `prefix` field in JSON lines or TSV records)
// is forced first.
#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "run/stream.hpp"
#include "tasks/seq2seq_input.hpp"
#include "tasks/seq2seq_route.hpp"
#include "tasks/source_attention.hpp"
#include "tasks/vocabulary_map.hpp"

namespace masque {

namespace {

struct Seq2SeqInput {
  std::vector<TokenId> prefix;
  std::string note;  // source truncation
  // The source tokens before any truncation (attention columns; replace_unknowns' pieces).
  std::vector<TokenId> source;
  std::shared_ptr<const StopStrings> stops;  // the record's "stop", else task.stop; or null
};

// The pieces `replace_unknowns` substitutes come from the source tokenizer (ids without one).
std::string source_piece(const Tokenizer* tokenizer, TokenId id) {
  return tokenizer ? tokenizer->id_to_piece(id) : std::to_string(id);
}

class Seq2SeqTask final : public Task {
 public:
  Seq2SeqTask(const Pipeline& pipeline, const Plugins& plugins)
      : params_(pipeline.task_params),
        model_(*plugins.model),
        source_tokenizer_(plugins.tokenizer.get()),
        target_tokenizer_(plugins.target_tokenizer ? plugins.target_tokenizer.get()
                                                   : plugins.tokenizer.get()),
        route_(choose_seq2seq_route(plugins)),
        decoder_(*plugins.decoder),
        token_logprobs_(params_.get_bool("token_logprobs")),
        prefix_field_(params_.get_string("prefix_field")),
        return_attention_(params_.get_bool("return_attention")),
        replace_unknowns_(params_.get_bool("replace_unknowns")),
        limits_(continuous_limits(pipeline.run_params, decoder_)),
        stops_(task_stop_strings(target_tokenizer_, params_.get_string_list("stop"), "task.stop")),
        constraint_(bind_constraint(plugins, target_tokenizer_, pipeline.at("decoder").params,
                                    route_->end_tokens())) {
    check_decoder_tokens(pipeline.at("decoder").params, model_.info().vocab_size);
    if (constraint_ && (replace_unknowns_ || return_attention_))
      throw ConfigError(
          "a constraint with task.replace_unknowns or task.return_attention: not supported "
          "(replacing unknown tokens after decoding could break the grammar)");
    // Attention is read by teacher forcing whole batches after decoding: static batches.
    if (return_attention_ || replace_unknowns_) limits_.enabled = false;
    if (return_attention_ || replace_unknowns_) check_attention_options();
    const std::string& vmap = params_.get_string("vmap");
    if (!vmap.empty()) {
      if (!target_tokenizer_ || !source_tokenizer_)
        throw ConfigError("vmap: a vocabulary map needs the source and target tokenizers");
      vmap_ = std::make_unique<VocabularyMap>(vmap, *target_tokenizer_, model_.info());
    }
    if (StreamSink* stream = StreamSink::active())
      stream->set_detokenize(
          [t = target_tokenizer_](std::span<const TokenId> ids) { return detokenize(t, ids); });
  }

  void prepare(Item& item) const override {
    tokenize_item(item, source_tokenizer_, &model_, true);
    auto input = std::make_shared<Seq2SeqInput>();
    if (return_attention_ || replace_unknowns_) input->source = item.tokens;
    input->note = truncate_source(item, params_, source_tokenizer_);
    input->prefix =
        target_field(item.record, prefix_field_, target_tokenizer_, model_.info().vocab_size);
    check_length(item, route_->positions(item, input->prefix.size()), params_, model_);
    input->stops = record_stop_strings(item.record, target_tokenizer_);
    if (!input->stops) input->stops = stops_;
    item.cost = item.tokens.size();
    item.data = input;
  }

  std::vector<Result> process(std::span<Item* const> items) const override {
    std::vector<Result> results(items.size());
    std::vector<Item*> run;
    for (std::size_t i = 0; i < items.size(); ++i) {
      results[i].id = items[i]->record.id;
      results[i].object["id"] = results[i].id;
      const auto& note = static_cast<Seq2SeqInput*>(items[i]->data.get())->note;
      if (!note.empty()) results[i].object["note"] = note;
      if (route_->trivially_empty(*items[i])) {
        DecodeResult empty;
        empty.hypotheses.push_back({});
        if (!add_valid(results[i], empty, nullptr)) continue;
        if (return_attention_) add_attention(results[i], empty, {AttentionRows{}}, *items[i]);
      } else {
        run.push_back(items[i]);
      }
    }
    if (run.empty()) return results;
    std::vector<DecodeResult> decoded = decode(run);
    std::vector<std::vector<AttentionRows>> attention;
    if (return_attention_ || replace_unknowns_) attention = attend(run, decoded);
    for (std::size_t i = 0, k = 0; i < items.size(); ++i) {
      if (k < run.size() && items[i] == run[k]) {
        const auto& stops = static_cast<Seq2SeqInput*>(items[i]->data.get())->stops;
        if (add_valid(results[i], decoded[k], stops.get()) && !attention.empty())
          add_attention(results[i], decoded[k], attention[k], *items[i]);
        ++k;
      }
      results[i].tokens += items[i]->tokens.size();
    }
    return results;
  }

  std::vector<std::string> tsv_columns() const override { return {"text", "score"}; }
  bool batches_continuously() const override { return limits_.enabled; }

  nlohmann::ordered_json summary() const override { return steps_.summary(); }
  nlohmann::ordered_json summary_state() const override { return steps_.state(); }
  void merge_summary_state(const nlohmann::ordered_json& state) override { steps_.merge(state); }

 private:
  // The hypotheses that satisfy the constraint into `result`; false when none does (`result` is
  // then the record's error).
  // `stops`: the record's stop strings, which cut its texts (or null).
  bool add_valid(Result& result, const DecodeResult& decoded, const StopStrings* stops) const {
    try {
      add_hypotheses(result, valid_hypotheses(decoded, target_tokenizer_, stops, constraint_.get()),
                     target_tokenizer_, token_logprobs_, stops);
      return true;
    } catch (const RecordError& e) {
      result = error_result(result.id, e.what());
      return false;
    }
  }

  std::vector<StepperRecord> stepper_records(std::span<Item* const> items) const {
    std::vector<StepperRecord> records(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      records[i].id = items[i]->record.id;
      records[i].prefix = static_cast<Seq2SeqInput*>(items[i]->data.get())->prefix;
      if (records[i].prefix.empty() && model_.info().forced_bos >= 0)
        records[i].prefix = {model_.info().forced_bos};
      records[i].constraint = constraint_;
      records[i].stops = static_cast<Seq2SeqInput*>(items[i]->data.get())->stops;
      if (vmap_) records[i].allowed = vmap_->allowed(source_pieces(*items[i]), records[i].prefix);
    }
    return records;
  }

  std::vector<DecodeResult> decode(const std::vector<Item*>& items) const {
    if (limits_.enabled && items.size() > 1) return decode_continuously(items);
    std::unique_ptr<ModelStepper> stepper = route_->start(items, stepper_records(items));
    stepper->count_steps(&steps_);
    return decoder_.decode(*stepper);
  }

  // The decoder asks for records as rows free up (tasks/common.hpp ContinuousLimits).
  std::vector<DecodeResult> decode_continuously(std::span<Item* const> items) const {
    std::unique_ptr<ModelStepper> stepper = route_->start_empty();
    stepper->count_steps(&steps_);
    return masque::decode_continuously(
        decoder_, *stepper, items, limits_, [&](std::span<Item* const> batch) {
          return std::move(*route_->start(batch, stepper_records(batch))).release();
        });
  }

  // return_attention and replace_unknowns need a model that records attention, an existing
  // alignment layer and heads, and (replace_unknowns) a target <unk> to replace.
  void check_attention_options() {
    const ModelInfo& info = model_.info();
    const char* option = return_attention_ ? "return_attention" : "replace_unknowns";
    if (!info.records_attention)
      throw ConfigError(std::string(option) + ": the " + info.architecture +
                        " model cannot show its attention (only the Transformer models can)");
    std::int64_t layer = params_.get_int("alignment_layer");
    if (layer < -info.num_layers || layer >= info.num_layers)
      throw ConfigError("alignment_layer: " + std::to_string(layer) + " is not a layer of the " +
                        info.architecture + " model (" + std::to_string(info.num_layers) +
                        " layers: 0.." + std::to_string(info.num_layers - 1) +
                        ", or -1 for the last)");
    const std::int64_t heads = params_.get_int("alignment_heads");
    if (heads > info.num_heads)
      throw ConfigError("alignment_heads: " + std::to_string(heads) + " heads asked, the " +
                        info.architecture + " model has " + std::to_string(info.num_heads));
    recording_ = {.layer = static_cast<std::int32_t>(layer),
                  .cross = route_->cross_attention(),
                  .first_head = 0,
                  .heads = static_cast<std::int32_t>(heads)};
    if (replace_unknowns_) {
      unk_ = target_tokenizer_ ? target_tokenizer_->special_tokens().unk : -1;
      if (unk_ < 0)
        throw ConfigError("replace_unknowns: the target tokenizer has no unknown token (unk)");
    }
  }

  // Each hypothesis' attention rows, by teacher forcing the decoded tokens (source_attention.hpp).
  std::vector<std::vector<AttentionRows>> attend(const std::vector<Item*>& items,
                                                 const std::vector<DecodeResult>& decoded) const {
    std::vector<StepperRecord> records(items.size());
    std::vector<std::int32_t> record_of, length(items.size());
    std::vector<std::vector<TokenId>> targets;
    for (std::size_t i = 0; i < items.size(); ++i) {
      records[i].id = items[i]->record.id;
      length[i] = static_cast<std::int32_t>(items[i]->tokens.size());
      for (const Hypothesis& h : decoded[i].hypotheses) {
        record_of.push_back(static_cast<std::int32_t>(i));
        targets.push_back(h.tokens);
      }
    }
    Tensor probs;  // one per call: process() runs concurrently
    AttentionRecording recording = recording_;
    recording.probs = &probs;
    std::unique_ptr<ModelStepper> stepper = route_->start(items, std::move(records), &recording);
    std::vector<AttentionRows> flat = force_attention(*stepper, record_of, targets, length);
    std::vector<std::vector<AttentionRows>> out(items.size());
    for (std::size_t k = 0; k < flat.size(); ++k)
      out[static_cast<std::size_t>(record_of[k])].push_back(std::move(flat[k]));
    return out;
  }

  // Attention columns span the source as given: truncated tokens get 0 (CTranslate2). Then
  // replace_unknowns rewrites the texts, and return_attention adds the rows.
  void add_attention(Result& result, const DecodeResult& decoded,
                     std::vector<AttentionRows> attention, const Item& item) const {
    const auto& source = static_cast<Seq2SeqInput*>(item.data.get())->source;
    // A truncation that kept the final special token ([SEP]) moved it: its column goes back.
    const std::size_t used = item.tokens.size();
    const bool moved_last =
        used > 0 && used < source.size() && item.tokens[used - 1] != source[used - 1];
    for (AttentionRows& rows : attention)
      for (std::vector<float>& row : rows) {
        row.resize(source.size(), 0.0f);
        if (moved_last) std::swap(row[used - 1], row[source.size() - 1]);
      }
    const bool nbest = decoded.hypotheses.size() > 1;
    for (std::size_t h = 0; h < decoded.hypotheses.size(); ++h) {
      nlohmann::ordered_json& target = nbest ? result.object["hypotheses"][h] : result.object;
      if (replace_unknowns_) {
        std::string text = replaced_text(decoded.hypotheses[h].tokens, attention[h], source);
        if (h == 0) {
          result.text = text;
          result.object["text"] = text;
        }
        if (nbest) target["text"] = text;
        result.nbest[h].text = text;
      }
      if (return_attention_) target["attention"] = attention[h];
    }
  }

  // The hypothesis text with each <unk> replaced by the source token it attends to most
  // (CTranslate2 replace_unknowns): the runs between unknowns are decoded by the target
  // tokenizer and joined to the source pieces with single spaces (exact for the token-per-word
  // vocabularies CTranslate2's token output assumes).
  std::string replaced_text(const std::vector<TokenId>& tokens, const AttentionRows& attention,
                            const std::vector<TokenId>& source) const {
    std::vector<std::string> parts;
    std::vector<TokenId> run;
    auto flush = [&] {
      if (!run.empty()) parts.push_back(detokenize(target_tokenizer_, run));
      run.clear();
    };
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const std::int32_t at =
          tokens[t] == unk_ && t < attention.size() ? most_attended(attention[t]) : -1;
      if (at < 0) {
        run.push_back(tokens[t]);
        continue;
      }
      flush();
      parts.push_back(source_piece(source_tokenizer_, source[static_cast<std::size_t>(at)]));
    }
    flush();
    std::string text;
    for (const std::string& p : parts) {
      if (p.empty()) continue;
      if (!text.empty()) text += ' ';
      text += p;
    }
    return text;
  }

  std::vector<std::string> source_pieces(const Item& item) const {
    std::vector<std::string> pieces;
    for (TokenId t : item.tokens) pieces.push_back(source_tokenizer_->id_to_piece(t));
    return pieces;
  }

  const Params& params_;
  const Model& model_;
  const Tokenizer* source_tokenizer_;
  const Tokenizer* target_tokenizer_;
  std::unique_ptr<Seq2SeqRoute> route_;
  const Decoder& decoder_;
  bool token_logprobs_;
  std::string prefix_field_;
  bool return_attention_, replace_unknowns_;
  ContinuousLimits limits_;
  std::shared_ptr<const StopStrings> stops_;           // task.stop (null: none)
  std::shared_ptr<const TokenConstraint> constraint_;  // null: none
  AttentionRecording recording_;  // the alignment layer and heads, when attention is needed
  TokenId unk_ = -1;
  std::unique_ptr<VocabularyMap> vmap_;
  mutable StepTally steps_;  // process() runs concurrently: StepTally is atomic
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<Seq2SeqTask>(pipeline, plugins);
}

const TaskRegistration registration({
    .spec =
        {.name = "seq2seq",
         .description = "source in, target out with any decoder: an encoder-decoder model (no mask "
                        "section), or one BERT-like model under the pipeline's mask (mask: "
                        "seq2seq, UniLM): {id, text, tokens, score} (+ hypotheses for n-best)",
         .params = {{.name = "token_logprobs",
                     .type = ParamType::boolean,
                     .default_value = "false",
                     .help = "also output the log-probability of every generated token"},
                    {.name = "stop",
                     .type = ParamType::string_list,
                     .default_value = "[]",
                     .help = "stop strings: a hypothesis ends as soon as its decoded text holds "
                             "one (across token boundaries) and its text ends just before it; a "
                             "JSON record's own \"stop\" replaces it for that record; not with "
                             "--stream"},
                    {.name = "prefix_field",
                     .type = ParamType::string,
                     .default_value = "prefix",
                     .help = "JSON-lines / TSV field holding a target prefix (text, or an array of "
                             "ids) to force before decoding freely"},
                    max_input_length_param(),
                    {.name = "return_attention",
                     .type = ParamType::boolean,
                     .default_value = "false",
                     .help = "add `attention` to each hypothesis: per output token (the forced "
                             "prefix included, the end token only with return_end_token) the "
                             "attention over the source tokens of the query that predicted it, "
                             "averaged over the alignment heads (CTranslate2 return_attention). "
                             "Encoder-decoder: cross-attention; UniLM: self-attention to the "
                             "source segment ([CLS] source [SEP]), whose row sums to less than 1 "
                             "(the rest is on the target so far). Truncated source tokens get 0"},
                    {.name = "replace_unknowns",
                     .type = ParamType::boolean,
                     .default_value = "false",
                     .help = "replace each generated unknown token (the target tokenizer's unk) "
                             "in the text by the source token it attends to most (CTranslate2 "
                             "replace_unknowns); the ids in `tokens` are kept"},
                    {.name = "alignment_layer",
                     .type = ParamType::integer,
                     .default_value = "-1",
                     .help = "decoder layer whose attention return_attention / replace_unknowns "
                             "use; negative counts from the end (CTranslate2's converter option "
                             "alignment_layer, default -1: the last)",
                     .min = -1000,
                     .max = 1000},
                    {.name = "alignment_heads",
                     .type = ParamType::integer,
                     .default_value = "1",
                     .help = "how many of the layer's first heads are averaged; 0 = all "
                             "(CTranslate2's converter option alignment_heads, default 1: the "
                             "first head only)",
                     .min = 0,
                     .max = 10000},
                    {.name = "vmap",
                     .type = ParamType::path,
                     .default_value = "",
                     .help = "a vocabulary map restricting each record's output vocabulary "
                             "(CTranslate2 use_vmap with the model's vmap.txt): lines '<source "
                             "n-gram> TAB <target tokens>', an empty n-gram for tokens always "
                             "allowed; special tokens and the record's prefix stay allowed. "
                             "Restricts per record (CTranslate2: per batch). Empty: off"}},
         .required_sections = {"model", "decoder"},
         .optional_sections = {"tokenizer", "target_tokenizer", "mask", "constraint"},
         .default_plugins = {},
         .model_kinds = {ModelKind::encoder_decoder, ModelKind::encoder_only},
         .held_masks = {"bidirectional"}},
    .create = create,
});

}  // namespace

}  // namespace masque
