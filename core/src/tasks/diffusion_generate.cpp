// Task `diffusion-generate`: a diffusion language model's generation (tasks/diffusion.hpp) over
// a corpus. Each record is the source (its tokens with the tokenizer's specials, as the
// `diffusion` training objective lays it out), followed by L [MASK] slots: L = the source's
// tokens + `slack` (the objective's plm_target_slack: the answer then ends at its first [SEP]
// filler), a fixed `length`, or the record's own [MASK]s (a template `source [SEP] [MASK] ...`).
// Batches continuously with run.batching: continuous (diffusion_decode admits records as rows
// finish).
#include <algorithm>

#include "masque/error.hpp"
#include "tasks/common.hpp"
#include "tasks/diffusion.hpp"

namespace masque {

namespace {

struct Prepared {
  DiffusionInput input;
};

class DiffusionGenerateTask final : public Task {
 public:
  DiffusionGenerateTask(const Pipeline& pipeline, const Plugins& plugins)
      : params_(pipeline.task_params),
        model_(*plugins.model),
        tokenizer_(plugins.tokenizer.get()),
        mask_(*plugins.mask),
        slack_(static_cast<std::int32_t>(params_.get_int("slack"))),
        length_(static_cast<std::int32_t>(params_.get_int("length"))),
        limits_(continuous_limits(pipeline.run_params)) {
    mask_token_ = require_mask_token(params_, tokenizer_, "diffusion-generate");
    options_.steps = static_cast<std::int32_t>(params_.get_int("steps"));
    options_.random_remasking = params_.get_string("remasking") == "random";
    options_.temperature = params_.get_number("temperature");
    options_.seed = static_cast<std::uint64_t>(params_.get_int("seed"));
    options_.recompute = !params_.get_bool("cache_blocks");
    end_token_ = tokenizer_ ? tokenizer_->special_tokens().sep : -1;
    // The mask must lay out a source and its slots (segments) with ranks.
    (void)diffusion_blocks(mask_, 2, 2);
  }

  void prepare(Item& item) const override {
    tokenize_item(item, tokenizer_, &model_, true);
    auto p = std::make_shared<Prepared>();
    const auto& t = item.tokens;
    const auto first = std::find(t.begin(), t.end(), mask_token_);
    DiffusionInput& in = p->input;
    in.record_id = item.record.id;
    if (first != t.end()) {  // a template: its [MASK]s are the slots
      const auto last = std::find_if(first, t.end(), [&](TokenId id) { return id != mask_token_; });
      for (auto it = last; it != t.end(); ++it)
        if (*it == mask_token_ || !tokenizer_ || !tokenizer_->is_special(*it))
          throw RecordError(
              "diffusion-generate: a template's [MASK] slots must follow its source as one run "
              "at the end (only the tokenizer's closing specials may follow them)");
      in.source.assign(t.begin(), first);
      in.slots = static_cast<std::int32_t>(last - first);
    } else {
      in.source = t;
      if (length_ > 0) {
        in.slots = length_;
      } else if (slack_ >= 0) {
        const auto words = std::count_if(t.begin(), t.end(), [&](TokenId id) {
          return !tokenizer_ || !tokenizer_->is_special(id);
        });
        in.slots = static_cast<std::int32_t>(words) + slack_;
      } else {
        throw RecordError(
            "diffusion-generate: no [MASK] slots in the record, and neither task.length nor "
            "task.slack says how many to add");
      }
    }
    if (in.source.empty()) throw RecordError("diffusion-generate: an empty source");
    if (in.slots <= 0) throw RecordError("diffusion-generate: no slot to fill");
    check_length(item, in.source.size() + static_cast<std::size_t>(in.slots), params_, model_);
    item.cost = in.source.size() + static_cast<std::size_t>(in.slots);
    item.data = p;
  }

  bool batches_continuously() const override { return limits_.enabled; }

  std::vector<Result> process(std::span<Item* const> items) const override {
    std::vector<DiffusionInput> inputs;
    for (Item* item : items)
      inputs.push_back(static_cast<const Prepared*>(item->data.get())->input);
    // Continuous batching: the group decodes max_batch_size records at a time, the next
    // joining as others finish; a static batch decodes at once.
    DiffusionBatching batching;
    if (limits_.enabled)
      batching = {.max_rows = limits_.max_rows, .max_tokens = limits_.max_tokens};
    const std::vector<DiffusionOutput> decoded =
        diffusion_decode(model_, mask_, mask_token_, inputs, options_, batching);
    std::vector<Result> results;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const DiffusionOutput& o = decoded[i];
      // The answer ends at the first end-of-answer filler ([SEP]).
      std::size_t end = 0;
      double score = 0;
      while (end < o.tokens.size() && o.tokens[end] != end_token_) score += o.logprob[end++];
      const std::vector<TokenId> answer(o.tokens.begin(),
                                        o.tokens.begin() + static_cast<std::ptrdiff_t>(end));
      Result r;
      r.id = items[i]->record.id;
      r.text = detokenize(tokenizer_, answer);
      r.object["id"] = r.id;
      r.object["text"] = r.text;
      r.object["tokens"] = answer;
      r.object["slots"] = o.tokens;
      r.object["unmasked_at"] = o.step;
      r.object["steps"] = o.steps;
      r.object["blocks"] = o.blocks;
      r.object["score"] = score;
      r.tokens = items[i]->cost;
      results.push_back(std::move(r));
    }
    return results;
  }

  std::vector<std::string> tsv_columns() const override { return {"text", "score"}; }

 private:
  const Params& params_;
  const Model& model_;
  const Tokenizer* tokenizer_;
  const MaskStrategy& mask_;
  std::int32_t slack_, length_;
  ContinuousLimits limits_;
  DiffusionOptions options_;
  TokenId mask_token_ = -1, end_token_ = -1;
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<DiffusionGenerateTask>(pipeline, plugins);
}

const TaskRegistration registration({
    .spec =
        {.name = "diffusion-generate",
         .description =
             "diffusion LM generation (objective diffusion): L [MASK] slots after each record's "
             "source, unmasked over T steps (most confident or seeded random slots first), block "
             "by block under block-causal (the finished blocks in the KV cache): {id, text (the "
             "slots up to the first [SEP]), tokens, slots, unmasked_at (each slot's step), steps, "
             "blocks, score}",
         .params = {{.name = "steps",
                     .type = ParamType::integer,
                     .default_value = "0",
                     .help = "T, denoising steps over the whole target, shared by its blocks in "
                             "proportion to their slots (at least one each); each step fills "
                             "about L / T slots; 0: one slot per step (T = L); 1: all at once",
                     .min = 0,
                     .max = 1000000},
                    {.name = "remasking",
                     .type = ParamType::string,
                     .default_value = "confidence",
                     .help = "which still-masked slots a step fills: confidence (the most "
                             "probable tokens first, LLaDA's low-confidence remasking) or random "
                             "(a seeded random choice)",
                     .choices = "confidence|random"},
                    {.name = "temperature",
                     .type = ParamType::number,
                     .default_value = "0",
                     .help = "0: each slot's most probable token (deterministic); > 0: a seeded "
                             "sample from softmax(logits / temperature)",
                     .min = 0},
                    {.name = "seed",
                     .type = ParamType::integer,
                     .default_value = "0",
                     .help = "seeds sampling and random remasking, per record and step (the same "
                             "outputs in any batch, thread or process)",
                     .min = 0},
                    {.name = "slack",
                     .type = ParamType::integer,
                     .default_value = "-1",
                     .help = "L = the source's tokens (without specials) + slack, as the "
                             "objective's plm_target_slack; -1: the record gives its slots as "
                             "[MASK] tokens after the source (a template) or task.length does",
                     .min = -1,
                     .max = 100000},
                    {.name = "length",
                     .type = ParamType::integer,
                     .default_value = "0",
                     .help = "> 0: L slots for every record (over slack); 0: from slack or the "
                             "template",
                     .min = 0,
                     .max = 100000},
                    {.name = "cache_blocks",
                     .type = ParamType::boolean,
                     .default_value = "true",
                     .help = "where the mask ranks every block above everything before it "
                             "(block-causal, seq2seq): keep the source and the finished blocks in "
                             "the KV cache and run each step on the current block alone; false: "
                             "a full forward of the source and the blocks so far at every step "
                             "(the same tokens, log-probabilities within 1e-5; slower; always so "
                             "under bidirectional)"},
                    mask_token_param()},
         .required_sections = {"model", "mask"},
         .optional_sections = {"tokenizer"},
         .default_plugins = {{"mask", "bidirectional"}},
         .model_kinds = {ModelKind::encoder_only}},
    .create = create,
});

}  // namespace

}  // namespace masque
