#include "model_folder.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>

#include <boost/dll/shared_library.hpp>
#include <nlohmann/json.hpp>

#include "io/read_file.hpp"
#include "masque/error.hpp"
#include "masque/folder_match.hpp"
#include "sentence_transformers.hpp"
#include "tokenizer_files.hpp"

namespace masque {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json parse_json_file(const fs::path& file) {
  try {
    return json::parse(io::read_file(file));
  } catch (const json::exception& e) {
    throw ConfigError(file.string() + ": not valid JSON: " + e.what());
  }
}

// The folder's file names, sorted, for messages that say what was found.
std::string listing(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  std::string text;
  for (const auto& n : names) text += (text.empty() ? "" : ", ") + n;
  return text.empty() ? "(nothing)" : text;
}

fs::path config_file(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw ConfigError(dir.string() + ": not a model folder (no such directory)");
  const fs::path file = dir / "config.json";
  if (!fs::is_regular_file(file, ec))
    throw ConfigError(dir.string() +
                      ": not a model folder: no config.json (found: " + listing(dir) + ")");
  return file;
}

bool value_holds(const json& value, const std::string& wanted) {
  if (value.is_string()) return value.get<std::string>() == wanted;
  if (value.is_array())
    return std::any_of(value.begin(), value.end(), [&](const json& v) {
      return v.is_string() && v.get<std::string>() == wanted;
    });
  return false;
}

bool json_matches(const json& config, const char* folder_match) {
  if (!folder_match || !config.is_object()) return false;
  std::stringstream ss(folder_match);
  std::string condition;
  while (std::getline(ss, condition, ';')) {
    const auto eq = condition.find('=');
    if (eq == std::string::npos) continue;
    const auto it = config.find(condition.substr(0, eq));
    if (it != config.end() && value_holds(*it, condition.substr(eq + 1))) return true;
  }
  return false;
}

// Every model plugin and the folders it serves: "gpt2 (model_type=gpt2), ...".
std::string model_plugins_text(const Registry& registry) {
  std::string text;
  for (const auto& p : registry.plugins()) {
    if (p.descriptor->kind != PluginKind::model) continue;
    const char* match = folder_match(p);
    text += std::string(text.empty() ? "" : ", ") + p.descriptor->name + " (" +
            (match ? match : "serves no folder by itself") + ")";
  }
  return text.empty() ? "(no model plugins installed)" : text;
}

const TaskSpec& find_task(const std::string& name, const std::vector<TaskSpec>& tasks) {
  std::string names;
  for (const auto& t : tasks) {
    if (t.name == name) return t;
    names += (names.empty() ? "" : ", ") + t.name;
  }
  throw ConfigError("--task: unknown task '" + name + "'; the tasks: " + names);
}

bool uses_section(const TaskSpec& task, const std::string& section) {
  auto in = [&](const std::vector<std::string>& v) {
    return std::find(v.begin(), v.end(), section) != v.end();
  };
  return in(task.required_sections) || in(task.optional_sections);
}

std::string quoted(const std::string& s) {
  return json(s).dump();
}

const ParamSpec* find_param(const PluginDescriptor& d, const std::string& name) {
  for (std::uint32_t i = 0; i < d.num_params; ++i)
    if (name == d.params[i].name) return &d.params[i];
  return nullptr;
}

// Whether generation_config.json `g` holds every condition of a decoder's
// DecoderTraits::chosen_by: `key=value`, `key!=value`, `key>N` (masque/plugin.hpp).
bool generation_asks_for(const json& g, const char* chosen_by) {
  if (!chosen_by || !*chosen_by) return false;
  std::stringstream ss(chosen_by);
  std::string condition;
  while (std::getline(ss, condition, ';')) {
    const auto op = condition.find_first_of("!=>");
    if (op == std::string::npos || op == 0) return false;
    const std::string key = condition.substr(0, op);
    const bool negated = condition[op] == '!';
    const bool above = condition[op] == '>';
    const std::string value = condition.substr(op + (negated ? 2 : 1));
    const auto it = g.find(key);
    bool holds = false;
    if (it != g.end()) {
      if (above) {
        holds = it->is_number_integer() &&
                it->get<std::int64_t>() > std::strtoll(value.c_str(), nullptr, 10);
      } else if (value == "true" || value == "false") {
        holds = it->is_boolean() && it->get<bool>() == (value == "true");
      } else {
        holds = it->is_string() ? it->get<std::string>() == value : it->dump() == value;
      }
    }
    if (holds == negated) return false;
  }
  return true;
}

// The decoder section from generation_config.json: the decoder whose declared chosen_by the file
// meets (beam search for num_beams > 1, sampling for do_sample), else the task's default
// decoder; the settings Hugging Face's generate() reads that the chosen decoder declares too.
// "" when the file says nothing the decoder takes.
std::string decoder_section(const fs::path& dir, const TaskSpec& task, const Registry& registry) {
  std::error_code ec;
  const fs::path file = dir / "generation_config.json";
  if (!fs::is_regular_file(file, ec)) return "";
  const json g = parse_json_file(file);
  if (!g.is_object()) throw ConfigError(file.string() + ": expected a JSON object");
  const auto defaults = section_defaults(task, registry);
  const auto def = defaults.find("decoder");
  const std::string default_plugin = def != defaults.end() ? def->second : "";
  std::string plugin;
  for (const auto& p : registry.plugins()) {
    if (p.descriptor->kind != PluginKind::decoder || !p.descriptor->decoder ||
        !generation_asks_for(g, p.descriptor->decoder->chosen_by))
      continue;
    if (!plugin.empty() && plugin != p.descriptor->name)
      throw ConfigError(file.string() + ": asks for two decoders, " + plugin + " and " +
                        p.descriptor->name + "; name one with --set decoder.plugin=NAME");
    plugin = p.descriptor->name;
  }
  if (plugin.empty()) plugin = default_plugin;
  if (plugin.empty()) return "";
  const PluginDescriptor& d = *registry.find(PluginKind::decoder, plugin).descriptor;
  // Hugging Face name -> masque decoder parameter.
  static const std::pair<const char*, const char*> kKeys[] = {
      {"num_beams", "beam_size"},
      {"temperature", "temperature"},
      {"top_k", "top_k"},
      {"top_p", "top_p"},
      {"max_new_tokens", "max_new_tokens"},
      {"min_new_tokens", "min_new_tokens"},
      {"repetition_penalty", "repetition_penalty"},
      {"no_repeat_ngram_size", "no_repeat_ngram_size"},
      {"length_penalty", "length_penalty"},
      {"num_return_sequences", "num_hypotheses"},
  };
  std::string settings;
  for (const auto& [hf, ours] : kKeys) {
    const auto it = g.find(hf);
    if (it == g.end() || !it->is_number() || !find_param(d, ours)) continue;
    settings += std::string("  ") + ours + ": " + it->dump() + "  # " + hf + "\n";
  }
  if (settings.empty() && plugin == default_plugin) return "";
  return "decoder:  # from " + file.string() + "\n  plugin: " + plugin + "\n" + settings;
}

std::string tokenizer_sections(const FolderRequest& request, const TaskSpec& task,
                               const Registry& registry) {
  const fs::path dir = request.tokenizer_dir.empty() ? request.model_dir : request.tokenizer_dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw ConfigError("--tokenizer: " + dir.string() + " is not a directory");
  const auto sections = tok::pick_tokenizer_sections(registry, dir);
  if (sections.empty())
    throw ConfigError(dir.string() + ": no tokenizer files (found: " + listing(dir) +
                      "); a tokenizer is named by " + tok::tokenizer_files_text(registry) +
                      "; give a folder that has one with --tokenizer DIR, or (masque run) name "
                      "one with --set tokenizer.plugin=NAME and its parameters (--set "
                      "tokenizer.vocab=FILE)");
  std::string text;
  for (const auto& s : sections) {
    if (!uses_section(task, s.section)) continue;
    text += s.section + ":\n  plugin: " + s.plugin + "\n  " + s.key + ": " +
            quoted((s.file.empty() ? dir : dir / s.file).string()) + "\n";
  }
  return text;
}

}  // namespace

const char* folder_match(const PluginEntry& entry) {
  if (entry.descriptor->kind != PluginKind::model) return nullptr;
  try {
    // Already loaded by the registry, which keeps it loaded: this only looks the symbol up.
    boost::dll::shared_library lib(
        entry.file.string(), boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    if (!lib.has(MASQUE_FOLDER_MATCH_SYMBOL)) return nullptr;
    return lib.get_alias<const char*()>(MASQUE_FOLDER_MATCH_SYMBOL)();
  } catch (const std::exception&) {
    return nullptr;
  }
}

std::string FolderArchitecture::text() const {
  std::string t =
      "model_type " + (model_type.empty() ? std::string("(none)") : "'" + model_type + "'");
  t += ", architectures ";
  if (architectures.empty()) return t + "(none)";
  for (std::size_t i = 0; i < architectures.size(); ++i) t += (i ? "," : "") + architectures[i];
  return t;
}

FolderArchitecture read_architecture(const fs::path& dir) {
  const json config = parse_json_file(config_file(dir));
  FolderArchitecture a;
  if (!config.is_object()) return a;
  if (config.contains("model_type") && config["model_type"].is_string())
    a.model_type = config["model_type"].get<std::string>();
  else if (config.contains("model_type"))  // shown as written: "(none)" would mislead
    a.model_type = config["model_type"].dump();
  for (const char* key : {"architectures", "architecture"}) {
    const auto it = config.find(key);
    if (it == config.end()) continue;
    if (it->is_string()) a.architectures.push_back(it->get<std::string>());
    if (it->is_array())
      for (const auto& v : *it)
        if (v.is_string()) a.architectures.push_back(v.get<std::string>());
  }
  return a;
}

const PluginEntry& model_plugin_for(const fs::path& dir, const Registry& registry) {
  const fs::path file = config_file(dir);
  const json config = parse_json_file(file);
  std::vector<const PluginEntry*> matches;
  for (const auto& p : registry.plugins())
    if (p.descriptor->kind == PluginKind::model && json_matches(config, folder_match(p)))
      matches.push_back(&p);
  const std::string found = read_architecture(dir).text();
  if (matches.empty())
    throw ConfigError(file.string() + " (" + found +
                      "): no model plugin serves this folder; the model plugins and the "
                      "folders they serve: " +
                      model_plugins_text(registry) +
                      ". Write a pipeline naming the plugin (model: {plugin: NAME, path: DIR})");
  if (matches.size() > 1) {
    std::string names;
    for (const auto* m : matches)
      names += (names.empty() ? "" : " and ") + std::string(m->descriptor->name) + " (" +
               m->file.string() + ")";
    throw ConfigError(file.string() + " (" + found +
                      "): several model plugins serve this folder: " + names +
                      "; write a pipeline naming the one to use");
  }
  return *matches.front();
}

std::string folder_pipeline_yaml(const FolderRequest& request, const Registry& registry,
                                 const std::vector<TaskSpec>& tasks) {
  const TaskSpec& task = find_task(request.task, tasks);
  const fs::path dir = fs::absolute(request.model_dir).lexically_normal();
  // A sentence-transformers folder's pooling and normalization are the embed task's settings.
  const std::string settings = task.name == "embed" ? sentence_transformers_settings(dir) : "";
  std::string yaml =
      "# built from the model folder " + dir.string() + "\ntask: " +
      (settings.empty() ? task.name + "\n" : "\n  name: " + task.name + "\n" + settings);
  if (uses_section(task, "model")) {
    const PluginEntry& model = model_plugin_for(dir, registry);
    yaml += "model:\n  plugin: " + std::string(model.descriptor->name) +
            "\n  path: " + quoted(dir.string()) + "\n";
  }
  if (uses_section(task, "tokenizer") && !request.tokenizer_given) {
    FolderRequest r = request;
    r.model_dir = dir;
    if (!r.tokenizer_dir.empty())
      r.tokenizer_dir = fs::absolute(r.tokenizer_dir).lexically_normal();
    yaml += tokenizer_sections(r, task, registry);
  }
  if (uses_section(task, "decoder")) yaml += decoder_section(dir, task, registry);
  return yaml;
}

}  // namespace masque
