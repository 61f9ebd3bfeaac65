// Task `plm-score`: the log-likelihood of each record under a factorization order pi,
// sum_t log p(x_{pi_t} | x_{pi_<t}), with a BERT-like model. Special tokens ([CLS], [SEP]) are
// context every step sees; the order runs over the other tokens (0-based among them).
#include "masque/error.hpp"
#include "tasks/plm.hpp"

namespace masque {

namespace {

struct PlmInput {
  std::vector<std::int32_t> slots;  // positions of the scored tokens
  std::vector<std::int32_t> order;  // indexes into slots, first to last
};

class PlmScoreTask final : public Task {
 public:
  PlmScoreTask(const Pipeline& pipeline, const Plugins& plugins)
      : params_(pipeline.task_params),
        model_(*plugins.model),
        tokenizer_(plugins.tokenizer.get()),
        mask_(*plugins.mask),
        visible_(plugins.held_mask("bidirectional")),
        method_(parse_plm_method(params_.get_string("method"))) {
    mask_token_ = require_mask_token(params_, tokenizer_, "plm-score");
  }

  void prepare(Item& item) const override {
    tokenize_item(item, tokenizer_, &model_, true);
    auto input = std::make_shared<PlmInput>();
    for (std::size_t t = 0; t < item.tokens.size(); ++t)
      if (!is_context_token(tokenizer_, item.tokens[t]))
        input->slots.push_back(static_cast<std::int32_t>(t));
    if (input->slots.empty())
      throw RecordError("nothing to score: the record has no (non-special) tokens");
    if (method_ == PlmMethod::incremental && input->slots.size() == item.tokens.size())
      throw RecordError(
          "the incremental method needs at least one context token (e.g. [CLS]) to start from");
    input->order = resolve_order(mask_, static_cast<std::int32_t>(input->slots.size()),
                                 order_field(item.record), item.record.id);
    const std::size_t length =
        item.tokens.size() + (method_ == PlmMethod::query_stream ? input->slots.size() : 0);
    check_length(item, length, params_, model_);
    item.cost = length;
    item.data = input;
  }

  std::vector<Result> process(std::span<Item* const> items) const override {
    std::vector<std::vector<double>> logprobs;
    switch (method_) {
      case PlmMethod::query_stream:
        logprobs = score_query_stream(items);
        break;
      case PlmMethod::incremental:
        logprobs = score_incremental(items);
        break;
      case PlmMethod::visible_mask:
        logprobs = score_visible_mask(items);
        break;
    }
    std::vector<Result> results;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const PlmInput& in = input(*items[i]);
      double total = 0;
      for (double lp : logprobs[i]) total += lp;
      Result r;
      r.id = items[i]->record.id;
      r.object["id"] = r.id;
      auto pieces = nlohmann::ordered_json::array();
      for (auto p : in.slots)
        pieces.push_back(tokenizer_ ? tokenizer_->id_to_piece(items[i]->tokens[p])
                                    : std::to_string(items[i]->tokens[p]));
      r.object["tokens"] = pieces;
      r.object["order"] = in.order;
      r.object["logprob"] = total;
      r.object["token_logprobs"] = logprobs[i];
      char text[64];
      std::snprintf(text, sizeof text, "%.6f", total);
      r.text = text;
      r.tokens = items[i]->tokens.size();
      results.push_back(std::move(r));
    }
    return results;
  }

  std::vector<std::string> tsv_columns() const override { return {"logprob", "order"}; }

 private:
  static const PlmInput& input(const Item& item) {
    return *static_cast<const PlmInput*>(item.data.get());
  }

  std::vector<SequenceSpec> specs_of(std::span<Item* const> items) const {
    std::vector<SequenceSpec> specs(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      specs[i].ids = items[i]->tokens;
      specs[i].token_types = items[i]->type_ids;
      specs[i].record_id = items[i]->record.id;
    }
    return specs;
  }

  // Step t's token: x at slot order[t].
  static TokenId target(const Item& item, std::size_t t) {
    const PlmInput& in = input(item);
    return item.tokens[in.slots[in.order[t]]];
  }

  std::vector<std::vector<double>> score_query_stream(std::span<Item* const> items) const {
    std::vector<SequenceSpec> specs = specs_of(items);
    std::vector<SequenceMask> masks;
    for (Item* item : items)
      masks.push_back(query_stream_mask(mask_, item->tokens.size(), input(*item).slots,
                                        input(*item).order, item->record.id));
    BuiltBatch built = assemble_batch(specs, std::move(masks), model_.info().pad, mask_token_);
    for (std::size_t i = 0; i < items.size(); ++i)
      for (std::size_t t = 0; t < input(*items[i]).slots.size(); ++t)
        built.batch.output_rows.push_back(
            static_cast<std::int32_t>(i * built.batch.length + items[i]->tokens.size() + t));
    ForwardResult out = model_.forward(built.batch);
    std::vector<std::vector<double>> lps(items.size());
    std::size_t row = 0;
    for (std::size_t i = 0; i < items.size(); ++i)
      for (std::size_t t = 0; t < input(*items[i]).slots.size(); ++t, ++row)
        lps[i].push_back(row_logprob(out.logits, row, target(*items[i], t)));
    return lps;
  }

  std::vector<std::vector<double>> score_incremental(std::span<Item* const> items) const {
    // Prefill the context (mutually visible), then per step a query that is not kept and the
    // revealed token, both at the slot's position.
    std::vector<SequenceSpec> context(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      const PlmInput& in = input(*items[i]);
      std::vector<bool> is_slot(items[i]->tokens.size(), false);
      for (auto p : in.slots) is_slot[p] = true;
      SequenceSpec& s = context[i];
      for (std::size_t t = 0; t < items[i]->tokens.size(); ++t)
        if (!is_slot[t]) {
          s.ids.push_back(items[i]->tokens[t]);
          s.token_types.push_back(items[i]->type_ids[t]);
        }
    }
    BuiltBatch built = build_batch(context, visible_, model_.info().pad, -1);
    // Context tokens keep their real position ids.
    for (std::size_t i = 0; i < items.size(); ++i) {
      std::size_t k = 0;
      const PlmInput& in = input(*items[i]);
      std::vector<bool> is_slot(items[i]->tokens.size(), false);
      for (auto p : in.slots) is_slot[p] = true;
      for (std::size_t t = 0; t < items[i]->tokens.size(); ++t)
        if (!is_slot[t])
          built.batch.positions[i * built.batch.length + k++] = static_cast<std::int32_t>(t);
    }
    auto state = model_.start(built.batch, nullptr);
    std::vector<std::vector<double>> lps(items.size());
    std::vector<std::int32_t> rows(items.size());  // live rows -> item index
    for (std::size_t i = 0; i < items.size(); ++i) rows[i] = static_cast<std::int32_t>(i);
    Tensor logits;
    for (std::size_t t = 0;; ++t) {
      // Drop the records whose every slot is scored.
      std::vector<std::int32_t> keep, live;
      for (std::size_t r = 0; r < rows.size(); ++r)
        if (t < input(*items[rows[r]]).slots.size())
          keep.push_back(static_cast<std::int32_t>(r)), live.push_back(rows[r]);
      if (live.empty()) break;
      if (live.size() != rows.size()) state->select(keep);
      rows = live;
      std::vector<TokenId> queries(rows.size(), mask_token_), tokens(rows.size());
      std::vector<std::int32_t> positions(rows.size()), types(rows.size());
      for (std::size_t r = 0; r < rows.size(); ++r) {
        const Item& item = *items[rows[r]];
        const PlmInput& in = input(item);
        positions[r] = in.slots[in.order[t]];
        types[r] = item.type_ids[positions[r]];
        tokens[r] = item.tokens[positions[r]];
      }
      model_.step(
          *state,
          {.tokens = queries, .positions = positions, .token_types = types, .append = false},
          logits);
      for (std::size_t r = 0; r < rows.size(); ++r)
        lps[rows[r]].push_back(row_logprob(logits, r, tokens[r]));
      model_.step(*state,
                  {.tokens = tokens, .positions = positions, .token_types = types, .append = true},
                  logits);
    }
    return lps;
  }

  std::vector<std::vector<double>> score_visible_mask(std::span<Item* const> items) const {
    // One bidirectional sequence per step: the slots of steps >= t are [MASK]; predict step t.
    std::vector<std::vector<double>> lps(items.size());
    std::vector<SequenceSpec> specs;
    std::vector<std::pair<std::size_t, std::size_t>> owner;  // (item, step) of each sequence
    auto flush = [&] {
      if (specs.empty()) return;
      BuiltBatch built = build_batch(specs, visible_, model_.info().pad, -1);
      for (std::size_t k = 0; k < specs.size(); ++k) {
        const Item& item = *items[owner[k].first];
        const PlmInput& in = input(item);
        built.batch.output_rows.push_back(static_cast<std::int32_t>(
            k * built.batch.length + in.slots[in.order[owner[k].second]]));
      }
      ForwardResult out = model_.forward(built.batch);
      for (std::size_t k = 0; k < specs.size(); ++k)
        lps[owner[k].first][owner[k].second] =
            row_logprob(out.logits, k, target(*items[owner[k].first], owner[k].second));
      specs.clear();
      owner.clear();
    };
    for (std::size_t i = 0; i < items.size(); ++i) {
      const PlmInput& in = input(*items[i]);
      lps[i].resize(in.slots.size());
      for (std::size_t t = 0; t < in.slots.size(); ++t) {
        SequenceSpec s;
        s.ids = items[i]->tokens;
        s.token_types = items[i]->type_ids;
        for (std::size_t u = t; u < in.slots.size(); ++u)
          s.ids[in.slots[in.order[u]]] = mask_token_;
        specs.push_back(std::move(s));
        owner.emplace_back(i, t);
        if (specs.size() >= 64) flush();
      }
    }
    flush();
    return lps;
  }

  static double row_logprob(const Tensor& logits, std::size_t row, TokenId id) {
    return token_logprob(tensor_row(logits, row), id);
  }

  const Params& params_;
  const Model& model_;
  const Tokenizer* tokenizer_;
  const MaskStrategy& mask_;
  const MaskStrategy& visible_;  // the context every step sees
  PlmMethod method_;
  TokenId mask_token_ = -1;
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<PlmScoreTask>(pipeline, plugins);
}

const TaskRegistration registration({
    .spec =
        {.name = "plm-score",
         .description =
             "log-likelihood of each record under a factorization order (the permutation "
             "mask's order, or a record's `order`): {id, tokens, order, logprob, "
             "token_logprobs} with token_logprobs[t] = log p(x_order[t] | x_order[<t])",
         .params = {{.name = "method",
                     .type = ParamType::string,
                     .default_value = "query-stream",
                     .help =
                         "query-stream: one forward pass with a query token per position; "
                         "incremental: the same step by step with the KV cache; visible-mask: "
                         "for plain BERT checkpoints, positions not yet revealed are [MASK] tokens",
                     .choices = "query-stream|incremental|visible-mask"},
                    mask_token_param()},
         .required_sections = {"model", "mask"},
         .optional_sections = {"tokenizer"},
         .default_plugins = {{"mask", "permutation"}},
         .model_kinds = {ModelKind::encoder_only},
         .held_masks = {"bidirectional"}},
    .create = create,
});

}  // namespace

}  // namespace masque
