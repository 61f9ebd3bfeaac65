// The plugin host: finds plugin libraries, checks their descriptors and creates plugins.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "masque/params.hpp"
#include "masque/plugin.hpp"

namespace masque {

struct PluginEntry {
  std::filesystem::path file;
  const PluginDescriptor* descriptor = nullptr;
  std::string key() const;  // "kind/name"
};

// A plugin file that could not be used, and why. Broken files are reported, not fatal, until
// a pipeline asks for the plugin they were meant to provide.
struct PluginProblem {
  std::filesystem::path file;
  std::string kind_name;  // "model/gpt2" from the file name libmasque-model-gpt2.so, or ""
  std::string message;
};

class Registry {
 public:
  // Plugin directories in search order: <dir of the masque executable>/../lib/masque/plugins
  // (the build's plugin dir in a build tree, the install dir once installed), then each
  // absolute directory of MASQUE_PLUGIN_PATH (':'-separated; empty and relative entries are
  // ignored, so the current directory is never searched by accident).
  static std::vector<std::filesystem::path> default_dirs(std::vector<std::string>* warnings);

  // Scans the directories for files named libmasque-*.so.
  explicit Registry(const std::vector<std::filesystem::path>& dirs);

  // Loads one library given by path (a pipeline naming a file, allowed by --allow-plugin-file).
  const PluginEntry& add_file(const std::filesystem::path& file);

  const std::vector<PluginEntry>& plugins() const { return plugins_; }
  const std::vector<PluginProblem>& problems() const { return problems_; }
  const std::vector<std::filesystem::path>& dirs() const { return dirs_; }

  // The plugin of that kind and name. ConfigError: unknown name (listing the available names
  // of the kind), two files providing it (naming both), or a broken file meant to provide it.
  const PluginEntry& find(PluginKind kind, std::string_view name) const;
  // All plugins of any kind with that name (for `masque plugins NAME`).
  std::vector<const PluginEntry*> find_any(std::string_view name) const;
  std::vector<std::string> names(PluginKind kind) const;
  // The plugin of `kind` a section that names none takes: the decoder that declares itself the
  // default (DecoderTraits::is_default), or null. ConfigError when two installed ones do.
  const PluginEntry* default_plugin(PluginKind kind) const;

  // Creates the plugin and checks that it is of the kind its descriptor says.
  std::unique_ptr<Plugin> create(const PluginEntry& entry, const Params& params) const;

 private:
  bool load(const std::filesystem::path& file, std::string* error);
  std::vector<std::filesystem::path> dirs_;
  std::vector<PluginEntry> plugins_;
  std::vector<PluginProblem> problems_;
};

// Checks a descriptor read from `file` against this host. Returns "" when acceptable.
std::string check_descriptor(const PluginDescriptor& d, const std::filesystem::path& file);

}  // namespace masque
