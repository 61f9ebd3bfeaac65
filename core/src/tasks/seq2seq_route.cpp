#include "tasks/seq2seq_route.hpp"

#include "masque/error.hpp"

namespace masque {

Seq2SeqRoute::~Seq2SeqRoute() = default;

namespace {

std::vector<SequenceSpec> source_specs(std::span<Item* const> items, bool segments) {
  std::vector<SequenceSpec> specs(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    specs[i].ids = items[i]->tokens;
    specs[i].record_id = items[i]->record.id;
    if (segments) {
      specs[i].segments.assign(items[i]->tokens.size(), 0);
      specs[i].token_types.assign(items[i]->tokens.size(), 0);
    }
  }
  return specs;
}

// From prefill attention [heads, B, T, T], the query rows `flat_rows` (b * T + t, one per b):
// [heads, B, 1, T].
Tensor last_source_rows(const Tensor& probs, std::span<const std::int32_t> flat_rows,
                        std::int32_t length) {
  const std::int64_t heads = probs.dim(0), batch = probs.dim(1);
  Tensor out({heads, batch, 1, length});
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t b = 0; b < batch; ++b) {
      const float* from = probs.f32() + (h * batch * length + flat_rows[b]) * length;
      std::copy(from, from + length, out.f32() + (h * batch + b) * length);
    }
  return out;
}

// One model under the pipeline's mask; the source is segment 0, the target segment 1.
class UnilmRoute final : public Seq2SeqRoute {
 public:
  explicit UnilmRoute(const Plugins& plugins)
      : model_(*plugins.model), mask_(*plugins.mask), tokenizer_(plugins.tokenizer.get()) {
    static constexpr ModelKind kKinds[] = {ModelKind::encoder_only};
    require_model_kind(model_, kKinds, "seq2seq with a `mask` section (one model, UniLM)",
                       "leave the mask section out for an encoder-decoder model");
    if (!mask_.supports_incremental())
      throw ConfigError(
          "seq2seq decodes incrementally, which the mask strategy does not allow "
          "(use the seq2seq mask: mask: {plugin: seq2seq})");
    if (!tokenizer_) throw ConfigError("seq2seq with one model (UniLM) needs a tokenizer");
  }

  std::size_t positions(const Item& item, std::size_t prefix) const override {
    return item.tokens.size() + prefix + 1;
  }
  bool trivially_empty(const Item&) const override { return false; }  // [CLS] [SEP] at least

  bool cross_attention() const override { return false; }

  std::unique_ptr<ModelStepper> start(std::span<Item* const> items,
                                      std::vector<StepperRecord> records,
                                      const AttentionRecording* record) const override {
    const ModelInfo& info = model_.info();
    for (std::size_t i = 0; i < items.size(); ++i) {
      // Repetition penalties see the source: it shares the target's vocabulary.
      records[i].context = items[i]->tokens;
      if (info.max_positions > 0)
        records[i].max_steps =
            info.max_positions - static_cast<std::int32_t>(items[i]->tokens.size());
    }
    BuiltBatch built = build_batch(source_specs(items, true), mask_, info.pad, -1);
    for (std::size_t i = 0; i < items.size(); ++i)
      built.batch.output_rows.push_back(
          static_cast<std::int32_t>(i * built.batch.length + items[i]->tokens.size() - 1));
    Tensor logits;
    built.batch.record_attention = record;
    auto state = model_.start(built.batch, &logits);
    // The first target token is predicted at [SEP]: its prefill row is the first attention.
    Tensor first =
        record ? last_source_rows(*record->probs, built.batch.output_rows, built.batch.length)
               : Tensor();
    return std::make_unique<ModelStepper>(model_, std::move(state), std::move(logits),
                                          std::move(records), end_tokens(), -1, 1, record,
                                          std::move(first));
  }

  std::unique_ptr<ModelStepper> start_empty() const override {
    return std::make_unique<ModelStepper>(model_, nullptr, Tensor(), std::vector<StepperRecord>{},
                                          end_tokens(), -1, 1);
  }

  std::vector<TokenId> end_tokens() const override {
    const TokenId sep = tokenizer_->special_tokens().sep;
    return sep >= 0 ? std::vector<TokenId>{sep} : std::vector<TokenId>{};
  }

 private:
  const Model& model_;
  const MaskStrategy& mask_;
  const Tokenizer* tokenizer_;
};

// An encoder-decoder model: every source token sees every source token; pads are never keys.
class EncoderDecoderRoute final : public Seq2SeqRoute {
 public:
  explicit EncoderDecoderRoute(const Plugins& plugins)
      : model_(*plugins.model),
        visible_(plugins.held_mask("bidirectional")),
        target_tokenizer_(plugins.target_tokenizer ? plugins.target_tokenizer.get()
                                                   : plugins.tokenizer.get()) {
    static constexpr ModelKind kKinds[] = {ModelKind::encoder_decoder};
    require_model_kind(model_, kKinds, "seq2seq without a `mask` section",
                       "for one BERT-like model under the UniLM mask add mask: {plugin: seq2seq}");
  }

  std::size_t positions(const Item& item, std::size_t) const override { return item.tokens.size(); }
  // As CTranslate2: an empty source gives an empty hypothesis without running the model.
  bool trivially_empty(const Item& item) const override { return item.tokens.empty(); }

  bool cross_attention() const override { return true; }

  std::unique_ptr<ModelStepper> start(std::span<Item* const> items,
                                      std::vector<StepperRecord> records,
                                      const AttentionRecording* record) const override {
    const ModelInfo& info = model_.info();
    const TokenId start = info.decoder_start >= 0 ? info.decoder_start : info.bos;
    if (start < 0)
      throw ConfigError(
          "the model has no decoder start token (decoder_start_token_id in config.json)");
    BuiltBatch built = build_batch(source_specs(items, false), visible_, info.pad, -1);
    auto state = model_.start(built.batch, nullptr);
    return std::make_unique<ModelStepper>(model_, std::move(state), Tensor(), std::move(records),
                                          end_tokens(), start, -1, record);
  }

  std::unique_ptr<ModelStepper> start_empty() const override {
    return std::make_unique<ModelStepper>(model_, nullptr, Tensor(), std::vector<StepperRecord>{},
                                          end_tokens());
  }

  std::vector<TokenId> end_tokens() const override {
    if (const auto ends = model_.info().end_tokens(); !ends.empty()) return ends;
    if (target_tokenizer_ && target_tokenizer_->special_tokens().eos >= 0)
      return {target_tokenizer_->special_tokens().eos};
    return {};
  }

 private:
  const Model& model_;
  const MaskStrategy& visible_;
  const Tokenizer* target_tokenizer_;
};

}  // namespace

std::unique_ptr<Seq2SeqRoute> choose_seq2seq_route(const Plugins& plugins) {
  if (plugins.mask) return std::make_unique<UnilmRoute>(plugins);
  return std::make_unique<EncoderDecoderRoute>(plugins);
}

}  // namespace masque
