// Pipeline files: a task plus one section per plugin (`plugin:` and its parameters),
// validated against the parameters each plugin declares before anything heavy loads.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "masque/model.hpp"
#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "registry.hpp"

namespace masque {

// What a task declares: its own parameters and the plugin sections it uses.
struct TaskSpec {
  std::string name;
  std::string description;
  std::vector<ParamSpec> params;
  std::vector<std::string> required_sections;
  std::vector<std::string> optional_sections;
  std::map<std::string, std::string> default_plugins;  // section -> plugin when not given
  // The model kinds the task runs (empty = any): another kind is a ConfigError at start.
  std::vector<ModelKind> model_kinds{};
  // Mask strategies the task holds besides the pipeline's `mask` (plugin names: the attention
  // rule the task computes, e.g. context every token sees), created by the plugin host like any
  // pipeline-named plugin, with their default parameters.
  std::vector<std::string> held_masks{};
};

// The name of a model kind (decoder-only, encoder-only, encoder-decoder).
const char* model_kind_name(ModelKind kind);

// The plugin each section of `task` takes when the pipeline names none: the task's own
// default_plugins and, for a section the task requires, the plugin that declares itself the
// default of the section's kind (DecoderTraits::is_default).
std::map<std::string, std::string> section_defaults(const TaskSpec& task, const Registry& registry);

// The pipeline sections and the plugin kind each one holds.
struct SectionKind {
  const char* section;
  PluginKind kind;
};
const std::vector<SectionKind>& pipeline_sections();

struct PluginConfig {
  std::string section;
  const PluginEntry* entry = nullptr;
  Params params;
};

struct Pipeline {
  std::filesystem::path file;  // empty for a pipeline built from the command line
  std::string task;            // empty when no task was asked for (masque tokenize)
  Params task_params;
  Params run_params;  // the `run:` section (run/settings.hpp), defaults filled in
  std::map<std::string, PluginConfig> plugins;  // by section
  // What the loader read differently from how it was written (a run setting given under
  // `task:`); --dump-config prints them on stderr (the dump itself stays a pipeline that loads
  // back to the same dump).
  std::vector<std::string> notes;

  bool has(const std::string& section) const { return plugins.count(section) != 0; }
  const PluginConfig& at(const std::string& section) const;
  // The fully resolved pipeline as YAML (every parameter, defaults included, absolute paths).
  std::string dump() const;
};

struct PipelineSource {
  std::string text;                // YAML
  std::string name;                // for messages: the file path, or "<command line>"
  std::filesystem::path base_dir;  // relative paths in the text resolve against it
};

struct LoadOptions {
  std::vector<std::string> sets;  // "section.key=value", applied in order
  bool require_task = true;
  bool allow_plugin_files = false;  // a `plugin:` naming a library file (opt-in)
};

// Loads and validates. Throws ConfigError listing every problem found, each with
// file:line:column (or the --set that caused it), the key path and what was expected.
Pipeline load_pipeline(const PipelineSource& source, const LoadOptions& options, Registry& registry,
                       const std::vector<TaskSpec>& tasks);
Pipeline load_pipeline_file(const std::filesystem::path& file, const LoadOptions& options,
                            Registry& registry, const std::vector<TaskSpec>& tasks);

// Parameter values from text: used for defaults, pipeline values and --set values alike.
// Throws ConfigError with `what` describing the expectation.
ParamValue parse_param_value(const ParamSpec& spec, const std::string& yaml_text);
// A parameter's range as `masque plugins` and the errors show it: "[1, 2147483647]" (integers
// in full), ">= 0", "<= 1", or "" for none.
std::string param_range_text(const ParamSpec& spec);

// Fills every declared parameter with its default (plugins created outside a pipeline).
Params default_params(const PluginDescriptor& descriptor);
Params default_params(const ParamSpec* specs, std::size_t count);

}  // namespace masque
