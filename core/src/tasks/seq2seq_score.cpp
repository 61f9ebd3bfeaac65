// Task `seq2seq-score`: the log-probability of a given target for each source (n-best
// rescoring, noisy-channel reranking, data filtering; CTranslate2's score_batch, Marian's
// scorer). The model runs as in `seq2seq` (tasks/seq2seq_route.hpp): an encoder-decoder, or
// one BERT-like model under the UniLM mask. Output per record: the target ids and the end
// token, each token's log-prob, their sum and the score sum / length^length_penalty.
#include <cmath>
#include <cstdio>
#include <mutex>

#include "masque/error.hpp"
#include "tasks/seq2seq_input.hpp"
#include "tasks/seq2seq_route.hpp"
#include "tasks/teacher_forcing.hpp"

namespace masque {

namespace {

struct ScoreInput {
  std::vector<TokenId> target;
  std::string note;  // source truncation
};

const ScoreInput& input_of(const Item& item) {
  return *static_cast<const ScoreInput*>(item.data.get());
}

class Seq2SeqScoreTask final : public Task {
 public:
  Seq2SeqScoreTask(const Pipeline& pipeline, const Plugins& plugins)
      : params_(pipeline.task_params),
        model_(*plugins.model),
        source_tokenizer_(plugins.tokenizer.get()),
        target_tokenizer_(plugins.target_tokenizer ? plugins.target_tokenizer.get()
                                                   : plugins.tokenizer.get()),
        route_(choose_seq2seq_route(plugins)),
        target_field_(params_.get_string("target_field")),
        length_penalty_(params_.get_number("length_penalty")),
        token_logprobs_(params_.get_bool("token_logprobs")),
        end_token_(end_token(*route_)) {}

  void prepare(Item& item) const override {
    tokenize_item(item, source_tokenizer_, &model_, true);
    auto input = std::make_shared<ScoreInput>();
    input->note = truncate_source(item, params_, source_tokenizer_);
    input->target =
        target_field(item.record, target_field_, target_tokenizer_, model_.info().vocab_size);
    check_length(item, route_->positions(item, input->target.size()), params_, model_);
    item.cost = item.tokens.size() + input->target.size();
    item.data = input;
  }

  std::vector<Result> process(std::span<Item* const> items) const override {
    std::vector<std::vector<double>> logprobs(items.size());
    std::vector<Item*> run;
    std::vector<std::vector<TokenId>> targets;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (route_->trivially_empty(*items[i])) {
        // As CTranslate2: an empty source scores every target token 0.
        logprobs[i].assign(input_of(*items[i]).target.size() + 1, 0.0);
        continue;
      }
      run.push_back(items[i]);
      targets.push_back(input_of(*items[i]).target);
    }
    if (!run.empty()) {
      std::vector<StepperRecord> records(run.size());
      for (std::size_t i = 0; i < run.size(); ++i) records[i].id = run[i]->record.id;
      std::unique_ptr<Stepper> stepper = route_->start(run, std::move(records));
      auto forced = force_targets(*stepper, targets, end_token_);
      for (std::size_t i = 0, k = 0; i < items.size() && k < run.size(); ++i)
        if (items[i] == run[k]) logprobs[i] = std::move(forced[k++]);
    }
    std::vector<Result> results;
    for (std::size_t i = 0; i < items.size(); ++i)
      results.push_back(result(*items[i], logprobs[i]));
    return results;
  }

  nlohmann::ordered_json summary() const override {
    std::lock_guard lock(mutex_);
    nlohmann::ordered_json j;
    j["records"] = records_;
    j["scored_tokens"] = scored_;
    j["logprob"] = total_;
    j["mean_logprob"] = scored_ ? total_ / static_cast<double>(scored_) : 0.0;
    j["perplexity"] = scored_ ? std::exp(-total_ / static_cast<double>(scored_)) : 0.0;
    return j;
  }

  std::string summary_text() const override {
    auto j = summary();
    char line[256];
    std::snprintf(line, sizeof line,
                  "masque: seq2seq-score: %llu records, %llu scored tokens, total log-prob %.6f, "
                  "mean %.6f nats, perplexity %.6f\n",
                  static_cast<unsigned long long>(j["records"].get<std::uint64_t>()),
                  static_cast<unsigned long long>(j["scored_tokens"].get<std::uint64_t>()),
                  j["logprob"].get<double>(), j["mean_logprob"].get<double>(),
                  j["perplexity"].get<double>());
    return line;
  }

  std::vector<std::string> tsv_columns() const override { return {"score", "logprob", "tokens"}; }

 private:
  static TokenId end_token(const Seq2SeqRoute& route) {
    const std::vector<TokenId> ends = route.end_tokens();
    if (ends.empty())
      throw ConfigError(
          "seq2seq-score: the model and tokenizer define no end token to score (eos_token_id in "
          "config.json, or the tokenizer's [SEP] / </s>)");
    return ends.front();
  }

  Result result(const Item& item, const std::vector<double>& logprobs) const {
    const ScoreInput& input = input_of(item);
    double sum = 0;
    for (double lp : logprobs) sum += lp;
    const double score = sum / std::pow(static_cast<double>(logprobs.size()), length_penalty_);
    Result r;
    r.id = item.record.id;
    r.object["id"] = r.id;
    std::vector<TokenId> ids = input.target;
    ids.push_back(end_token_);
    r.object["tokens"] = ids;
    if (target_tokenizer_) {
      auto pieces = nlohmann::ordered_json::array();
      for (TokenId t : ids) pieces.push_back(target_tokenizer_->id_to_piece(t));
      r.object["pieces"] = pieces;
    }
    r.object["length"] = logprobs.size();
    r.object["logprob"] = sum;
    r.object["score"] = score;
    if (token_logprobs_) r.object["token_logprobs"] = logprobs;
    if (!input.note.empty()) r.object["note"] = input.note;
    char text[64];
    std::snprintf(text, sizeof text, "%.6f", score);
    r.text = text;
    r.tokens = item.tokens.size() + input.target.size();
    std::lock_guard lock(mutex_);
    ++records_;
    scored_ += logprobs.size();
    total_ += sum;
    return r;
  }

  const Params& params_;
  const Model& model_;
  const Tokenizer* source_tokenizer_;
  const Tokenizer* target_tokenizer_;
  std::unique_ptr<Seq2SeqRoute> route_;
  std::string target_field_;
  double length_penalty_;
  bool token_logprobs_;
  TokenId end_token_;
  mutable std::mutex mutex_;
  mutable std::uint64_t records_ = 0, scored_ = 0;
  mutable double total_ = 0;
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<Seq2SeqScoreTask>(pipeline, plugins);
}

const TaskRegistration registration({
    .spec =
        {.name = "seq2seq-score",
         .description =
             "score a given target for each source (CTranslate2 score_batch): an encoder-decoder "
             "model (no mask section) or one BERT-like model under the UniLM mask (mask: "
             "seq2seq): {id, tokens, pieces, length, logprob, score} with length = target "
             "tokens + the end token, logprob their summed log-probs and score = logprob / "
             "length^length_penalty; the summary has the corpus totals",
         .params = {{.name = "target_field",
                     .type = ParamType::string,
                     .default_value = "target",
                     .help = "JSON-lines / TSV field holding the target (text for the target "
                             "tokenizer, or an array of ids); absent or empty: only the end "
                             "token is scored"},
                    {.name = "length_penalty",
                     .type = ParamType::number,
                     .default_value = "1.0",
                     .help = "score = logprob / length^length_penalty, the length counting the end "
                             "token (1 = the mean token log-prob, CTranslate2's score_file; 0 = "
                             "the sum)",
                     .min = -10,
                     .max = 10},
                    {.name = "token_logprobs",
                     .type = ParamType::boolean,
                     .default_value = "true",
                     .help = "also output the log-probability of every target token and of the "
                             "end token"},
                    max_input_length_param()},
         .required_sections = {"model"},
         .optional_sections = {"tokenizer", "target_tokenizer", "mask"},
         .default_plugins = {},
         .model_kinds = {ModelKind::encoder_decoder, ModelKind::encoder_only},
         .held_masks = {"bidirectional"}},
    .create = create,
});

}  // namespace

}  // namespace masque
