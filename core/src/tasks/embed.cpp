// Task `embed`: one vector per record from any encoder-only or decoder-only model's final hidden
// states (after its final norm): the first token's, the mean over the record's tokens, or the
// last token's, optionally through a sentence-transformers Dense module, optionally L2-normalised;
// as JSON lines, or as the rows of a .npy matrix in input order (row r = record r) for numpy and
// friends.
#include <algorithm>
#include <filesystem>
#include <optional>

#include "masque/error.hpp"
#include "tasks/common.hpp"
#include "tasks/dense_module.hpp"
#include "tasks/npy_writer.hpp"
#include "tasks/pooling.hpp"
#include "tasks/sequence_input.hpp"

namespace masque {

namespace {

struct EmbedInput {
  SequenceSpec spec;
};

// task.npy is written by one process, and never over one of the run's own files.
void check_npy(const std::string& path, const RunScope& scope) {
  if (scope.shards > 1)
    throw ConfigError("task.npy: one process writes the .npy, and this run is split over " +
                      std::to_string(scope.shards) +
                      " (--shard or mpirun): run it whole, or leave task.npy out and read the "
                      "vectors from the JSON lines");
  namespace fs = std::filesystem;
  for (const auto& [option, file] : scope.files) {
    std::error_code ec;
    // One file: the same inode (through links too), or, before the run makes them, one path.
    const bool same = file != "-" && (fs::equivalent(path, file, ec) ||
                                      fs::weakly_canonical(fs::absolute(path, ec), ec) ==
                                          fs::weakly_canonical(fs::absolute(file, ec), ec));
    if (same) throw ConfigError("task.npy " + path + ": is the run's " + option + " file");
  }
}

void check_run(const Pipeline& pipeline, const RunScope& scope) {
  if (const std::string path = pipeline.task_params.get_string("npy"); !path.empty())
    check_npy(path, scope);
}

class EmbedTask final : public Task {
 public:
  EmbedTask(const Pipeline& pipeline, const Plugins& plugins)
      : params_(pipeline.task_params),
        model_(*plugins.model),
        tokenizer_(plugins.tokenizer.get()),
        mask_(sequence_mask(plugins)),
        pooling_(parse_pooling(params_.get_string("pooling"), model_.info().kind)),
        normalize_(params_.get_bool("normalize")) {
    if (const std::string dir = params_.get_string("dense"); !dir.empty())
      dense_.emplace(dir, model_.info().hidden_size);
    prompt_ = params_.get_string("prompt");
    if (!prompt_.empty() && !params_.get_bool("include_prompt")) {
      if (!tokenizer_)
        throw ConfigError(
            "task.include_prompt: false needs a tokenizer to count the prompt's tokens");
      // As sentence-transformers counts it: the prompt tokenized alone, less its last token
      // (the end special), so a leading [CLS] / BOS is left out of the pooling too.
      const auto n = tokenizer_->encode(prompt_, params_.get_bool("add_special")).ids.size();
      prompt_tokens_ = n > 0 ? static_cast<std::int32_t>(n - 1) : 0;
    }
  }

  // The record's vector: pooled, through the Dense module if any, then normalised.
  std::vector<float> vector(const Tensor& hidden, std::size_t first, std::size_t rows) const {
    if (!dense_) return pool(hidden, first, rows, normalize_, pooling_);
    std::vector<float> v = dense_->apply(pool(hidden, first, rows, false, pooling_));
    if (normalize_) normalize_l2(v);
    return v;
  }

  void begin_run(const RunScope& scope) const override {
    const std::string path = params_.get_string("npy");
    if (path.empty()) return;
    check_npy(path, scope);
    const std::int64_t width = dense_ ? dense_->outputs() : model_.info().hidden_size;
    npy_.emplace(path, static_cast<std::size_t>(width), scope.first_record);
  }

  void prepare(Item& item) const override {
    auto input = std::make_shared<EmbedInput>();
    try {
      if (!prompt_.empty()) {
        if (item.record.ids)
          throw RecordError("task.prompt is put before a record's text, and this record is ids");
        item.record.text = prompt_ + item.record.text;
      }
      input->spec = sequence_input(item, tokenizer_, model_, params_);
    } catch (const RecordError&) {
      if (npy_) npy_->write_missing(item.record.id);  // its row stays NaN
      throw;
    }
    item.data = input;
  }

  std::vector<Result> process(std::span<Item* const> items) const override {
    std::vector<SequenceSpec> specs;
    for (Item* item : items) specs.push_back(static_cast<EmbedInput*>(item->data.get())->spec);
    BuiltBatch built = build_batch(specs, mask_, std::max(model_.info().pad, 0), -1);
    Batch& b = built.batch;
    b.want_logits = false;
    b.want_hidden = true;
    std::vector<std::size_t> first_row;
    for (std::size_t i = 0; i < items.size(); ++i) {
      first_row.push_back(b.output_rows.size());
      const auto n = static_cast<std::int32_t>(specs[i].ids.size());
      for (std::int32_t t : pooled_rows(pooling_, n, prompt_tokens_))
        b.output_rows.push_back(static_cast<std::int32_t>(i * static_cast<std::size_t>(b.length)) +
                                t);
    }
    first_row.push_back(b.output_rows.size());
    std::vector<Result> results;
    try {
      const ForwardResult out = model_.forward(b);
      for (std::size_t i = 0; i < items.size(); ++i) {
        const std::uint64_t id = items[i]->record.id;
        const std::vector<float> v =
            vector(out.hidden, first_row[i], first_row[i + 1] - first_row[i]);
        Result r;
        r.id = id;
        r.object["id"] = id;
        r.tokens = specs[i].ids.size();
        r.object["tokens"] = r.tokens;
        if (npy_)
          npy_->write_row(id, v);
        else
          r.object["embedding"] = v;
        results.push_back(std::move(r));
      }
    } catch (const RecordError&) {
      for (Item* item : items)
        if (npy_) npy_->write_missing(item->record.id);
      throw;
    }
    return results;
  }

  std::vector<std::string> tsv_columns() const override { return {"embedding"}; }

 private:
  const Params& params_;
  const Model& model_;
  const Tokenizer* tokenizer_;
  const MaskStrategy& mask_;
  Pooling pooling_;
  bool normalize_;
  std::optional<DenseModule> dense_;
  std::string prompt_;
  std::int32_t prompt_tokens_ = 0;  // left out of mean / max pooling (include_prompt: false)
  mutable std::optional<NpyWriter> npy_;
};

std::unique_ptr<Task> create(const Pipeline& pipeline, const Plugins& plugins) {
  return std::make_unique<EmbedTask>(pipeline, plugins);
}

const TaskRegistration registration({
    .spec =
        {.name = "embed",
         .description =
             "a vector per record from the model's final hidden states (first token, mean or "
             "maximum over the record's tokens, or last token; optionally L2-normalised), as JSON "
             "lines {id, tokens, embedding} or as the rows of a .npy matrix in input order",
         .params = {{.name = "pooling",
                     .type = ParamType::string,
                     .default_value = "auto",
                     .help = "which hidden states make the vector: cls (the first token's), "
                             "mean (over the record's tokens, pads excluded), max (their "
                             "element-wise maximum), last (the last token's); auto: cls for "
                             "encoder-only, last for decoder-only models (--model DIR with a "
                             "sentence-transformers folder: its 1_Pooling)",
                     .choices = "auto|cls|mean|max|last"},
                    {.name = "dense",
                     .type = ParamType::path,
                     .default_value = "",
                     .help = "a sentence-transformers Dense module folder (config.json, "
                             "model.safetensors with linear.weight and linear.bias): the pooled "
                             "vector becomes act(W x + b) before any normalize (--model DIR with "
                             "a sentence-transformers folder: its Dense module)",
                     .flags = kParamMayBeMissing},
                    {.name = "prompt",
                     .type = ParamType::string,
                     .default_value = "",
                     .help = "text put before every text record (sentence-transformers' "
                             "prompts, e.g. 'query: '; --model DIR with a sentence-transformers "
                             "folder: its default_prompt_name's prompt)",
                     .flags = kParamMayBeMissing},
                    {.name = "include_prompt",
                     .type = ParamType::boolean,
                     .default_value = "true",
                     .help = "false: mean and max pooling leave out the prompt's tokens (and a "
                             "leading [CLS] / BOS), as sentence-transformers' Pooling with "
                             "include_prompt: false does"},
                    {.name = "normalize",
                     .type = ParamType::boolean,
                     .default_value = "false",
                     .help = "divide each vector by its L2 norm (cosine similarity becomes "
                             "a dot product)"},
                    {.name = "npy",
                     .type = ParamType::path,
                     .default_value = "",
                     .help =
                         "write the vectors to this .npy file (NPY 1.0, '<f4', shape "
                         "(records, hidden_size), row r = record r; a failed record's "
                         "row is NaN) instead of into the JSON lines; --resume keeps its rows; one "
                         "process only (not with --shard or mpirun)",
                     .flags = kParamMayBeMissing},
                    add_special_param(),
                    pair_field_param()},
         .required_sections = {"model"},
         .optional_sections = {"tokenizer", "mask"},
         .default_plugins = {},
         .model_kinds = {ModelKind::decoder_only, ModelKind::encoder_only},
         .held_masks = {"bidirectional", "causal"}},
    .create = create,
    .check_run = check_run,
});

}  // namespace

}  // namespace masque
