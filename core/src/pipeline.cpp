#include "pipeline.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "io/bounded_yaml.hpp"
#include "io/read_file.hpp"
#include "masque/error.hpp"
#include "run/settings.hpp"
#include "tokenizer_files.hpp"

namespace masque {

namespace fs = std::filesystem;

const std::vector<SectionKind>& pipeline_sections() {
  static const std::vector<SectionKind> sections = {
      {"model", PluginKind::model},
      {"tokenizer", PluginKind::tokenizer},
      {"target_tokenizer", PluginKind::tokenizer},
      {"mask", PluginKind::mask},
      {"decoder", PluginKind::decoder},
      {"constraint", PluginKind::constraint},
  };
  return sections;
}

const char* model_kind_name(ModelKind kind) {
  // In ModelKind's order.
  static constexpr const char* kNames[] = {"decoder-only", "encoder-only", "encoder-decoder"};
  const auto i = static_cast<std::size_t>(kind);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

const PluginConfig& Pipeline::at(const std::string& section) const {
  auto it = plugins.find(section);
  if (it == plugins.end()) throw ConfigError("the pipeline has no '" + section + "' section");
  return it->second;
}

namespace {

// A value as written, with where it came from.
struct RawValue {
  YAML::Node node;
  std::string where;       // "file:line:col" or "--set a.b=c"
  fs::path base_dir;       // for relative paths
  bool droppable = false;  // set before a --set switched the section's plugin
  std::string shown{};     // the key path as written, when read under another section
};

struct RawSection {
  std::string where;               // where the section starts
  std::optional<RawValue> plugin;  // plugin name (task name for the task section)
  std::vector<std::pair<std::string, RawValue>> keys;

  RawValue* find(const std::string& key) {
    for (auto& [k, v] : keys)
      if (k == key) return &v;
    return nullptr;
  }
};

std::string mark_text(const std::string& name, const YAML::Mark& mark) {
  return io::yaml_mark_text(name, mark);
}

std::string node_text(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  return "a mapping";
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string suggestion(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_d = 3;
  for (const auto& k : known) {
    std::size_t d = edit_distance(key, k);
    if (d < best_d) best_d = d, best = k;
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// ${VAR} -> value of the environment variable; an unset variable is an error.
std::string expand_env(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '$' && i + 1 < text.size() && text[i + 1] == '{') {
      auto close = text.find('}', i + 2);
      if (close == std::string::npos) throw ConfigError("unterminated ${...} in '" + text + "'");
      std::string name = text.substr(i + 2, close - i - 2);
      const char* value = std::getenv(name.c_str());
      if (!value) throw ConfigError("environment variable " + name + " is not set");
      out += value;
      i = close;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::vector<std::string> split_choices(const char* choices) {
  std::vector<std::string> out;
  std::stringstream ss(choices);
  std::string item;
  while (std::getline(ss, item, '|')) out.push_back(item);
  return out;
}

std::optional<std::int64_t> parse_int(const std::string& s) {
  std::int64_t v = 0;
  const char* b = s.data();
  const char* e = b + s.size();
  if (b != e && *b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || b == e) return std::nullopt;
  return v;
}

std::optional<double> parse_double(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string scalar(const YAML::Node& node) {
  return expand_env(node.Scalar());
}

// " in [1, 8]", " >= 0", or "".
std::string range_suffix(const ParamSpec& spec) {
  const std::string range = param_range_text(spec);
  if (range.empty()) return "";
  return (range[0] == '[' ? " in " : " ") + range;
}

void check_range(const ParamSpec& spec, double v, const std::string& shown) {
  if (v < spec.min || v > spec.max)
    throw ConfigError(std::string("expected ") +
                      (spec.type == ParamType::integer ? "an integer" : "a number") +
                      range_suffix(spec) + ", got " + shown);
}

// Converts a YAML node to the declared type. Throws ConfigError("expected ..., got ...").
ParamValue convert(const ParamSpec& spec, const YAML::Node& node) {
  const bool null = !node.IsDefined() || node.IsNull();
  switch (spec.type) {
    case ParamType::boolean: {
      if (!null && node.IsScalar()) {
        std::string s = scalar(node);
        if (s == "true" || s == "True" || s == "yes" || s == "on") return true;
        if (s == "false" || s == "False" || s == "no" || s == "off") return false;
      }
      throw ConfigError("expected true or false, got " + node_text(node));
    }
    case ParamType::integer: {
      if (!null && node.IsScalar()) {
        std::string s = scalar(node);
        if (auto v = parse_int(s)) {
          check_range(spec, static_cast<double>(*v), s);
          return *v;
        }
      }
      throw ConfigError("expected an integer" + range_suffix(spec) + ", got " + node_text(node));
    }
    case ParamType::number: {
      if (!null && node.IsScalar()) {
        std::string s = scalar(node);
        if (auto v = parse_double(s)) {
          check_range(spec, *v, s);
          return *v;
        }
      }
      throw ConfigError("expected a number" + range_suffix(spec) + ", got " + node_text(node));
    }
    case ParamType::string:
    case ParamType::path: {
      if (!null && !node.IsScalar())
        throw ConfigError(std::string("expected a ") +
                          (spec.type == ParamType::path ? "path" : "string") + ", got " +
                          node_text(node));
      // Nothing is the empty string, which must then be one of the choices like any value.
      std::string s = null ? std::string() : scalar(node);
      if (spec.type == ParamType::string && spec.choices) {
        auto choices = split_choices(spec.choices);
        if (std::find(choices.begin(), choices.end(), s) == choices.end())
          throw ConfigError("expected one of " + join(choices) + ", got '" + s + "'");
      }
      return s;
    }
    case ParamType::int_list: {
      std::vector<std::int64_t> out;
      auto add = [&](const std::string& item) {
        auto v = parse_int(item);
        if (!v) throw ConfigError("expected a list of integers, got '" + item + "' in it");
        check_range(spec, static_cast<double>(*v), item);
        out.push_back(*v);
      };
      if (null) return out;
      if (node.IsSequence()) {
        for (const auto& item : node) {
          if (!item.IsScalar())
            throw ConfigError("expected a list of integers, got " + node_text(item) + " in it");
          add(scalar(item));
        }
        return out;
      }
      if (node.IsScalar()) {  // "1,2,3" or "1"
        std::stringstream ss(scalar(node));
        std::string item;
        while (std::getline(ss, item, ',')) {
          item.erase(0, item.find_first_not_of(' '));
          item.erase(item.find_last_not_of(' ') + 1);
          if (!item.empty()) add(item);
        }
        return out;
      }
      throw ConfigError("expected a list of integers, got " + node_text(node));
    }
    case ParamType::string_list: {
      std::vector<std::string> out;
      if (null) return out;
      if (node.IsSequence()) {
        for (const auto& item : node) {
          if (!item.IsScalar())
            throw ConfigError("expected a list of strings, got " + node_text(item) + " in it");
          out.push_back(scalar(item));
        }
        return out;
      }
      if (node.IsScalar()) {
        std::string s = scalar(node);
        if (!s.empty()) out.push_back(s);
        return out;
      }
      throw ConfigError("expected a list of strings, got " + node_text(node));
    }
  }
  throw ConfigError("unknown parameter type");
}

YAML::Node load_yaml(const std::string& text, const std::string& where) {
  // A second document (after ---) would be dropped without a word.
  const io::YamlDocuments documents = io::load_bounded_yaml(text, where);
  if (documents.count > 1)
    throw ConfigError(where + ": " + std::to_string(documents.count) +
                      " YAML documents (separated by ---); a pipeline is one");
  return documents.first;
}

const SectionKind* find_section_kind(const std::string& name) {
  for (const auto& s : pipeline_sections())
    if (name == s.section) return &s;
  return nullptr;
}

// Sections that hold settings rather than a plugin.
bool is_settings_section(const std::string& name) {
  return name == "task" || name == "run";
}

// The key that names the section's plugin (the task's name); none for `run:`.
const char* plugin_key(const std::string& section) {
  return section == "task" ? "name" : section == "run" ? "" : "plugin";
}

std::vector<std::string> section_names() {
  std::vector<std::string> names{"task", "run"};
  for (const auto& s : pipeline_sections()) names.push_back(s.section);
  return names;
}

bool looks_like_file(const std::string& plugin) {
  return plugin.find('/') != std::string::npos ||
         (plugin.size() > 3 && plugin.compare(plugin.size() - 3, 3, ".so") == 0);
}

class Loader {
 public:
  Loader(const PipelineSource& source, const LoadOptions& options, Registry& registry,
         const std::vector<TaskSpec>& tasks)
      : source_(source), options_(options), registry_(registry), tasks_(tasks) {}

  Pipeline run() {
    read_file();
    for (const auto& set : options_.sets) apply_set(set);
    Pipeline pipeline;
    pipeline.file = source_.name == "<command line>" ? fs::path() : fs::path(source_.name);
    const TaskSpec* task = validate_task(pipeline);
    validate_run(pipeline);
    add_default_sections(task);
    for (auto& [name, section] : sections_) validate_section(name, section, pipeline);
    if (!errors_.empty()) throw ConfigError(join(errors_, "\n"));
    return pipeline;
  }

  std::vector<std::string> warnings;

 private:
  void error(const std::string& message) { errors_.push_back(message); }

  void read_file() {
    YAML::Node root = load_yaml(source_.text, source_.name);
    if (!root.IsDefined() || root.IsNull()) {
      if (options_.require_task) throw ConfigError(source_.name + ": the pipeline is empty");
      return;
    }
    if (!root.IsMap())
      throw ConfigError(mark_text(source_.name, root.Mark()) +
                        ": a pipeline is a mapping of sections (task, model, tokenizer, ...)");
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string key = it->first.Scalar();
      const std::string where = mark_text(source_.name, it->first.Mark());
      if (!is_settings_section(key) && !find_section_kind(key)) {
        error(where + ": unknown section '" + key + "'" + suggestion(key, section_names()) +
              "; known sections: " + join(section_names()));
        continue;
      }
      read_section(key, it->second, where);
    }
  }

  void read_section(const std::string& name, const YAML::Node& node, const std::string& where) {
    RawSection& section = sections_[name];
    section.where = where;
    const char* name_key = plugin_key(name);
    if (name == "run" && !node.IsMap()) {
      error(where + ": run: expected a mapping of run settings (max_batch_size: 8, ...), got " +
            node_text(node));
      return;
    }
    if (node.IsScalar()) {  // `task: lm-score`, `decoder: greedy`
      section.plugin = RawValue{node, mark_text(source_.name, node.Mark()), source_.base_dir};
      return;
    }
    if (!node.IsMap()) {
      error(where + ": " + name + ": expected a mapping with '" + name_key +
            ":' and parameters, got " + node_text(node));
      return;
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string key = it->first.Scalar();
      RawValue value{it->second, mark_text(source_.name, it->first.Mark()), source_.base_dir};
      if (key == name_key)
        section.plugin = value;
      else if (section.find(key))
        error(value.where + ": " + name + "." + key + ": given twice");
      else
        section.keys.emplace_back(key, value);
    }
  }

  void apply_set(const std::string& set) {
    const std::string where = "--set " + set;
    auto eq = set.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(where + ": expected section.key=value, e.g. --set decoder.beam_size=4");
    std::string path = set.substr(0, eq);
    std::string text = set.substr(eq + 1);
    std::string section_name = path, key;
    if (auto dot = path.find('.'); dot != std::string::npos) {
      section_name = path.substr(0, dot);
      key = path.substr(dot + 1);
    }
    if (!is_settings_section(section_name) && !find_section_kind(section_name))
      throw ConfigError(where + ": unknown section '" + section_name + "'" +
                        suggestion(section_name, section_names()) +
                        "; known sections: " + join(section_names()));
    YAML::Node node = text.empty() ? YAML::Node() : load_yaml(text, where);
    RawValue value{node, where, fs::current_path()};
    if (section_name == "run" && key.empty())
      throw ConfigError(where + ": expected run.key=value, e.g. --set run.max_batch_size=8");
    RawSection& section = sections_[section_name];
    if (section.where.empty()) section.where = where;
    const char* name_key = plugin_key(section_name);
    if (key.empty() || key == name_key) {
      // Switching plugins: parameters written for the old one are kept only if the new one
      // declares them too (checked at validation).
      for (auto& [k, v] : section.keys) v.droppable = true;
      section.plugin = value;
      return;
    }
    if (RawValue* existing = section.find(key))
      *existing = value;
    else
      section.keys.emplace_back(key, value);
  }

  const TaskSpec* validate_task(Pipeline& pipeline) {
    auto it = sections_.find("task");
    if (it == sections_.end() || !it->second.plugin) {
      if (options_.require_task) {
        std::vector<std::string> names;
        for (const auto& t : tasks_) names.push_back(t.name);
        error(source_.name + ": missing 'task:' (one of " + join(names) + ")");
      }
      if (it != sections_.end()) {
        // Without a task only the run settings written under `task:` have a reader.
        RawSection section = it->second;
        sections_.erase(it);
        move_run_settings(TaskSpec{}, section, pipeline);
        for (const auto& [key, value] : section.keys)
          error(value.where + ": task." + key +
                ": nothing here reads task parameters (no task is run; run settings go under "
                "run:)");
      }
      return nullptr;
    }
    RawSection section = it->second;
    sections_.erase(it);
    const RawValue& name_value = *section.plugin;
    std::string name = name_value.node.IsScalar() ? name_value.node.Scalar() : "";
    const TaskSpec* task = nullptr;
    for (const auto& t : tasks_)
      if (t.name == name) task = &t;
    if (!task) {
      std::vector<std::string> names;
      for (const auto& t : tasks_) names.push_back(t.name);
      error(name_value.where + ": task: unknown task " + node_text(name_value.node) +
            suggestion(name, names) + "; available: " + join(names));
      return nullptr;
    }
    pipeline.task = task->name;
    move_run_settings(*task, section, pipeline);
    fill_params("task", "task '" + task->name + "'", task->params.data(), task->params.size(),
                section, pipeline.task_params);
    return task;
  }

  // Older pipelines set the run settings under `task:`; they are read as `run:` keys (a key
  // given in both places is taken from `run:`), with a note for --dump-config.
  void move_run_settings(const TaskSpec& task, RawSection& section, Pipeline& pipeline) {
    // Rebuilt rather than erased from: assigning a YAML::Node writes into the node it refers
    // to, so shifting elements would overwrite the values already moved.
    std::vector<std::pair<std::string, RawValue>> kept;
    for (const auto& [key, value] : section.keys) {
      // By name: clang 14 cannot capture a structured binding.
      const std::string& name = key;
      const bool task_param = std::any_of(task.params.begin(), task.params.end(),
                                          [&](const ParamSpec& p) { return name == p.name; });
      if (task_param || !is_run_param(key)) {
        kept.emplace_back(key, value);
        continue;
      }
      RawSection& run = sections_["run"];
      if (run.where.empty()) run.where = section.where;
      if (run.find(key)) {
        pipeline.notes.push_back("task." + key + " is a run setting: run." + key +
                                 " was given too and is used");
        continue;
      }
      run.keys.emplace_back(key, value);
      run.keys.back().second.shown = "task." + key;
      pipeline.notes.push_back("task." + key + " is a run setting: read as run." + key);
    }
    section.keys = std::move(kept);
  }

  void validate_run(Pipeline& pipeline) {
    RawSection empty;
    auto it = sections_.find("run");
    RawSection& section = it != sections_.end() ? it->second : empty;
    if (section.where.empty()) section.where = source_.name;
    const auto& specs = run_param_specs();
    fill_params("run", "the run settings", specs.data(), specs.size(), section,
                pipeline.run_params);
    if (it != sections_.end()) sections_.erase(it);
  }

  // The plugin a section of `task` takes when it names none, and where that comes from.
  std::optional<RawValue> default_plugin(const TaskSpec& task, const std::string& name) const {
    const auto defaults = section_defaults(task, registry_);
    const auto def = defaults.find(name);
    if (def == defaults.end()) return std::nullopt;
    const std::string where =
        task.default_plugins.count(name)
            ? "default of task '" + task.name + "'"
            : std::string("the default ") + to_string(find_section_kind(name)->kind);
    return RawValue{YAML::Node(def->second), where, {}};
  }

  void add_default_sections(const TaskSpec* task) {
    if (!task) return;
    for (const auto& name : task->required_sections) {
      auto it = sections_.find(name);
      if (it != sections_.end() && it->second.plugin) continue;
      if (auto def = default_plugin(*task, name)) {
        RawSection& section = sections_[name];
        if (section.where.empty()) section.where = source_.name;
        section.plugin = std::move(*def);
      } else if (it == sections_.end()) {
        error(source_.name + ": the task '" + task->name + "' needs a '" + name + ":' section");
      }
    }
    for (const auto& [name, plugin] : task->default_plugins) {
      auto it = sections_.find(name);
      if (it != sections_.end() && !it->second.plugin)
        it->second.plugin =
            RawValue{YAML::Node(plugin), "default of task '" + task->name + "'", {}};
    }
  }

  // A tokenizer section with a folder and no plugin: the folder's files decide, by what the
  // tokenizer plugins declare they read (tokenizer_files.hpp). False after an error.
  bool pick_tokenizer_plugin(const std::string& name, RawSection& section) {
    const RawValue* path = section.find("path");
    if (!path || !path->node.IsScalar()) return true;
    const fs::path folder = path->base_dir / expand_env(path->node.Scalar());
    const auto choice = tok::pick_tokenizer(registry_, folder);
    if (!choice) {
      error(path->where + ": " + name + ": no 'plugin:' given, and " + folder.string() +
            " has none of the files that name one: " + tok::tokenizer_files_text(registry_));
      return false;
    }
    section.plugin = RawValue{
        YAML::Node(choice->plugin), path->where + " (" + choice->file + " in the folder)", {}};
    return true;
  }

  void validate_section(const std::string& name, RawSection& section, Pipeline& pipeline) {
    if (!section.plugin && find_section_kind(name) &&
        find_section_kind(name)->kind == PluginKind::tokenizer &&
        !pick_tokenizer_plugin(name, section))
      return;
    if (!section.plugin) {
      error(section.where + ": " + name + ": missing 'plugin:' (the " +
            to_string(find_section_kind(name)->kind) + " plugin to use)");
      return;
    }
    const SectionKind* kind = find_section_kind(name);
    const RawValue& plugin_value = *section.plugin;
    if (!plugin_value.node.IsScalar()) {
      error(plugin_value.where + ": " + name + ".plugin: expected a plugin name, got " +
            node_text(plugin_value.node));
      return;
    }
    const std::string plugin = plugin_value.node.Scalar();
    const PluginEntry* entry = nullptr;
    try {
      if (looks_like_file(plugin)) {
        if (!options_.allow_plugin_files)
          throw ConfigError("'" + plugin +
                            "' names a library file; plugins are loaded only from the plugin "
                            "directories (see `masque plugins --paths`). Pass "
                            "--allow-plugin-file to load a library named in a pipeline");
        fs::path file = plugin_value.base_dir / expand_env(plugin);
        entry = &registry_.add_file(file.lexically_normal());
        if (entry->descriptor->kind != kind->kind)
          throw ConfigError(entry->file.string() + " is a " + to_string(entry->descriptor->kind) +
                            " plugin, not a " + to_string(kind->kind) + " plugin");
      } else {
        entry = &registry_.find(kind->kind, plugin);
      }
    } catch (const ConfigError& e) {
      error(plugin_value.where + ": " + name + ".plugin: " + e.what());
      return;
    }
    PluginConfig config;
    config.section = name;
    config.entry = entry;
    fill_params(name,
                std::string(to_string(kind->kind)) + " plugin '" + entry->descriptor->name + "'",
                entry->descriptor->params, entry->descriptor->num_params, section, config.params);
    pipeline.plugins[name] = std::move(config);
  }

  void fill_params(const std::string& section_name, const std::string& owner,
                   const ParamSpec* specs, std::size_t count, RawSection& section, Params& out) {
    std::vector<std::string> known;
    for (std::size_t i = 0; i < count; ++i) known.push_back(specs[i].name);
    std::set<std::string> rejected;  // given, but with a bad value
    for (auto& [key, value] : section.keys) {
      const ParamSpec* spec = nullptr;
      for (std::size_t i = 0; i < count; ++i)
        if (key == specs[i].name) spec = &specs[i];
      const std::string path = value.shown.empty() ? section_name + "." + key : value.shown;
      if (!spec) {
        if (value.droppable) {
          warnings.push_back(value.where + ": " + path + " is not a parameter of " + owner +
                             "; dropped because --set switched " + section_name + " to it");
          continue;
        }
        error(value.where + ": " + path + ": unknown parameter of " + owner +
              suggestion(key, known) +
              "; its parameters: " + (known.empty() ? "(none)" : join(known)));
        continue;
      }
      try {
        ParamValue v = convert(*spec, value.node);
        if (spec->type == ParamType::path)
          v = resolve_path(*spec, std::get<std::string>(v), value.base_dir);
        out.set(key, std::move(v));
      } catch (const ConfigError& e) {
        error(value.where + ": " + path + ": " + e.what());
        rejected.insert(key);
      }
    }
    for (std::size_t i = 0; i < count; ++i) {
      const ParamSpec& spec = specs[i];
      if (out.has(spec.name) || rejected.count(spec.name)) continue;  // reported above
      if (spec.flags & kParamRequired) {
        error(section.where + ": " + section_name + "." + spec.name + ": missing required " +
              to_string(spec.type) + " parameter of " + owner + " (" + spec.help + ")");
        continue;
      }
      try {
        out.set(spec.name, parse_param_value(spec, spec.default_value ? spec.default_value : ""));
      } catch (const ConfigError& e) {
        error(owner + ": the default of '" + spec.name + "' is invalid: " + e.what());
      }
    }
  }

  std::string resolve_path(const ParamSpec& spec, const std::string& text, const fs::path& base) {
    if (text.empty()) {
      if (spec.flags & kParamRequired) throw ConfigError("expected a path, got an empty value");
      return text;
    }
    fs::path p = fs::path(text).is_absolute() ? fs::path(text) : base / text;
    p = p.lexically_normal();
    std::error_code ec;
    if (!(spec.flags & kParamMayBeMissing) && !fs::exists(p, ec))
      throw ConfigError("no such file or directory: " + p.string());
    return p.string();
  }

  const PipelineSource& source_;
  const LoadOptions& options_;
  Registry& registry_;
  const std::vector<TaskSpec>& tasks_;
  std::map<std::string, RawSection> sections_;
  std::vector<std::string> errors_;
};

}  // namespace

std::map<std::string, std::string> section_defaults(const TaskSpec& task,
                                                    const Registry& registry) {
  std::map<std::string, std::string> defaults = task.default_plugins;
  for (const auto& name : task.required_sections) {
    const SectionKind* kind = find_section_kind(name);
    if (defaults.count(name) || !kind) continue;
    if (const PluginEntry* entry = registry.default_plugin(kind->kind))
      defaults.emplace(name, entry->descriptor->name);
  }
  return defaults;
}

namespace {

// Integer bounds in full (2147483647, not 2.14748e+09).
std::string bound_text(const ParamSpec& spec, double v) {
  std::ostringstream os;
  if (spec.type == ParamType::integer && std::abs(v) < 0x1p63)
    os << static_cast<long long>(v);
  else
    os << v;
  return os.str();
}

}  // namespace

std::string param_range_text(const ParamSpec& spec) {
  // A bound at the int64 limit is no bound.
  const bool integer = spec.type == ParamType::integer;
  const bool lo = std::isfinite(spec.min) && !(integer && spec.min <= -0x1p63);
  const bool hi = std::isfinite(spec.max) && !(integer && spec.max >= 0x1p63 - 1024);
  if (lo && hi) return "[" + bound_text(spec, spec.min) + ", " + bound_text(spec, spec.max) + "]";
  if (lo) return ">= " + bound_text(spec, spec.min);
  if (hi) return "<= " + bound_text(spec, spec.max);
  return "";
}

ParamValue parse_param_value(const ParamSpec& spec, const std::string& yaml_text) {
  YAML::Node node = yaml_text.empty() ? YAML::Node() : load_yaml(yaml_text, "value");
  return convert(spec, node);
}

Params default_params(const PluginDescriptor& descriptor) {
  return default_params(descriptor.params, descriptor.num_params);
}

Params default_params(const ParamSpec* specs, std::size_t count) {
  Params params;
  for (std::size_t i = 0; i < count; ++i) {
    const ParamSpec& spec = specs[i];
    if (!(spec.flags & kParamRequired))
      params.set(spec.name, parse_param_value(spec, spec.default_value ? spec.default_value : ""));
  }
  return params;
}

Pipeline load_pipeline(const PipelineSource& source, const LoadOptions& options, Registry& registry,
                       const std::vector<TaskSpec>& tasks) {
  Loader loader(source, options, registry, tasks);
  Pipeline pipeline = loader.run();
  for (const auto& w : loader.warnings) std::fprintf(stderr, "masque: warning: %s\n", w.c_str());
  return pipeline;
}

Pipeline load_pipeline_file(const fs::path& file, const LoadOptions& options, Registry& registry,
                            const std::vector<TaskSpec>& tasks) {
  fs::path dir = fs::absolute(file).parent_path();
  return load_pipeline({io::read_file(file, "pipeline file"), file.string(), dir}, options,
                       registry, tasks);
}

namespace {
void dump_params(std::ostringstream& os, const Params& params, const ParamSpec* specs,
                 std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    auto it = params.values().find(specs[i].name);
    if (it != params.values().end())
      os << "  " << specs[i].name << ": " << to_yaml_text(it->second) << "\n";
  }
}
}  // namespace

std::string Pipeline::dump() const {
  std::ostringstream os;
  os << "# masque " << kVersion << ": resolved pipeline"
     << (file.empty() ? std::string() : " from " + file.string()) << "\n";
  if (!task.empty()) {
    os << "task:\n  name: " << task << "\n";
    for (const auto& [k, v] : task_params.values())
      os << "  " << k << ": " << to_yaml_text(v) << "\n";
  }
  if (!run_params.values().empty()) {
    os << "run:\n";
    const auto& specs = run_param_specs();
    dump_params(os, run_params, specs.data(), specs.size());
  }
  for (const auto& s : pipeline_sections()) {
    auto it = plugins.find(s.section);
    if (it == plugins.end()) continue;
    const PluginDescriptor* d = it->second.entry->descriptor;
    os << s.section << ":\n  plugin: " << d->name << "\n";
    dump_params(os, it->second.params, d->params, d->num_params);
  }
  return os.str();
}

}  // namespace masque
