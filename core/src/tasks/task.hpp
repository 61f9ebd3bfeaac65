// Tasks: what `masque run` does with each record (lm-score, lm-generate, seq2seq, ...).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/output.hpp"
#include "io/records.hpp"
#include "masque/constraint.hpp"
#include "masque/decoder.hpp"
#include "masque/mask.hpp"
#include "masque/model.hpp"
#include "masque/tokenizer.hpp"
#include "pipeline.hpp"

namespace masque {

// The plugin objects a pipeline names, created once per run and shared by all workers, and the
// mask strategies the task holds besides the pipeline's (TaskSpec::held_masks).
struct Plugins {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Tokenizer> target_tokenizer;
  std::unique_ptr<MaskStrategy> mask;
  std::unique_ptr<Decoder> decoder;
  std::unique_ptr<Constraint> constraint;  // what generated outputs must match, or null
  std::map<std::string, std::unique_ptr<MaskStrategy>> held_masks;  // by plugin name

  // A held strategy; RuntimeError when the task's spec did not declare it.
  const MaskStrategy& held_mask(const std::string& name) const;
};

Plugins create_plugins(const Pipeline& pipeline, const Registry& registry);

// One record on its way through a task.
struct Item {
  Record record;
  std::vector<TokenId> tokens;         // prepared input tokens
  std::vector<std::int32_t> type_ids;  // token type / segment of each token, or empty
  std::size_t cost = 0;                // padded-length measure used for batching
  std::shared_ptr<void> data;          // task-specific prepared state
};

// What a run tells its task before the first record. A task that writes files of its own
// (embed's task.npy) opens them in begin_run, not when it is created: a run creates more than
// one task object (one to merge the figures of its parts).
struct RunScope {
  std::uint64_t first_record = 0;  // the first record id this run writes: > 0 resumes a run
  int shards = 1;                  // processes sharing the corpus (--shard K/N, mpirun)
  // The run's own files, as (option, path): -i, -o, --summary ("-": a standard stream).
  std::vector<std::pair<std::string, std::string>> files;
};

// Contract: prepare() and process() are const and run concurrently on different items and
// batches. A RecordError thrown by prepare() fails that record; process() returns exactly one
// Result per item, in order, using error_result() for the records it could not serve.
class Task {
 public:
  virtual ~Task();
  // Called once per run_corpus, before any record; ConfigError stops the run (exit 2).
  virtual void begin_run(const RunScope& /*scope*/) const {}
  virtual void prepare(Item& item) const = 0;
  virtual std::vector<Result> process(std::span<Item* const> batch) const = 0;
  // Corpus-level figures (perplexity, ...), merged over all batches.
  virtual nlohmann::ordered_json summary() const { return nlohmann::ordered_json::object(); }
  // The additive state behind summary(), to merge shards of a corpus run (masque run under
  // mpirun, --resume): merge_summary_state(other.summary_state()) makes this task's summary
  // that of both record sets, whatever the order of the merges.
  virtual nlohmann::ordered_json summary_state() const { return nlohmann::ordered_json::object(); }
  virtual void merge_summary_state(const nlohmann::ordered_json& /*state*/) {}
  // Human-readable summary line(s) for stderr, or "".
  virtual std::string summary_text() const { return ""; }
  // Continuous batching (run.batching): process() takes a whole group of records and keeps at
  // most max_batch_size of them decoding at a time (run/settings.hpp).
  virtual bool batches_continuously() const { return false; }
  // Fields of the JSON object that --format tsv writes after the id.
  virtual std::vector<std::string> tsv_columns() const { return {"text"}; }
};

struct TaskEntry {
  TaskSpec spec;
  std::unique_ptr<Task> (*create)(const Pipeline& pipeline, const Plugins& plugins);
  // What begin_run would refuse that the pipeline alone shows (ConfigError), checked before a
  // run makes any file or loads a model; null: nothing.
  void (*check_run)(const Pipeline& pipeline, const RunScope& scope) = nullptr;
};

// Every task masque knows, with its parameters (the common run parameters included).
const std::vector<TaskEntry>& task_catalog();
std::vector<TaskSpec> task_specs();
std::unique_ptr<Task> create_task(const Pipeline& pipeline, const Plugins& plugins);
// The pipeline's task's check_run, if it has one.
void check_task_run(const Pipeline& pipeline, const RunScope& scope);

// Parameters every task has (the record length limit), appended to each TaskSpec. Batching and
// input limits are run settings (run/settings.hpp).
const std::vector<ParamSpec>& common_task_params();

// ConfigError unless the model's kind is one of `kinds`: "<who> runs <kinds> models; the
// model '<architecture>' is <kind>" and the hint.
void require_model_kind(const Model& model, std::span<const ModelKind> kinds,
                        const std::string& who, const std::string& hint = "");

// Registration helper used by each task's file.
struct TaskRegistration {
  explicit TaskRegistration(TaskEntry entry);
};

}  // namespace masque
