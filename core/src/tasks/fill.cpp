// Task `fill`: predict every [MASK] of a record with a BERT-like model (bidirectional mask by
// default): the top-k tokens with log-probabilities per masked position, and the filled text.
#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "tasks/common.hpp"

namespace masque {

namespace {

class FillTask final : public Task {
 public:
  FillTask(const Pipeline& pipeline, const Plugins& plugins)
      : params_(pipeline.task_params),
        model_(*plugins.model),
        tokenizer_(plugins.tokenizer.get()),
        mask_(*plugins.mask),
        top_k_(static_cast<std::int32_t>(params_.get_int("top_k"))) {
    mask_token_ = require_mask_token(params_, tokenizer_, "fill");
  }

  void prepare(Item& item) const override {
    tokenize_item(item, tokenizer_, &model_, true);
    if (std::find(item.tokens.begin(), item.tokens.end(), mask_token_) == item.tokens.end())
      throw RecordError("no [MASK] token (id " + std::to_string(mask_token_) + ") in the record");
    check_length(item, item.tokens.size(), params_, model_);
    item.cost = item.tokens.size();
  }

  std::vector<Result> process(std::span<Item* const> items) const override {
    std::vector<SequenceSpec> specs(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      specs[i].ids = items[i]->tokens;
      specs[i].token_types = items[i]->type_ids;
      specs[i].segments = items[i]->type_ids;
      specs[i].record_id = items[i]->record.id;
    }
    BuiltBatch built = build_batch(specs, mask_, model_.info().pad, -1);
    Batch& b = built.batch;
    for (std::size_t i = 0; i < items.size(); ++i)
      for (std::size_t t = 0; t < items[i]->tokens.size(); ++t)
        if (items[i]->tokens[t] == mask_token_)
          b.output_rows.push_back(static_cast<std::int32_t>(i * b.length + t));
    ForwardResult out = model_.forward(b);
    std::vector<Result> results;
    std::size_t row = 0;
    std::vector<std::int32_t> top;
    for (Item* item : items) {
      Result r;
      r.id = item->record.id;
      r.object["id"] = r.id;
      std::vector<TokenId> filled = item->tokens;
      auto masks = nlohmann::ordered_json::array();
      for (std::size_t t = 0; t < filled.size(); ++t) {
        if (item->tokens[t] != mask_token_) continue;
        std::span<const float> logits = tensor_row(out.logits, row++);
        const double lse = decoding::log_sum_exp(logits);
        auto candidates = nlohmann::ordered_json::array();
        decoding::top_k(logits, top_k_, top);
        for (auto id : top) {
          nlohmann::ordered_json c;
          c["token"] = tokenizer_ ? tokenizer_->id_to_piece(id) : std::to_string(id);
          c["id"] = id;
          c["logprob"] = static_cast<double>(logits[id]) - lse;
          candidates.push_back(std::move(c));
        }
        filled[t] = top.front();
        nlohmann::ordered_json m;
        m["position"] = t;
        m["candidates"] = std::move(candidates);
        masks.push_back(std::move(m));
      }
      r.text = detokenize(tokenizer_, filled);
      r.object["text"] = r.text;
      r.object["masks"] = std::move(masks);
      r.tokens = item->tokens.size();
      results.push_back(std::move(r));
    }
    return results;
  }

 private:
  const Params& params_;
  const Model& model_;
  const Tokenizer* tokenizer_;
  const MaskStrategy& mask_;
  std::int32_t top_k_;
  TokenId mask_token_ = -1;
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<FillTask>(pipeline, plugins);
}

const TaskRegistration registration({
    .spec = {.name = "fill",
             .description =
                 "predict every [MASK] of each record: top-k tokens with log-probabilities "
                 "per masked position, and the text with each [MASK] replaced by its best token",
             .params = {{.name = "top_k",
                         .type = ParamType::integer,
                         .default_value = "5",
                         .help = "candidates listed per masked position",
                         .min = 1,
                         .max = 100000},
                        mask_token_param()},
             .required_sections = {"model", "mask"},
             .optional_sections = {"tokenizer"},
             .default_plugins = {{"mask", "bidirectional"}},
             .model_kinds = {ModelKind::encoder_only, ModelKind::decoder_only}},
    .create = create,
});

}  // namespace

}  // namespace masque
