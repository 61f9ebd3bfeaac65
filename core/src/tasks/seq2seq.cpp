// Task `seq2seq`: source in, target out, with any decoder plugin.
//  - encoder-decoder models: the encoder runs once per batch, the decoder starts from the
//    model's decoder start token;
//  - BERT-like (encoder-only) models under the `seq2seq` mask (UniLM): `[CLS] source [SEP]` is
//    segment 0, the target is generated as segment 1 until [SEP].
// A target prefix (a `prefix` field in JSON lines or TSV records) is forced first.
#include "masque/error.hpp"
#include "tasks/common.hpp"

namespace masque {

namespace {

struct Seq2SeqInput {
  std::vector<TokenId> prefix;
};

class Seq2SeqTask final : public Task {
 public:
  Seq2SeqTask(const Pipeline& pipeline, const Plugins& plugins)
      : params_(pipeline.task_params),
        model_(*plugins.model),
        source_tokenizer_(plugins.tokenizer.get()),
        target_tokenizer_(plugins.target_tokenizer ? plugins.target_tokenizer.get()
                                                   : plugins.tokenizer.get()),
        mask_(plugins.mask.get()),
        decoder_(*plugins.decoder),
        token_logprobs_(params_.get_bool("token_logprobs")),
        prefix_field_(params_.get_string("prefix_field")) {
    const ModelInfo& info = model_.info();
    if (info.kind == ModelKind::decoder_only)
      throw ConfigError(
          "seq2seq needs an encoder-decoder model, or a BERT-like model with the seq2seq mask");
    if (info.kind == ModelKind::encoder_only) {
      if (!mask_ || !mask_->supports_incremental())
        throw ConfigError(
            "seq2seq with an encoder-only model needs the `seq2seq` mask strategy (mask: {plugin: "
            "seq2seq})");
      if (!source_tokenizer_)
        throw ConfigError("seq2seq with an encoder-only model needs a tokenizer");
    }
  }

  void prepare(Item& item) const override {
    const bool unilm = model_.info().kind == ModelKind::encoder_only;
    tokenize_item(item, source_tokenizer_, &model_, true);
    auto input = std::make_shared<Seq2SeqInput>();
    auto it = item.record.fields.find(prefix_field_);
    if (it != item.record.fields.end() && it->is_string() && !it->get<std::string>().empty()) {
      if (!target_tokenizer_) throw RecordError("a target prefix needs a tokenizer");
      input->prefix = target_tokenizer_->encode(it->get<std::string>(), false).ids;
    } else if (it != item.record.fields.end() && it->is_array()) {
      const std::int64_t vocab = model_.info().vocab_size;
      for (const auto& v : *it) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= vocab)
          throw RecordError("'" + prefix_field_ + "' must be text or an array of ids in 0.." +
                            std::to_string(vocab - 1));
        input->prefix.push_back(v.get<TokenId>());
      }
    }
    std::size_t total = item.tokens.size() + (unilm ? input->prefix.size() + 1 : 0);
    check_length(item, total, params_, model_);
    item.cost = item.tokens.size();
    item.data = input;
  }

  std::vector<Result> process(std::span<Item* const> items) const override {
    std::vector<Result> results(items.size());
    std::vector<Item*> run;
    for (std::size_t i = 0; i < items.size(); ++i) {
      results[i].id = items[i]->record.id;
      results[i].object["id"] = results[i].id;
      if (is_empty_source(*items[i])) {
        // As CTranslate2: an empty source gives an empty hypothesis without running the model.
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
  bool is_empty_source(const Item& item) const {
    if (model_.info().kind == ModelKind::encoder_decoder) return item.tokens.empty();
    return false;  // UniLM always has [CLS] [SEP]
  }

  std::vector<DecodeResult> decode(const std::vector<Item*>& items) const {
    const ModelInfo& info = model_.info();
    const bool unilm = info.kind == ModelKind::encoder_only;
    std::vector<SequenceSpec> specs(items.size());
    std::vector<StepperRecord> records(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& prefix = static_cast<Seq2SeqInput*>(items[i]->data.get())->prefix;
      specs[i].ids = items[i]->tokens;
      specs[i].record_id = items[i]->record.id;
      specs[i].segments.assign(items[i]->tokens.size(), 0);
      specs[i].token_types.assign(items[i]->tokens.size(), 0);
      records[i].id = items[i]->record.id;
      // Repetition penalties look at earlier target tokens: the UniLM source shares their
      // vocabulary, an encoder-decoder's source does not.
      if (unilm) records[i].context = items[i]->tokens;
      records[i].prefix = prefix;
      if (unilm && info.max_positions > 0)
        records[i].max_steps =
            info.max_positions - static_cast<std::int32_t>(items[i]->tokens.size());
    }
    BuiltBatch built = unilm ? build_batch(specs, *mask_, info.pad, -1) : source_batch(specs);
    Tensor logits;
    std::unique_ptr<DecodeState> state;
    if (unilm) {
      for (std::size_t i = 0; i < items.size(); ++i)
        built.batch.output_rows.push_back(
            static_cast<std::int32_t>(i * built.batch.length + items[i]->tokens.size() - 1));
      state = model_.start(built.batch, &logits);
      ModelStepper stepper(model_, std::move(state), std::move(logits), std::move(records),
                           end_tokens(), -1, 1);
      return decoder_.decode(stepper);
    }
    state = model_.start(built.batch, nullptr);
    TokenId start = info.decoder_start >= 0 ? info.decoder_start : info.bos;
    if (start < 0)
      throw ConfigError(
          "the model has no decoder start token (decoder_start_token_id in config.json)");
    ModelStepper stepper(model_, std::move(state), Tensor(), std::move(records), end_tokens(),
                         start);
    return decoder_.decode(stepper);
  }

  // The encoder's input: every source token sees every source token; pads are never keys.
  BuiltBatch source_batch(const std::vector<SequenceSpec>& specs) const {
    BuiltBatch built;
    std::size_t longest = 0;
    for (const auto& s : specs) longest = std::max(longest, s.ids.size());
    Batch& b = built.batch;
    b.batch = static_cast<std::int32_t>(specs.size());
    b.length = static_cast<std::int32_t>(longest);
    b.ids.assign(specs.size() * longest, std::max<TokenId>(model_.info().pad, 0));
    b.positions.assign(specs.size() * longest, 0);
    b.attention.reset(b.batch, b.length);
    for (std::size_t r = 0; r < specs.size(); ++r) {
      SequenceMask m;
      m.rank.assign(specs[r].ids.size(), 0);
      m.role.assign(specs[r].ids.size(), TokenRole::content);
      for (std::size_t t = 0; t < specs[r].ids.size(); ++t) {
        b.ids[r * longest + t] = specs[r].ids[t];
        b.positions[r * longest + t] = static_cast<std::int32_t>(t);
      }
      b.attention.set_row(static_cast<std::int32_t>(r), m);
    }
    return built;
  }

  std::vector<TokenId> end_tokens() const {
    const ModelInfo& info = model_.info();
    if (info.kind == ModelKind::encoder_only) {
      if (source_tokenizer_->special_tokens().sep >= 0)
        return {source_tokenizer_->special_tokens().sep};
      return {};
    }
    if (info.eos >= 0) return {info.eos};
    if (target_tokenizer_ && target_tokenizer_->special_tokens().eos >= 0)
      return {target_tokenizer_->special_tokens().eos};
    return {};
  }

  const Params& params_;
  const Model& model_;
  const Tokenizer* source_tokenizer_;
  const Tokenizer* target_tokenizer_;
  const MaskStrategy* mask_;
  const Decoder& decoder_;
  bool token_logprobs_;
  std::string prefix_field_;
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<Seq2SeqTask>(pipeline, plugins);
}

const TaskRegistration registration({
    .spec =
        {.name = "seq2seq",
         .description = "source in, target out with any decoder: an encoder-decoder model, or a "
                        "BERT-like model under the seq2seq (UniLM) mask: {id, text, tokens, score} "
                        "(+ hypotheses for n-best)",
         .params = {{.name = "token_logprobs",
                     .type = ParamType::boolean,
                     .default_value = "false",
                     .help = "also output the log-probability of every generated token"},
                    {.name = "prefix_field",
                     .type = ParamType::string,
                     .default_value = "prefix",
                     .help = "JSON-lines / TSV field holding a target prefix (text, or an array of "
                             "ids) to force before decoding freely"}},
         .required_sections = {"model", "decoder"},
         .optional_sections = {"tokenizer", "target_tokenizer", "mask"},
         .default_plugins = {{"decoder", "greedy"}}},
    .create = create,
});

}  // namespace

}  // namespace masque
