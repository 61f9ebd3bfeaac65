#include "sentence_transformers.hpp"

#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "masque/error.hpp"

namespace masque {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json read_json(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(file.string() + ": cannot read it");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {  // parse_error, or a number out of range
    throw ConfigError(file.string() + ": not JSON: " + e.what());
  }
}

// 1_Pooling/config.json: the one pooling mode it turns on (and include_prompt: false).
std::string pooling_mode(const fs::path& file) {
  const json config = read_json(file);
  const std::string include =
      config.value("include_prompt", true) ? "" : "\n  include_prompt: false";
  static const std::pair<const char*, const char*> kModes[] = {
      {"pooling_mode_cls_token", "cls"},         {"pooling_mode_mean_tokens", "mean"},
      {"pooling_mode_max_tokens", "max"},        {"pooling_mode_lasttoken", "last"},
      {"pooling_mode_mean_sqrt_len_tokens", ""}, {"pooling_mode_weightedmean_tokens", ""}};
  std::vector<std::string> on;
  for (const auto& [key, mode] : kModes) {
    if (!config.value(key, false)) continue;
    if (*mode == '\0')
      throw ConfigError(file.string() + ": " + key +
                        ": not a pooling mode masque has (cls, mean, " + "max, last)");
    on.emplace_back(mode);
  }
  if (on.size() != 1)
    throw ConfigError(file.string() + ": expected exactly one pooling_mode_* set to true, found " +
                      std::to_string(on.size()) + " (masque pools one way per run)");
  return on.front() + include;
}

// config_sentence_transformers.json: the prompt of its default_prompt_name, as the task's
// `prompt` line ("" without one).
std::string default_prompt(const fs::path& dir) {
  const fs::path file = dir / "config_sentence_transformers.json";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return "";
  const json config = read_json(file);
  const auto name = config.find("default_prompt_name");
  if (name == config.end() || name->is_null()) return "";
  const json prompts = config.value("prompts", json::object());
  const auto prompt = prompts.find(name->get<std::string>());
  if (prompt == prompts.end())
    throw ConfigError(file.string() + ": default_prompt_name '" + name->get<std::string>() +
                      "' is not among its prompts");
  return "  prompt: " + json(prompt->get<std::string>()).dump() + "\n";
}

std::string modules_settings(const fs::path& dir);

}  // namespace

std::string sentence_transformers_settings(const fs::path& dir) {
  try {
    return modules_settings(dir);
  } catch (const json::exception& e) {  // a key of another type than the format's
    throw ConfigError((dir / "modules.json").string() +
                      " (or a module's config.json): " + e.what());
  }
}

namespace {

std::string modules_settings(const fs::path& dir) {
  const fs::path file = dir / "modules.json";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return "";
  const json modules = read_json(file);
  if (!modules.is_array()) throw ConfigError(file.string() + ": expected a list of modules");
  std::string yaml;
  bool pooled = false, dense = false;
  for (const json& m : modules) {
    const std::string type = m.value("type", "");
    const std::string path = m.value("path", "");
    const std::string name = type.substr(type.rfind('.') + 1);
    if (name == "Transformer") {
      if (!path.empty())
        throw ConfigError(file.string() + ": a Transformer module in '" + path +
                          "': masque reads the model from the folder itself");
    } else if (name == "Pooling") {
      yaml += "  pooling: " + pooling_mode(dir / path / "config.json") + "\n";
      pooled = true;
    } else if (name == "Dense") {
      if (!pooled)
        throw ConfigError(file.string() + ": the Dense module '" + path +
                          "' comes before any Pooling (masque applies Dense to pooled vectors)");
      if (dense)
        throw ConfigError(file.string() + ": a second Dense module ('" + path +
                          "'): masque runs one");
      dense = true;
      // JSON strings are YAML flow scalars: the path quoted and escaped.
      yaml += "  dense: " + json(fs::absolute(dir / path).string()).dump() + "\n";
    } else if (name == "Normalize") {
      yaml += "  normalize: true\n";
    } else {
      throw ConfigError(file.string() + ": the module '" + type + "' (" + path +
                        ") is not one masque runs (Transformer, Pooling, Dense, Normalize)");
    }
  }
  return yaml + default_prompt(dir);
}

}  // namespace

}  // namespace masque
