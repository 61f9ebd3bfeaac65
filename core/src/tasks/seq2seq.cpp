// Task `seq2seq`: source in, target out, with any decoder plugin. How the model runs (one
// BERT-like model under the UniLM mask, or an encoder-decoder) is the route's business
// (tasks/seq2seq_route.hpp). A target prefix (a `prefix` field in JSON lines or TSV records)
// is forced first.
#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "run/stream.hpp"
#include "tasks/seq2seq_input.hpp"
#include "tasks/seq2seq_route.hpp"
#include "tasks/vocabulary_map.hpp"

namespace masque {

namespace {

struct Seq2SeqInput {
  std::vector<TokenId> prefix;
  std::string note;  // source truncation
};

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
        prefix_field_(params_.get_string("prefix_field")) {
    check_decoder_tokens(pipeline.at("decoder").params, model_.info().vocab_size);
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
    input->note = truncate_source(item, params_, source_tokenizer_);
    input->prefix =
        target_field(item.record, prefix_field_, target_tokenizer_, model_.info().vocab_size);
    check_length(item, route_->positions(item, input->prefix.size()), params_, model_);
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
        add_hypotheses(results[i], empty, target_tokenizer_, token_logprobs_);
      } else {
        run.push_back(items[i]);
      }
    }
    if (run.empty()) return results;
    std::vector<DecodeResult> decoded = decode(run);
    for (std::size_t i = 0, k = 0; i < items.size(); ++i) {
      if (k < run.size() && items[i] == run[k]) {
        add_hypotheses(results[i], decoded[k], target_tokenizer_, token_logprobs_);
        ++k;
      }
      results[i].tokens += items[i]->tokens.size();
    }
    return results;
  }

  std::vector<std::string> tsv_columns() const override { return {"text", "score"}; }

 private:
  std::vector<DecodeResult> decode(const std::vector<Item*>& items) const {
    std::vector<StepperRecord> records(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      records[i].id = items[i]->record.id;
      records[i].prefix = static_cast<Seq2SeqInput*>(items[i]->data.get())->prefix;
      if (vmap_) records[i].allowed = vmap_->allowed(source_pieces(*items[i]), records[i].prefix);
    }
    std::unique_ptr<Stepper> stepper = route_->start(items, std::move(records));
    return decoder_.decode(*stepper);
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
  std::unique_ptr<VocabularyMap> vmap_;
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
                    {.name = "prefix_field",
                     .type = ParamType::string,
                     .default_value = "prefix",
                     .help = "JSON-lines / TSV field holding a target prefix (text, or an array of "
                             "ids) to force before decoding freely"},
                    max_input_length_param(),
                    {.name = "vmap",
                     .type = ParamType::path,
                     .default_value = "",
                     .help = "a vocabulary map restricting each record's output vocabulary "
                             "(CTranslate2 use_vmap with the model's vmap.txt): lines '<source "
                             "n-gram> TAB <target tokens>', an empty n-gram for tokens always "
                             "allowed; special tokens and the record's prefix stay allowed. "
                             "Restricts per record (CTranslate2: per batch). Empty: off"}},
         .required_sections = {"model", "decoder"},
         .optional_sections = {"tokenizer", "target_tokenizer", "mask"},
         .default_plugins = {{"decoder", "greedy"}},
         .model_kinds = {ModelKind::encoder_decoder, ModelKind::encoder_only},
         .held_masks = {"bidirectional"}},
    .create = create,
});

}  // namespace

}  // namespace masque
