// Task `classify`: a label for each record (or sentence pair) from a sequence-classification
// model, as Hugging Face's text-classification pipeline gives it. The model's logits are its
// labels' (a *ForSequenceClassification folder: BERT's pooler + classifier on [CLS], a
// decoder's `score` on the last token); the labels come from config.json's id2label, the
// function from its problem_type (HF's function_to_apply).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>

#include "masque/decoding.hpp"
#include "masque/error.hpp"
#include "tasks/common.hpp"
#include "tasks/labels.hpp"
#include "tasks/sequence_input.hpp"

namespace masque {

namespace {

enum class ScoreFunction : std::uint8_t { softmax, sigmoid, none };

struct LabelConfig {
  std::vector<std::string> names;
  std::string problem_type;  // config.json's, or ""
};

// The model folder's config.json; {} when the plugin has no folder and labels are given.
nlohmann::json read_model_config(const Pipeline& pipeline, bool needed) {
  const Params& model = pipeline.at("model").params;
  if (!model.has("path")) {
    if (!needed) return nlohmann::json::object();
    throw ConfigError(
        "classify: the model plugin has no `path` folder to read id2label from: "
        "name the labels with task.labels");
  }
  const std::filesystem::path file =
      std::filesystem::path(model.get_string("path")) / "config.json";
  std::ifstream in(file);
  if (!in) return nlohmann::json::object();  // the model plugin reports a missing folder
  try {
    nlohmann::json config = nlohmann::json::parse(in);
    if (!config.is_object()) throw ConfigError(file.string() + ": expected a JSON object");
    return config;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file.string() + ": not valid JSON: " + e.what());
  }
}

// task.labels, else config.json's id2label (labels.hpp); they must fit the model's head.
LabelConfig read_labels(const Pipeline& pipeline, std::int32_t num_labels) {
  LabelConfig labels;
  labels.names = pipeline.task_params.get_string_list("labels");
  const nlohmann::json config = read_model_config(pipeline, labels.names.empty());
  if (config.contains("problem_type") && config["problem_type"].is_string())
    labels.problem_type = config["problem_type"].get<std::string>();
  const char* from = "task.labels";
  if (labels.names.empty()) {
    labels.names = config_labels(config);
    from = config.contains("id2label") || config.contains("num_labels")
               ? "config.json's id2label (or num_labels)"
               : "config.json has no id2label or num_labels, so Hugging Face's default of 2 "
                 "labels";
  }
  if (labels.names.size() != static_cast<std::size_t>(num_labels))
    throw ConfigError(std::string(from) + ": " + std::to_string(labels.names.size()) +
                      " names for a model with " + std::to_string(num_labels) +
                      " labels (is the folder a *ForSequenceClassification one?)");
  return labels;
}

// HF TextClassificationPipeline: sigmoid for multi-label or a single label, none for
// regression, else softmax.
ScoreFunction score_function(const std::string& asked, const LabelConfig& labels) {
  if (asked == "softmax") return ScoreFunction::softmax;
  if (asked == "sigmoid") return ScoreFunction::sigmoid;
  if (asked == "none") return ScoreFunction::none;
  if (labels.problem_type == "multi_label_classification" || labels.names.size() == 1)
    return ScoreFunction::sigmoid;
  if (labels.problem_type == "regression") return ScoreFunction::none;
  return ScoreFunction::softmax;
}

std::vector<double> apply(ScoreFunction f, std::span<const float> logits) {
  std::vector<double> p(logits.begin(), logits.end());
  if (f == ScoreFunction::sigmoid)
    for (double& v : p) v = 1.0 / (1.0 + std::exp(-v));
  if (f == ScoreFunction::softmax) {
    const double lse = decoding::log_sum_exp(logits);
    for (double& v : p) v = std::exp(v - lse);
  }
  return p;
}

struct ClassifyInput {
  SequenceSpec spec;
  std::string gold;  // task.label_field's value, or ""
};

class ClassifyTask final : public Task {
 public:
  ClassifyTask(const Pipeline& pipeline, const Plugins& plugins)
      : params_(pipeline.task_params),
        model_(*plugins.model),
        tokenizer_(plugins.tokenizer.get()),
        mask_(sequence_mask(plugins)),
        labels_(read_labels(pipeline, model_.info().vocab_size)),
        function_(score_function(params_.get_string("function"), labels_)),
        top_k_(static_cast<std::size_t>(params_.get_int("top_k"))),
        threshold_(params_.get_number("threshold")),
        logits_(params_.get_bool("return_logits")),
        label_field_(params_.get_string("label_field")) {}

  void prepare(Item& item) const override {
    auto input = std::make_shared<ClassifyInput>();
    input->spec = sequence_input(item, tokenizer_, model_, params_);
    if (!label_field_.empty()) {
      const auto it = item.record.fields.find(label_field_);
      if (it == item.record.fields.end() || !it->is_string())
        throw RecordError("no string field '" + label_field_ + "' (task.label_field)");
      input->gold = it->get<std::string>();
    }
    item.data = input;
  }

  std::vector<Result> process(std::span<Item* const> items) const override {
    std::vector<SequenceSpec> specs;
    for (Item* item : items) specs.push_back(input(*item).spec);
    BuiltBatch built = build_batch(specs, mask_, std::max(model_.info().pad, 0), -1);
    Batch& b = built.batch;
    // HF's heads read one row per record: the first token (BERT's [CLS], under the pooler) or
    // the last one (decoders: the last non-pad token).
    const bool first = model_.info().kind == ModelKind::encoder_only;
    for (std::size_t i = 0; i < items.size(); ++i)
      b.output_rows.push_back(static_cast<std::int32_t>(i * static_cast<std::size_t>(b.length) +
                                                        (first ? 0 : specs[i].ids.size() - 1)));
    const ForwardResult out = model_.forward(b);
    std::vector<Result> results;
    std::uint64_t labeled = 0, correct = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      Result r = label(items[i]->record.id, tensor_row(out.logits, i));
      r.tokens = specs[i].ids.size();
      if (const std::string& gold = input(*items[i]).gold; !label_field_.empty()) {
        ++labeled;
        correct += r.text == gold;
      }
      results.push_back(std::move(r));
    }
    std::lock_guard lock(mutex_);
    records_ += items.size();
    labeled_ += labeled;
    correct_ += correct;
    return results;
  }

  nlohmann::ordered_json summary() const override {
    std::lock_guard lock(mutex_);
    nlohmann::ordered_json j;
    j["records"] = records_;
    if (!label_field_.empty()) {
      j["labeled"] = labeled_;
      j["correct"] = correct_;
      j["accuracy"] =
          labeled_ ? static_cast<double>(correct_) / static_cast<double>(labeled_) : 0.0;
    }
    return j;
  }
  nlohmann::ordered_json summary_state() const override {
    std::lock_guard lock(mutex_);
    return {{"records", records_}, {"labeled", labeled_}, {"correct", correct_}};
  }
  void merge_summary_state(const nlohmann::ordered_json& state) override {
    std::lock_guard lock(mutex_);
    records_ += state.value("records", std::uint64_t{0});
    labeled_ += state.value("labeled", std::uint64_t{0});
    correct_ += state.value("correct", std::uint64_t{0});
  }
  std::string summary_text() const override {
    if (label_field_.empty()) return "";
    const auto j = summary();
    char line[200];
    std::snprintf(line, sizeof line, "masque: classify: %llu labeled records, accuracy %.4f\n",
                  static_cast<unsigned long long>(j["labeled"].get<std::uint64_t>()),
                  j["accuracy"].get<double>());
    return line;
  }

  std::vector<std::string> tsv_columns() const override { return {"label", "score"}; }

 private:
  static const ClassifyInput& input(const Item& item) {
    return *static_cast<const ClassifyInput*>(item.data.get());
  }

  Result label(std::uint64_t id, std::span<const float> logits) const {
    const std::vector<double> p = apply(function_, logits);
    std::vector<std::size_t> order(p.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return p[a] > p[b]; });
    Result r;
    r.id = id;
    r.object["id"] = id;
    r.text = labels_.names[order.front()];
    r.object["label"] = r.text;
    r.object["score"] = p[order.front()];
    const std::size_t k = top_k_ == 0 ? order.size() : std::min(top_k_, order.size());
    nlohmann::ordered_json scores = nlohmann::ordered_json::object();
    for (std::size_t j = 0; j < k; ++j) scores[labels_.names[order[j]]] = p[order[j]];
    r.object["scores"] = std::move(scores);
    if (function_ == ScoreFunction::sigmoid && labels_.names.size() > 1) {
      auto chosen = nlohmann::ordered_json::array();
      for (std::size_t j : order)
        if (p[j] >= threshold_) chosen.push_back(labels_.names[j]);
      r.object["labels"] = std::move(chosen);
    }
    if (logits_) r.object["logits"] = std::vector<float>(logits.begin(), logits.end());
    return r;
  }

  const Params& params_;
  const Model& model_;
  const Tokenizer* tokenizer_;
  const MaskStrategy& mask_;
  LabelConfig labels_;
  ScoreFunction function_;
  std::size_t top_k_;
  double threshold_;
  bool logits_;
  std::string label_field_;
  mutable std::mutex mutex_;
  mutable std::uint64_t records_ = 0, labeled_ = 0, correct_ = 0;
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<ClassifyTask>(pipeline, plugins);
}

const TaskRegistration registration({
    .spec =
        {.name = "classify",
         .description =
             "a label per record or sentence pair from a Hugging Face sequence-classification "
             "folder (BertForSequenceClassification, GPT2/Llama/Qwen2ForSequenceClassification): "
             "{id, label, score, scores: {label: p}} (+ labels above the threshold when "
             "multi-label)",
         .params = {{.name = "top_k",
                     .type = ParamType::integer,
                     .default_value = "0",
                     .help = "how many labels `scores` lists, best first (0 = every label)",
                     .min = 0},
                    {.name = "function",
                     .type = ParamType::string,
                     .default_value = "auto",
                     .help = "what turns logits into scores (HF's function_to_apply); auto: "
                             "sigmoid when config.json's problem_type is "
                             "multi_label_classification or there is one label, none for "
                             "regression, else softmax",
                     .choices = "auto|softmax|sigmoid|none"},
                    {.name = "threshold",
                     .type = ParamType::number,
                     .default_value = "0.5",
                     .help = "with sigmoid scores: `labels` lists every label scoring at least "
                             "this",
                     .min = 0,
                     .max = 1},
                    {.name = "labels",
                     .type = ParamType::string_list,
                     .default_value = "[]",
                     .help = "the label names in logit order (empty: config.json's id2label, "
                             "else LABEL_0, LABEL_1, ...)"},
                    {.name = "return_logits",
                     .type = ParamType::boolean,
                     .default_value = "false",
                     .help = "also output the raw logits, in label order"},
                    {.name = "label_field",
                     .type = ParamType::string,
                     .default_value = "",
                     .help = "the TSV column / JSON field holding each record's true label: "
                             "the summary then reports the accuracy (empty: none)"},
                    add_special_param(),
                    pair_field_param()},
         .required_sections = {"model"},
         .optional_sections = {"tokenizer", "mask"},
         .default_plugins = {},
         .model_kinds = {ModelKind::decoder_only, ModelKind::encoder_only},
         .held_masks = {"bidirectional", "causal"}},
    .create = create,
});

}  // namespace

}  // namespace masque
