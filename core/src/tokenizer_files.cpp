#include "tokenizer_files.hpp"

#include <algorithm>
#include <set>
#include <sstream>

namespace masque::tok {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> words(const char* text) {
  std::istringstream in(text ? text : "");
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

struct FileSet {
  const PluginEntry* plugin;
  const TokenizerFolderFiles* files;
  int preference;
};

// Every declared file set of the installed tokenizer plugins, most preferred first (ties in the
// registry's order, which is the files' name order).
std::vector<FileSet> file_sets(const Registry& registry) {
  std::vector<FileSet> sets;
  for (const auto& p : registry.plugins()) {
    const TokenizerTraits* t = p.descriptor->tokenizer;
    if (p.descriptor->kind != PluginKind::tokenizer || !t) continue;
    for (std::uint32_t i = 0; i < t->num_reads; ++i)
      sets.push_back({&p, &t->reads[i], t->preference});
  }
  std::stable_sort(sets.begin(), sets.end(),
                   [](const FileSet& a, const FileSet& b) { return a.preference > b.preference; });
  return sets;
}

bool present(const fs::path& folder, const TokenizerFolderFiles& files) {
  std::error_code ec;
  const auto names = words(files.files);
  return !names.empty() && std::all_of(names.begin(), names.end(), [&](const std::string& n) {
    return fs::is_regular_file(folder / n, ec);
  });
}

std::string joined(const char* files, const char* separator) {
  std::string text;
  for (const auto& n : words(files)) text += (text.empty() ? "" : separator) + n;
  return text;
}

bool is_target(const TokenizerFolderFiles& files) {
  return std::string(files.section) == "target_tokenizer";
}

}  // namespace

std::optional<TokenizerChoice> pick_tokenizer(const Registry& registry, const fs::path& folder) {
  for (const FileSet& s : file_sets(registry))
    if (!s.files->names_file && !is_target(*s.files) && present(folder, *s.files))
      return TokenizerChoice{s.plugin->descriptor->name, joined(s.files->files, " and ")};
  return std::nullopt;
}

std::vector<TokenizerSection> pick_tokenizer_sections(const Registry& registry,
                                                      const fs::path& folder) {
  const auto sets = file_sets(registry);
  auto section_of = [&](const FileSet& s) {
    const auto names = words(s.files->files);
    return TokenizerSection{s.files->section, s.plugin->descriptor->name, s.files->param,
                            s.files->names_file ? names.front() : ""};
  };
  for (const FileSet& s : sets) {
    if (is_target(*s.files) || !present(folder, *s.files)) continue;
    std::vector<TokenizerSection> sections{section_of(s)};
    for (const FileSet& t : sets)
      if (t.plugin == s.plugin && is_target(*t.files) && present(folder, *t.files)) {
        sections.push_back(section_of(t));
        break;
      }
    return sections;
  }
  return {};
}

std::string tokenizer_files_text(const Registry& registry) {
  std::string text;
  for (const FileSet& s : file_sets(registry))
    text += (text.empty() ? "" : ", ") + joined(s.files->files, " + ") + " (" +
            s.plugin->descriptor->name + (is_target(*s.files) ? ", the target side" : "") + ")";
  return text.empty() ? "(no tokenizer plugin declares any)" : text;
}

std::vector<std::string> carried_tokenizer_files(const Registry& registry) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  auto add = [&](const char* files) {
    for (const auto& n : words(files))
      if (seen.insert(n).second) names.push_back(n);
  };
  for (const FileSet& s : file_sets(registry))
    if (!s.files->names_file) add(s.files->files);
  for (const auto& p : registry.plugins())
    if (p.descriptor->kind == PluginKind::tokenizer && p.descriptor->tokenizer)
      add(p.descriptor->tokenizer->carries);
  return names;
}

}  // namespace masque::tok
