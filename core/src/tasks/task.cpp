#include "tasks/task.hpp"

#include "masque/error.hpp"

namespace masque {

Task::~Task() = default;

namespace {
std::vector<TaskEntry>& mutable_catalog() {
  static std::vector<TaskEntry> catalog;
  return catalog;
}
}  // namespace

TaskRegistration::TaskRegistration(TaskEntry entry) {
  for (const auto& p : common_task_params()) entry.spec.params.push_back(p);
  mutable_catalog().push_back(std::move(entry));
}

const std::vector<TaskEntry>& task_catalog() {
  return mutable_catalog();
}

std::vector<TaskSpec> task_specs() {
  std::vector<TaskSpec> specs;
  for (const auto& e : task_catalog()) specs.push_back(e.spec);
  return specs;
}

const std::vector<ParamSpec>& common_task_params() {
  static const std::vector<ParamSpec> params = {
      {.name = "max_batch_size",
       .type = ParamType::integer,
       .default_value = "32",
       .help = "most records in one batch",
       .min = 1,
       .max = 65536},
      {.name = "max_batch_tokens",
       .type = ParamType::integer,
       .default_value = "16384",
       .help = "most tokens in one batch, counted with padding (records x longest record)",
       .min = 1},
      {.name = "read_ahead",
       .type = ParamType::integer,
       .default_value = "0",
       .help = "records read ahead and sorted by length before batching (0 = 16 x max_batch_size); "
               "bounds memory, output stays in input order",
       .min = 0},
      {.name = "invalid_utf8",
       .type = ParamType::string,
       .default_value = "error",
       .help = "a record with invalid UTF-8: error (an error record in its place) or replace "
               "(invalid bytes become U+FFFD)",
       .choices = "error|replace"},
      {.name = "max_record_bytes",
       .type = ParamType::integer,
       .default_value = "16777216",
       .help = "longer input records become error records (their bytes are not kept in memory)",
       .min = 1},
      {.name = "max_record_tokens",
       .type = ParamType::integer,
       .default_value = "0",
       .help = "records with more tokens become error records (0 = the model's maximum)",
       .min = 0},
  };
  return params;
}

std::unique_ptr<Task> create_task(const Pipeline& pipeline, const Plugins& plugins) {
  for (const auto& e : task_catalog())
    if (e.spec.name == pipeline.task) return e.create(pipeline, plugins);
  throw ConfigError("unknown task '" + pipeline.task + "'");
}

template <class T>
std::unique_ptr<T> create_as(const Pipeline& pipeline, const Registry& registry,
                             const char* section) {
  if (!pipeline.has(section)) return nullptr;
  const PluginConfig& config = pipeline.at(section);
  std::unique_ptr<Plugin> plugin = registry.create(*config.entry, config.params);
  return std::unique_ptr<T>(static_cast<T*>(plugin.release()));
}

Plugins create_plugins(const Pipeline& pipeline, const Registry& registry) {
  Plugins p;
  // Cheap plugins first, so configuration mistakes show before a model loads.
  p.tokenizer = create_as<Tokenizer>(pipeline, registry, "tokenizer");
  p.target_tokenizer = create_as<Tokenizer>(pipeline, registry, "target_tokenizer");
  p.mask = create_as<MaskStrategy>(pipeline, registry, "mask");
  p.decoder = create_as<Decoder>(pipeline, registry, "decoder");
  p.model = create_as<Model>(pipeline, registry, "model");
  return p;
}

}  // namespace masque
