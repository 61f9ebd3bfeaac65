// masque plugins [NAME] and masque tasks [NAME]: what is installed and how to configure it
// (in the spirit of gst-inspect).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common.hpp"
#include "masque/error.hpp"
#include "model_folder.hpp"
#include "run/settings.hpp"
#include "tasks/task.hpp"
#include "train/settings.hpp"

namespace masque::cli {

namespace {

std::string default_text(const ParamSpec& p) {
  if (p.flags & kParamRequired) return "(required)";
  std::string d = p.default_value ? p.default_value : "";
  return d.empty() ? "(none)" : d;
}

// Wraps `text` at `width` columns, indenting continuation lines.
std::string wrap(const std::string& text, std::size_t indent, std::size_t width = 96) {
  std::istringstream words(text);
  std::string word, line, out;
  while (words >> word) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      out += std::string(indent, ' ') + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) out += std::string(indent, ' ') + line + "\n";
  return out;
}

void print_params(const ParamSpec* params, std::size_t count) {
  if (count == 0) {
    std::cout << "\nParameters: none\n";
    return;
  }
  std::cout << "\nParameters:\n";
  for (std::size_t i = 0; i < count; ++i) {
    const ParamSpec& p = params[i];
    std::cout << "  " << p.name << "\n";
    std::string line = std::string("type ") + to_string(p.type) + ", default " + default_text(p);
    if (auto r = param_range_text(p); !r.empty()) line += ", range " + r;
    if (p.choices) {
      std::string c = p.choices;
      std::replace(c.begin(), c.end(), '|', ',');
      line += ", one of {" + c + "}";
    }
    std::cout << "      " << line << "\n" << wrap(p.help ? p.help : "", 6);
  }
}

nlohmann::ordered_json params_json(const ParamSpec* params, std::size_t count) {
  auto arr = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < count; ++i) {
    const ParamSpec& p = params[i];
    nlohmann::ordered_json j;
    j["name"] = p.name;
    j["type"] = to_string(p.type);
    j["required"] = (p.flags & kParamRequired) != 0;
    j["default"] = p.flags & kParamRequired
                       ? nlohmann::ordered_json()
                       : nlohmann::ordered_json(p.default_value ? p.default_value : "");
    if (std::isfinite(p.min)) j["min"] = p.min;
    if (std::isfinite(p.max)) j["max"] = p.max;
    if (p.choices) j["choices"] = p.choices;
    j["help"] = p.help ? p.help : "";
    arr.push_back(j);
  }
  return arr;
}

// What the plugin declares about itself (the traits of masque/plugin.hpp), as JSON; null when
// it declares nothing.
nlohmann::ordered_json traits_json(const PluginDescriptor& d) {
  nlohmann::ordered_json j;
  auto text = [](const char* s) {
    return s ? nlohmann::ordered_json(s) : nlohmann::ordered_json();
  };
  if (const ModelTraits* m = d.model) {
    j["trainable"] = m->trainable;
    j["dropout_keys"] = {{"embedding", text(m->embedding_dropout)},
                         {"residual", text(m->residual_dropout)},
                         {"attention", text(m->attention_dropout)},
                         {"activation", text(m->activation_dropout)}};
  }
  if (const TokenizerTraits* t = d.tokenizer) {
    auto reads = nlohmann::ordered_json::array();
    for (std::uint32_t i = 0; i < t->num_reads; ++i)
      reads.push_back({{"files", t->reads[i].files},
                       {"param", t->reads[i].param},
                       {"names_file", t->reads[i].names_file},
                       {"section", t->reads[i].section}});
    j["reads"] = reads;
    j["preference"] = t->preference;
    j["carries"] = t->carries;
    j["saved_settings"] = t->saved_settings;
    j["config_class"] = t->config_class;
  }
  if (const DecoderTraits* dt = d.decoder) {
    j["default"] = dt->is_default;
    j["streams"] = dt->streams;
    j["chosen_by"] = text(dt->chosen_by);
  }
  return j;
}

// The same as lines of `masque plugins NAME`.
void print_traits(const PluginDescriptor& d) {
  if (const ModelTraits* m = d.model) {
    std::cout << "  trains       " << (m->trainable ? "yes (masque train)" : "no") << "\n";
    std::string keys;
    for (const auto& [place, key] : {std::pair{"embeddings", m->embedding_dropout},
                                     {"residual", m->residual_dropout},
                                     {"attention", m->attention_dropout},
                                     {"activation", m->activation_dropout}})
      if (key) keys += (keys.empty() ? "" : ", ") + std::string(place) + " " + key;
    if (!keys.empty()) std::cout << "  dropout      config.json " << keys << "\n";
  }
  if (const TokenizerTraits* t = d.tokenizer) {
    for (std::uint32_t i = 0; i < t->num_reads; ++i) {
      const TokenizerFolderFiles& r = t->reads[i];
      std::cout << "  reads        " << r.files << " in a folder (" << r.section << "." << r.param
                << (r.names_file ? ": the file" : ": the folder") << ", preference "
                << t->preference << ")\n";
    }
    if (*t->carries) std::cout << "  carries      " << t->carries << "\n";
    if (*t->saved_settings)
      std::cout << "  saves        tokenizer_config.json " << t->saved_settings
                << (*t->config_class ? std::string(" (") + t->config_class + ")" : "") << "\n";
  }
  if (const DecoderTraits* dt = d.decoder) {
    if (dt->is_default)
      std::cout << "  default      the decoder a section without a plugin takes\n";
    std::cout << "  streams      " << (dt->streams ? "yes (masque run --stream)" : "no") << "\n";
    if (dt->chosen_by)
      std::cout << "  chosen by    generation_config.json with " << dt->chosen_by
                << " (masque run --model DIR)\n";
  }
}

nlohmann::ordered_json plugin_json(const PluginEntry& e) {
  const PluginDescriptor& d = *e.descriptor;
  nlohmann::ordered_json j;
  j["kind"] = to_string(d.kind);
  j["name"] = d.name;
  j["version"] = d.version;
  j["license"] = d.license;
  j["description"] = d.description;
  j["file"] = e.file.string();
  j["abi"] = std::to_string(d.abi_major) + "." + std::to_string(d.abi_minor);
  j["fingerprint"] = d.fingerprint ? d.fingerprint : "";
  if (const char* match = folder_match(e)) j["serves_folders"] = match;
  if (auto traits = traits_json(d); !traits.is_null()) j["declares"] = traits;
  j["parameters"] = params_json(d.params, d.num_params);
  return j;
}

void print_plugin(const PluginEntry& e) {
  const PluginDescriptor& d = *e.descriptor;
  std::cout << to_string(d.kind) << " plugin '" << d.name << "'\n"
            << "  description  " << d.description << "\n"
            << "  version      " << d.version << "\n"
            << "  license      " << d.license << "\n"
            << "  file         " << e.file.string() << "\n"
            << "  plugin ABI   " << d.abi_major << "." << d.abi_minor << "\n"
            << "  build        " << (d.fingerprint ? d.fingerprint : "") << "\n";
  if (const char* match = folder_match(e))
    std::cout << "  serves       model folders whose config.json has " << match
              << " (masque run --model DIR)\n";
  print_traits(d);
  print_params(d.params, d.num_params);
}

int kind_order(PluginKind k) {
  switch (k) {
    case PluginKind::tokenizer:
      return 0;
    case PluginKind::mask:
      return 1;
    case PluginKind::model:
      return 2;
    case PluginKind::decoder:
      return 3;
    case PluginKind::constraint:
      return 4;
  }
  return 5;
}

const char* kHelp = R"(Usage: masque plugins [NAME | KIND/NAME] [--json] [--paths]

Without NAME: a table of every plugin found (kind, name, version, description), grouped by kind.
With NAME: the plugin's file, version, license, what it declares about itself (the model
folders it serves; whether masque train trains it and its dropout keys; the folder files a
tokenizer reads, carries and saves; whether a decoder is the default, streams, and which
generation_config.json asks for it) and every parameter with its type, default, range and
meaning.

Plugins are searched in <masque>/../lib/masque/plugins, then in every absolute directory of
MASQUE_PLUGIN_PATH (':'-separated). Broken plugin files are reported on stderr (exit code 2).

Examples:
  masque plugins
  masque plugins beam
  masque plugins mask/permutation --json
)";

}  // namespace

int cmd_plugins(int argc, char** argv) {
  po::options_description o("Options");
  o.add_options()("help,h", "this help")("json", po::bool_switch(), "machine-readable output")(
      "paths", po::bool_switch(), "print the plugin search directories");
  po::options_description hidden;
  hidden.add_options()("name", po::value<std::string>());
  po::positional_options_description pos;
  pos.add("name", 1);
  po::variables_map vm = parse(argc, argv, o, hidden, pos);
  if (vm.count("help")) {
    std::cout << kHelp << "\n" << o << "\n";
    return kExitOk;
  }
  auto registry = open_registry(true);
  const bool json = vm["json"].as<bool>();
  int status = kExitOk;
  for (const auto& p : registry->problems()) {
    std::fprintf(stderr, "masque: error: %s\n", p.message.c_str());
    status = kExitUsage;
  }
  // Same kind/name in two files.
  std::map<std::string, std::vector<const PluginEntry*>> by_key;
  for (const auto& e : registry->plugins()) by_key[e.key()].push_back(&e);
  for (const auto& [key, entries] : by_key)
    if (entries.size() > 1) {
      std::string files;
      for (auto* e : entries) files += "\n  " + e->file.string();
      std::fprintf(stderr, "masque: error: two plugins provide %s:%s\n", key.c_str(),
                   files.c_str());
      status = kExitUsage;
    }

  if (vm["paths"].as<bool>()) {
    for (const auto& d : registry->dirs()) std::cout << d.string() << "\n";
    return status;
  }
  if (vm.count("name")) {
    std::string name = vm["name"].as<std::string>();
    std::vector<const PluginEntry*> found;
    auto slash = name.find('/');
    for (const auto& e : registry->plugins()) {
      if (slash == std::string::npos ? name == e.descriptor->name : name == e.key())
        found.push_back(&e);
    }
    if (found.empty()) {
      std::string all;
      for (const auto& e : registry->plugins()) all += (all.empty() ? "" : ", ") + e.key();
      throw ConfigError("no plugin named '" + name + "'; available: " + all);
    }
    if (json) {
      auto arr = nlohmann::ordered_json::array();
      for (auto* e : found) arr.push_back(plugin_json(*e));
      std::cout << (arr.size() == 1 ? arr[0] : arr).dump(2) << "\n";
    } else {
      for (std::size_t i = 0; i < found.size(); ++i) {
        if (i) std::cout << "\n";
        print_plugin(*found[i]);
      }
    }
    return status;
  }
  std::vector<const PluginEntry*> all;
  for (const auto& e : registry->plugins()) all.push_back(&e);
  std::stable_sort(all.begin(), all.end(), [](auto* a, auto* b) {
    int ka = kind_order(a->descriptor->kind), kb = kind_order(b->descriptor->kind);
    if (ka != kb) return ka < kb;
    return std::string(a->descriptor->name) < b->descriptor->name;
  });
  if (json) {
    auto arr = nlohmann::ordered_json::array();
    for (auto* e : all) arr.push_back(plugin_json(*e));
    std::cout << arr.dump(2) << "\n";
    return status;
  }
  std::size_t w = 4;
  for (auto* e : all) w = std::max(w, std::string(e->descriptor->name).size());
  std::printf("%-10s %-*s %-8s %s\n", "KIND", static_cast<int>(w), "NAME", "VERSION",
              "DESCRIPTION");
  PluginKind last = PluginKind::tokenizer;
  bool first = true;
  for (auto* e : all) {
    const PluginDescriptor& d = *e->descriptor;
    if (!first && d.kind != last) std::printf("\n");
    first = false;
    last = d.kind;
    std::printf("%-10s %-*s %-8s %s\n", to_string(d.kind), static_cast<int>(w), d.name, d.version,
                d.description);
  }
  return status;
}

namespace {
std::vector<std::string> model_kinds(const TaskSpec& spec) {
  std::vector<std::string> out;
  for (ModelKind kind : spec.model_kinds) out.emplace_back(model_kind_name(kind));
  return out;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}
nlohmann::ordered_json task_json(const TaskSpec& t, const Registry& registry) {
  nlohmann::ordered_json j;
  j["name"] = t.name;
  j["description"] = t.description;
  j["required_sections"] = t.required_sections;
  j["optional_sections"] = t.optional_sections;
  j["default_plugins"] = section_defaults(t, registry);
  j["parameters"] = params_json(t.params.data(), t.params.size());
  j["model_kinds"] = model_kinds(t);
  j["held_masks"] = t.held_masks;
  return j;
}
}  // namespace

int cmd_tasks(int argc, char** argv) {
  po::options_description o("Options");
  o.add_options()("help,h", "this help")(
      "json", po::bool_switch(),
      "machine-readable: with NAME the task as one JSON object (name, description, sections, "
      "default plugins, parameters, model kinds, held masks); without, {tasks: [...], "
      "run_settings: [...]}");
  po::options_description hidden;
  hidden.add_options()("name", po::value<std::string>());
  po::positional_options_description pos;
  pos.add("name", 1);
  po::variables_map vm = parse(argc, argv, o, hidden, pos);
  if (vm.count("help")) {
    std::cout << R"(Usage: masque tasks [NAME] [--json]

The tasks a pipeline's `task:` can name. Without NAME: every task with what it writes per
record, then the run settings every task takes (the pipeline's `run:` section, or
--set run.KEY=VALUE) with their types, defaults and meanings. With NAME: the task's sections
(required, with their default plugins, and optional), the model kinds it runs, the masks it
holds, and every parameter of its `task:` section with its type, default, range and meaning.
`train` is the task of `masque train` pipelines.

Examples:
  masque tasks
  masque tasks lm-score
  masque tasks train --json
  masque tasks --json

)" << o << "\n";
    return kExitOk;
  }
  // The run tasks, and `train` (the task of `masque train` pipelines).
  // The plugins a section takes by default: the task's own and those a plugin declares.
  auto registry = open_registry(true);
  std::vector<TaskSpec> catalog = task_specs();
  catalog.push_back(train::train_task_spec());
  if (vm.count("name")) {
    const std::string name = vm["name"].as<std::string>();
    for (const auto& t : catalog) {
      if (t.name != name) continue;
      if (vm["json"].as<bool>()) {
        std::cout << task_json(t, *registry).dump(2) << "\n";
        return kExitOk;
      }
      std::cout << "task '" << t.name << "'\n" << wrap(t.description, 2);
      std::string req, opt;
      const auto defaults = section_defaults(t, *registry);
      for (const auto& s : t.required_sections) {
        auto d = defaults.find(s);
        req += (req.empty() ? "" : ", ") + s +
               (d != defaults.end() ? " (default " + d->second + ")" : "");
      }
      for (const auto& s : t.optional_sections) opt += (opt.empty() ? "" : ", ") + s;
      std::cout << "  sections     " << req << (opt.empty() ? "" : "; optional: " + opt) << "\n";
      const auto kinds = model_kinds(t);
      if (!kinds.empty()) std::cout << "  models       " << join(kinds) << "\n";
      if (!t.held_masks.empty())
        std::cout << "  holds masks  " << join(t.held_masks) << " (from the plugin host)\n";
      print_params(t.params.data(), t.params.size());
      if (t.name != "train") std::cout << "  (run settings: `masque tasks` lists them)\n";
      return kExitOk;
    }
    std::string all;
    for (const auto& t : catalog) all += (all.empty() ? "" : ", ") + t.name;
    throw ConfigError("no task named '" + name + "'; available: " + all);
  }
  const auto& run = run_param_specs();
  if (vm["json"].as<bool>()) {
    nlohmann::ordered_json j;
    j["tasks"] = nlohmann::ordered_json::array();
    for (const auto& t : catalog) j["tasks"].push_back(task_json(t, *registry));
    j["run_settings"] = params_json(run.data(), run.size());
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  for (const auto& t : catalog) std::printf("%-14s %s\n", t.name.c_str(), t.description.c_str());
  std::cout
      << "\nrun settings (the pipeline's `run:` section, or --set run.KEY=VALUE; every task)\n";
  print_params(run.data(), run.size());
  return kExitOk;
}

}  // namespace masque::cli
