#include "tasks/folder_tokenizer.hpp"

#include <filesystem>

#include "tokenizer_files.hpp"

namespace masque {

namespace fs = std::filesystem;

namespace {

bool inside(const fs::path& file, const fs::path& folder) {
  std::error_code ec;
  const fs::path f = fs::weakly_canonical(file, ec), d = fs::weakly_canonical(folder, ec);
  if (ec) return false;
  const auto [end, _] = std::mismatch(d.begin(), d.end(), f.begin(), f.end());
  return end == d.end();
}

// The files the section's plugin reads: its non-empty path parameters.
std::vector<std::pair<std::string, fs::path>> read_paths(const PluginConfig& config) {
  std::vector<std::pair<std::string, fs::path>> paths;
  const PluginDescriptor& d = *config.entry->descriptor;
  for (std::uint32_t i = 0; i < d.num_params; ++i)
    if (d.params[i].type == ParamType::path && config.params.has(d.params[i].name) &&
        !config.params.get_string(d.params[i].name).empty())
      paths.emplace_back(d.params[i].name, config.params.get_string(d.params[i].name));
  return paths;
}

std::string describe(const PluginConfig& config) {
  std::string text = config.entry->descriptor->name;
  text.insert(text.begin(), '\'');
  text += '\'';
  const auto paths = read_paths(config);
  for (std::size_t i = 0; i < paths.size(); ++i) {
    text += i == 0 ? " (" : ", ";
    text += paths[i].first;
    text += ' ';
    text += paths[i].second.string();
  }
  if (!paths.empty()) text += ')';
  return text;
}

}  // namespace

std::optional<std::string> folder_tokenizer_mismatch(const Pipeline& pipeline,
                                                     const Registry& registry,
                                                     const std::string& section,
                                                     const Tokenizer& tokenizer) {
  if (!pipeline.has("model") || !pipeline.has(section)) return std::nullopt;
  const Params& model_params = pipeline.at("model").params;
  if (!model_params.has("path") || model_params.get_string("path").empty()) return std::nullopt;
  const fs::path folder = model_params.get_string("path");
  std::optional<tok::TokenizerSection> own;
  for (const auto& s : tok::pick_tokenizer_sections(registry, folder))
    if (s.section == section) own = s;
  if (!own) return std::nullopt;
  const PluginConfig& config = pipeline.at(section);
  const auto paths = read_paths(config);
  const bool reads_folder = config.entry->descriptor->name == own->plugin &&
                            std::all_of(paths.begin(), paths.end(),
                                        [&](const auto& p) { return inside(p.second, folder); });
  if (reads_folder) return std::nullopt;

  std::unique_ptr<Plugin> plugin;
  try {
    const PluginEntry& entry = registry.find(PluginKind::tokenizer, own->plugin);
    Params params = default_params(*entry.descriptor);
    params.set(own->key, (own->file.empty() ? folder : folder / own->file).string());
    plugin = registry.create(entry, params);
  } catch (const std::exception&) {
    return std::nullopt;  // the folder's own files are not this check's business
  }
  const auto& theirs = static_cast<const Tokenizer&>(*plugin);
  const std::string where = folder.string() + (own->file.empty() ? "" : "/" + own->file);
  const std::string lead = section + " " + describe(config) + " differs from the tokenizer " +
                           "the model folder carries (" + own->plugin + ", " + where + "): ";
  std::string advice = "; the model's ids will stand for other tokens (read the folder's own: ";
  if (config.entry->descriptor->name != own->plugin)
    advice += "a " + section + " section with plugin: " + own->plugin + ", " + own->key + ": " +
              where + ")";
  else {
    advice += "--set " + section + "." + own->key + "=" + where;
    for (const auto& [key, path] : paths)
      if (key != own->key) advice += " --set " + section + "." + key + "=";
    advice += ")";
  }
  if (tokenizer.vocab_size() != theirs.vocab_size())
    return lead + std::to_string(tokenizer.vocab_size()) + " tokens against " +
           std::to_string(theirs.vocab_size()) + advice;
  for (TokenId id = 0; id < tokenizer.vocab_size(); ++id)
    if (tokenizer.id_to_piece(id) != theirs.id_to_piece(id))
      return lead + "id " + std::to_string(id) + " is '" + tokenizer.id_to_piece(id) +
             "' here and '" + theirs.id_to_piece(id) + "' there" + advice;
  return std::nullopt;
}

}  // namespace masque
