// Task `forward`: a verification tool (like llama.cpp's logits dump) for any model under the
// pipeline's mask: per position, the top-k ids with their logits and the log-sum-exp of all
// logits, and optionally the final hidden state.
#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "tasks/common.hpp"

namespace masque {

namespace {

struct ForwardInput {
  SequenceSpec spec;
};

class ForwardTask final : public Task {
 public:
  ForwardTask(const Pipeline& pipeline, const Plugins& plugins)
      : params_(pipeline.task_params),
        model_(*plugins.model),
        tokenizer_(plugins.tokenizer.get()),
        mask_(*plugins.mask),
        top_k_(static_cast<std::int32_t>(params_.get_int("top_k"))),
        hidden_(params_.get_bool("hidden_states")),
        add_special_(params_.get_bool("add_special")) {
    query_token_ = mask_token(params_, tokenizer_);
  }

  void prepare(Item& item) const override {
    tokenize_item(item, tokenizer_, &model_, add_special_);
    if (item.tokens.empty()) throw RecordError("empty record: nothing to run");
    auto input = std::make_shared<ForwardInput>();
    SequenceSpec& s = input->spec;
    s.ids = item.tokens;
    s.record_id = item.record.id;
    s.token_types = int_array_field(item.record, "token_type_ids").value_or(item.type_ids);
    if (auto seg = int_array_field(item.record, "segments"))
      s.segments = *seg;
    else
      s.segments = s.token_types;
    s.order = order_field(item.record);
    const std::size_t n = s.ids.size();
    if (s.token_types.size() != n)
      throw RecordError("'token_type_ids' has " + std::to_string(s.token_types.size()) +
                        " entries for " + std::to_string(n) + " tokens");
    if (s.segments.size() != n)
      throw RecordError("'segments' has " + std::to_string(s.segments.size()) + " entries for " +
                        std::to_string(n) + " tokens");
    check_length(item, n, params_, model_);
    item.cost = n;
    item.data = input;
  }

  std::vector<Result> process(std::span<Item* const> items) const override {
    std::vector<SequenceSpec> specs;
    for (Item* item : items) specs.push_back(static_cast<ForwardInput*>(item->data.get())->spec);
    BuiltBatch built = build_batch(specs, mask_, model_.info().pad, query_token_);
    Batch& b = built.batch;
    b.want_hidden = hidden_;
    for (std::size_t i = 0; i < items.size(); ++i)
      for (std::size_t t = 0; t < built.masks[i].size(); ++t)
        b.output_rows.push_back(static_cast<std::int32_t>(i * b.length + t));
    ForwardResult out = model_.forward(b);
    std::vector<Result> results;
    std::size_t row = 0;
    std::vector<std::int32_t> top;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const SequenceMask& m = built.masks[i];
      const std::size_t n = specs[i].ids.size();
      Result r;
      r.id = items[i]->record.id;
      r.object["id"] = r.id;
      r.object["ids"] = specs[i].ids;
      if (!m.order.empty()) r.object["order"] = m.order;
      auto positions = nlohmann::ordered_json::array();
      for (std::size_t t = 0; t < m.size(); ++t, ++row) {
        std::span<const float> logits = tensor_row(out.logits, row);
        nlohmann::ordered_json p;
        p["position"] = b.positions[i * b.length + t];
        if (t >= n) p["query"] = true;
        decoding::top_k(logits, top_k_, top);
        p["top_ids"] = top;
        auto top_logits = nlohmann::ordered_json::array();
        for (auto id : top) top_logits.push_back(logits[id]);
        p["top_logits"] = top_logits;
        p["logsumexp"] = decoding::log_sum_exp(logits);
        if (hidden_) {
          std::span<const float> h = tensor_row(out.hidden, row);
          p["hidden"] = std::vector<float>(h.begin(), h.end());
        }
        positions.push_back(std::move(p));
      }
      r.object["positions"] = std::move(positions);
      r.tokens = n;
      results.push_back(std::move(r));
    }
    return results;
  }

  std::vector<std::string> tsv_columns() const override { return {"ids"}; }

 private:
  const Params& params_;
  const Model& model_;
  const Tokenizer* tokenizer_;
  const MaskStrategy& mask_;
  std::int32_t top_k_;
  bool hidden_;
  bool add_special_;
  TokenId query_token_ = -1;
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<ForwardTask>(pipeline, plugins);
}

const TaskRegistration registration({
    .spec =
        {.name = "forward",
         .description = "verification dump for any model under the pipeline's mask: per "
                        "position the top-k ids, their logits and the log-sum-exp of all logits "
                        "(JSON-lines records may carry ids, token_type_ids, segments, order)",
         .params =
             {{.name = "top_k",
               .type = ParamType::integer,
               .default_value = "10",
               .help = "how many of the largest logits to list per position",
               .min = 1,
               .max = 1000000},
              {.name = "hidden_states",
               .type = ParamType::boolean,
               .default_value = "false",
               .help = "also output the model's final hidden state at every position"},
              {.name = "add_special",
               .type = ParamType::boolean,
               .default_value = "true",
               .help = "text records get the special tokens the model expects ([CLS]/[SEP], BOS)"},
              mask_token_param()},
         .required_sections = {"model", "mask"},
         .optional_sections = {"tokenizer"},
         .default_plugins = {{"mask", "causal"}},
         .model_kinds = {ModelKind::decoder_only, ModelKind::encoder_only}},
    .create = create,
});

}  // namespace

}  // namespace masque
