// Task `lm-score`: the log-likelihood of every record under a causal (or any) mask:
// nll = -sum log p(x_t | x_<t) over tokens 2..n, in nats; ppl = exp(nll / (n - 1)).
// Conditional form: with a prompt (the `prompt_field` of the record), the record is
// prompt + text and only the text's tokens are scored, given the prompt.
#include <cmath>
#include <mutex>

#include "masque/error.hpp"
#include "run/exact_sum.hpp"
#include "tasks/common.hpp"

namespace masque {

namespace {

// Logit rows are [rows, vocab] floats: keep one forward's worth under this many bytes.
constexpr std::size_t kLogitBudgetBytes = std::size_t{512} << 20;

// The first scored position of a record: 1, or the prompt's length in the conditional form.
std::size_t first_scored(const Item& item) {
  return item.data ? *static_cast<const std::size_t*>(item.data.get()) : 1;
}

class LmScoreTask final : public Task {
 public:
  LmScoreTask(const Pipeline& pipeline, const Plugins& plugins)
      : params_(pipeline.task_params),
        model_(*plugins.model),
        tokenizer_(plugins.tokenizer.get()),
        mask_(*plugins.mask),
        mask_name_(pipeline.at("mask").entry->descriptor->name),
        token_logprobs_(params_.get_bool("token_logprobs")),
        prompt_field_(params_.get_string("prompt_field")) {}

  void prepare(Item& item) const override {
    std::vector<TokenId> prompt = prompt_tokens(item.record);
    tokenize_item(item, tokenizer_, &model_, prompt.empty());
    if (!prompt.empty()) {
      if (item.tokens.empty())
        throw RecordError("nothing to score: the text after the prompt has no tokens");
      item.data = std::make_shared<std::size_t>(prompt.size());
      item.tokens.insert(item.tokens.begin(), prompt.begin(), prompt.end());
      item.type_ids.assign(item.tokens.size(), 0);
    }
    if (item.tokens.size() < 2)
      throw RecordError("nothing to score: the record has " + std::to_string(item.tokens.size()) +
                        " token(s); scoring needs at least 2 (the first token is only context)");
    check_length(item, item.tokens.size(), params_, model_);
    item.cost = item.tokens.size();
  }

  std::vector<Result> process(std::span<Item* const> batch) const override {
    std::vector<Result> results;
    // Split so that one forward's logits stay within the budget.
    const std::size_t vocab = static_cast<std::size_t>(model_.info().vocab_size);
    std::size_t begin = 0;
    while (begin < batch.size()) {
      std::size_t end = begin, rows = 0;
      while (end < batch.size()) {
        std::size_t more = batch[end]->tokens.size() - first_scored(*batch[end]);
        if (end > begin && (rows + more) * vocab * sizeof(float) > kLogitBudgetBytes) break;
        rows += more;
        ++end;
      }
      score(batch.subspan(begin, end - begin), results);
      begin = end;
    }
    return results;
  }

  nlohmann::ordered_json summary() const override {
    std::lock_guard lock(mutex_);
    nlohmann::ordered_json j;
    j["records"] = records_;
    j["scored_tokens"] = scored_;
    const double nll = total_nll_.value();
    j["nll"] = nll;
    j["mean_nll"] = scored_ ? nll / static_cast<double>(scored_) : 0.0;
    j["perplexity"] = scored_ ? std::exp(nll / static_cast<double>(scored_)) : 0.0;
    if (seeing_target_) j["positions_seeing_target"] = seeing_target_;
    return j;
  }

  nlohmann::ordered_json summary_state() const override {
    std::lock_guard lock(mutex_);
    return {{"records", records_},
            {"scored_tokens", scored_},
            {"positions_seeing_target", seeing_target_},
            {"nll", total_nll_.encode()}};
  }

  void merge_summary_state(const nlohmann::ordered_json& state) override {
    std::lock_guard lock(mutex_);
    records_ += state.value("records", std::uint64_t{0});
    scored_ += state.value("scored_tokens", std::uint64_t{0});
    seeing_target_ += state.value("positions_seeing_target", std::uint64_t{0});
    total_nll_.add(ExactSum::decode(state.value("nll", std::string())));
  }

  std::string summary_text() const override {
    auto j = summary();
    char line[256];
    std::snprintf(line, sizeof line,
                  "masque: lm-score: %llu records, %llu scored tokens, mean nll %.6f nats, corpus "
                  "perplexity %.6f\n",
                  static_cast<unsigned long long>(j["records"].get<std::uint64_t>()),
                  static_cast<unsigned long long>(j["scored_tokens"].get<std::uint64_t>()),
                  j["mean_nll"].get<double>(), j["perplexity"].get<double>());
    std::string text = line;
    if (seeing_target_)
      text += "masque: lm-score: warning: under mask '" + mask_name_ + "', " +
              std::to_string(seeing_target_) + " of " + std::to_string(scored_) +
              " scored positions could attend to the token they predict: these figures are not "
              "a language model's likelihood (score with a causal mask)\n";
    return text;
  }

  std::vector<std::string> tsv_columns() const override { return {"tokens", "nll", "ppl"}; }

 private:
  // The prompt's ids (with the tokenizer's leading special tokens, e.g. BOS): text, or an array
  // of ids. Empty when the record has none.
  std::vector<TokenId> prompt_tokens(const Record& record) const {
    auto it = record.fields.find(prompt_field_);
    if (it == record.fields.end() || it->is_null()) return {};
    if (it->is_string()) {
      if (it->get<std::string>().empty()) return {};
      if (!tokenizer_)
        throw RecordError("'" + prompt_field_ + "' is text, but the pipeline has no tokenizer");
      return tokenizer_->encode(it->get<std::string>(), true).ids;
    }
    const std::int64_t vocab = model_.info().vocab_size;
    std::vector<TokenId> ids;
    if (it->is_array())
      for (const auto& v : *it) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= vocab)
          break;
        ids.push_back(v.get<TokenId>());
      }
    if (!it->is_array() || ids.size() != it->size())
      throw RecordError("'" + prompt_field_ + "' must be text or an array of ids in 0.." +
                        std::to_string(vocab - 1));
    return ids;
  }

  void score(std::span<Item* const> items, std::vector<Result>& results) const {
    std::vector<SequenceSpec> specs(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      specs[i].ids = items[i]->tokens;
      specs[i].token_types = items[i]->type_ids;
      specs[i].record_id = items[i]->record.id;
    }
    BuiltBatch built = build_batch(specs, mask_, model_.info().pad, -1);
    Batch& b = built.batch;
    for (std::size_t i = 0; i < items.size(); ++i)
      for (std::size_t t = first_scored(*items[i]) - 1; t + 1 < items[i]->tokens.size(); ++t)
        b.output_rows.push_back(static_cast<std::int32_t>(i * b.length + t));
    ForwardResult out = model_.forward(b);
    std::size_t row = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const Item* item = items[i];
      const auto& ids = item->tokens;
      const std::size_t first = first_scored(*item);
      const std::uint64_t seeing = positions_seeing_target(b.attention, i, first, ids.size());
      std::vector<double> lps(ids.size() - first);
      double nll = 0;
      for (std::size_t k = 0; k < lps.size(); ++k, ++row) {
        lps[k] = token_logprob(tensor_row(out.logits, row), ids[first + k]);
        nll -= lps[k];
      }
      const double scored = static_cast<double>(lps.size());
      Result r;
      r.id = item->record.id;
      r.object["id"] = item->record.id;
      r.object["tokens"] = ids.size();
      r.object["nll"] = nll;
      r.object["ppl"] = std::exp(nll / scored);
      if (item->data) r.object["prompt_tokens"] = first;
      if (token_logprobs_) {
        r.object["ids"] = ids;
        r.object["token_logprobs"] = lps;
      }
      char text[64];
      std::snprintf(text, sizeof text, "%.6f", std::exp(nll / scored));
      r.text = text;
      r.tokens = ids.size();
      results.push_back(std::move(r));
      std::lock_guard lock(mutex_);
      ++records_;
      scored_ += lps.size();
      seeing_target_ += seeing;
      total_nll_.add(nll);  // exact: the corpus NLL does not depend on the batch order
    }
  }

  // The scored positions (t predicts t + 1) whose mask lets them see t + 1: a bidirectional or
  // permutation mask hands the model the answer, and its NLL means nothing as a likelihood.
  static std::uint64_t positions_seeing_target(const AttentionLayout& layout, std::size_t row,
                                               std::size_t first, std::size_t n) {
    std::uint64_t count = 0;
    for (std::size_t t = first - 1; t + 1 < n; ++t)
      count += layout.allowed(static_cast<std::int32_t>(row), static_cast<std::int32_t>(t),
                              static_cast<std::int32_t>(t + 1));
    return count;
  }

  const Params& params_;
  const Model& model_;
  const Tokenizer* tokenizer_;
  const MaskStrategy& mask_;
  std::string mask_name_;
  bool token_logprobs_;
  std::string prompt_field_;
  mutable std::mutex mutex_;
  mutable std::uint64_t records_ = 0, scored_ = 0, seeing_target_ = 0;
  mutable ExactSum total_nll_;
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<LmScoreTask>(pipeline, plugins);
}

const TaskRegistration registration({
    .spec =
        {.name = "lm-score",
         .description = "score each record with a language model: {id, tokens, nll, ppl} "
                        "(nll in nats over tokens 2..n; ppl = exp(nll / (n - 1))); with a prompt, "
                        "only the text after it is scored (+ prompt_tokens); under a mask that "
                        "lets a position see the token it predicts (bidirectional) the summary "
                        "counts those positions and warns",
         .params = {{.name = "token_logprobs",
                     .type = ParamType::boolean,
                     .default_value = "false",
                     .help = "also output the ids and the log-probability of every scored token"},
                    {.name = "prompt_field",
                     .type = ParamType::string,
                     .default_value = "prompt",
                     .help = "JSON-lines / TSV field holding a prompt (text, encoded with the "
                             "tokenizer's special tokens, or an array of ids): the record is then "
                             "prompt + text (text encoded without special tokens) and only the "
                             "text's tokens are scored, given the prompt"}},
         .required_sections = {"model", "mask"},
         .optional_sections = {"tokenizer"},
         .default_plugins = {{"mask", "causal"}},
         .model_kinds = {ModelKind::decoder_only, ModelKind::encoder_only}},
    .create = create,
});

}  // namespace

}  // namespace masque
