#include "tasks/task.hpp"

#include <algorithm>
#include <cstdio>

#include "masque/error.hpp"
#include "tasks/folder_tokenizer.hpp"

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
      {.name = "max_record_tokens",
       .type = ParamType::integer,
       .default_value = "0",
       .help = "records with more tokens become error records (0 = the model's maximum)",
       .min = 0},
  };
  return params;
}

void require_model_kind(const Model& model, std::span<const ModelKind> kinds,
                        const std::string& who, const std::string& hint) {
  const ModelInfo& info = model.info();
  if (kinds.empty() || std::find(kinds.begin(), kinds.end(), info.kind) != kinds.end()) return;
  std::string names;
  for (std::size_t i = 0; i < kinds.size(); ++i)
    names += std::string(i == 0                  ? ""
                         : i + 1 == kinds.size() ? " or "
                                                 : ", ") +
             model_kind_name(kinds[i]);
  throw ConfigError(who + " runs " + names + " models; the model '" + info.architecture + "' is " +
                    model_kind_name(info.kind) + (hint.empty() ? "" : ": " + hint));
}

const MaskStrategy& Plugins::held_mask(const std::string& name) const {
  auto it = held_masks.find(name);
  if (it == held_masks.end())
    throw RuntimeError("the task holds no '" + name + "' mask strategy (TaskSpec::held_masks)");
  return *it->second;
}

namespace {
const TaskEntry* find_task(const std::string& name) {
  for (const auto& e : task_catalog())
    if (e.spec.name == name) return &e;
  return nullptr;
}
}  // namespace

std::unique_ptr<Task> create_task(const Pipeline& pipeline, const Plugins& plugins) {
  const TaskEntry* entry = find_task(pipeline.task);
  if (!entry) throw ConfigError("unknown task '" + pipeline.task + "'");
  if (plugins.model)
    require_model_kind(*plugins.model, entry->spec.model_kinds, "the task '" + pipeline.task + "'");
  return entry->create(pipeline, plugins);
}

void check_task_run(const Pipeline& pipeline, const RunScope& scope) {
  const TaskEntry* entry = find_task(pipeline.task);
  if (entry && entry->check_run) entry->check_run(pipeline, scope);
}

template <class T>
std::unique_ptr<T> create_as(const Pipeline& pipeline, const Registry& registry,
                             const char* section) {
  if (!pipeline.has(section)) return nullptr;
  const PluginConfig& config = pipeline.at(section);
  std::unique_ptr<Plugin> plugin;
  try {
    plugin = registry.create(*config.entry, config.params);
  } catch (const ConfigError& e) {  // a plugin's own check of its parameters: say whose
    throw ConfigError(std::string(section) + " '" + config.entry->descriptor->name +
                      "': " + e.what());
  }
  return std::unique_ptr<T>(static_cast<T*>(plugin.release()));
}

Plugins create_plugins(const Pipeline& pipeline, const Registry& registry) {
  Plugins p;
  // Cheap plugins first, so configuration mistakes show before a model loads.
  p.tokenizer = create_as<Tokenizer>(pipeline, registry, "tokenizer");
  p.target_tokenizer = create_as<Tokenizer>(pipeline, registry, "target_tokenizer");
  p.mask = create_as<MaskStrategy>(pipeline, registry, "mask");
  p.decoder = create_as<Decoder>(pipeline, registry, "decoder");
  p.constraint = create_as<Constraint>(pipeline, registry, "constraint");
  for (const auto& [section, tokenizer] :
       {std::pair{"tokenizer", p.tokenizer.get()}, {"target_tokenizer", p.target_tokenizer.get()}})
    if (tokenizer)
      if (auto mismatch = folder_tokenizer_mismatch(pipeline, registry, section, *tokenizer))
        std::fprintf(stderr, "masque: warning: %s\n", mismatch->c_str());
  if (const TaskEntry* entry = find_task(pipeline.task))
    for (const std::string& name : entry->spec.held_masks) {
      const PluginEntry& mask = registry.find(PluginKind::mask, name);
      std::unique_ptr<Plugin> plugin = registry.create(mask, default_params(*mask.descriptor));
      p.held_masks[name].reset(static_cast<MaskStrategy*>(plugin.release()));
    }
  p.model = create_as<Model>(pipeline, registry, "model");
  return p;
}

}  // namespace masque
