#include "registry.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>

#include <boost/dll/library_info.hpp>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include "masque/constraint.hpp"
#include "masque/decoder.hpp"
#include "masque/error.hpp"
#include "masque/mask.hpp"
#include "masque/model.hpp"
#include "masque/tokenizer.hpp"
#include "plugin_file.hpp"

namespace masque {

namespace fs = std::filesystem;

namespace {

// Libraries stay loaded for the life of the process: objects they created (and their vtables,
// deleters, exception types) must never outlive their code.
std::vector<boost::dll::shared_library>& loaded_libraries() {
  static auto* libraries = new std::vector<boost::dll::shared_library>();
  return *libraries;
}

bool is_plugin_file_name(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.rfind("libmasque-", 0) == 0 && p.extension() == ".so";
}

// "libmasque-model-gpt2.so" -> "model/gpt2" (first dash separates kind and name).
std::string kind_name_from_file(const fs::path& p) {
  std::string stem = p.stem().string().substr(std::string("libmasque-").size());
  auto dash = stem.find('-');
  if (dash == std::string::npos) return "";
  return stem.substr(0, dash) + "/" + stem.substr(dash + 1);
}

bool valid_kind(PluginKind k) {
  return k == PluginKind::tokenizer || k == PluginKind::mask || k == PluginKind::model ||
         k == PluginKind::decoder || k == PluginKind::constraint;
}

std::string version_text(unsigned major, unsigned minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

bool declares_param(const PluginDescriptor& d, const char* name) {
  for (std::uint32_t i = 0; i < d.num_params; ++i)
    if (std::string_view(d.params[i].name) == name) return true;
  return false;
}

// What a descriptor declares about itself must fit its kind and its parameters: the host acts
// on it without asking again.
std::string check_traits(const PluginDescriptor& d, const fs::path& file) {
  const std::string where = file.string() + ": ";
  if ((d.model && d.kind != PluginKind::model) ||
      (d.tokenizer && d.kind != PluginKind::tokenizer) ||
      (d.decoder && d.kind != PluginKind::decoder))
    return where + "the descriptor declares traits of another plugin kind than its own";
  if (d.model && d.model->trainable && !declares_param(d, "init_seed"))
    return where + "a trainable model plugin must declare the init_seed parameter";
  if (const TokenizerTraits* t = d.tokenizer) {
    if (t->num_reads && !t->reads) return where + "the tokenizer declares file sets but no list";
    for (std::uint32_t i = 0; i < t->num_reads; ++i) {
      const TokenizerFolderFiles& r = t->reads[i];
      if (!r.files || !*r.files || !r.param || !r.section)
        return where + "file set " + std::to_string(i) + " of the tokenizer is incomplete";
      if (!declares_param(d, r.param))
        return where + "file set '" + r.files + "' names the undeclared parameter '" + r.param +
               "'";
      if (std::string_view(r.section) != "tokenizer" &&
          std::string_view(r.section) != "target_tokenizer")
        return where + "file set '" + r.files + "' fills the unknown section '" + r.section + "'";
    }
    if (!t->carries || !t->saved_settings || !t->config_class)
      return where + "the tokenizer traits have a null text (use \"\")";
  }
  return "";
}

}  // namespace

std::string PluginEntry::key() const {
  return std::string(to_string(descriptor->kind)) + "/" + descriptor->name;
}

std::string check_descriptor(const PluginDescriptor& d, const fs::path& file) {
  if (d.magic != kDescriptorMagic)
    return file.string() +
           ": the masque_plugin_descriptor symbol does not point to a masque "
           "plugin descriptor";
  if (d.abi_major != kAbiMajor || d.abi_minor > kAbiMinor)
    return file.string() + ": built for masque plugin ABI " +
           version_text(d.abi_major, d.abi_minor) + ", but this masque has ABI " +
           version_text(kAbiMajor, kAbiMinor) +
           " (a plugin needs the same major version and a minor version not newer than the "
           "host's); rebuild the plugin against this masque";
  if (!valid_kind(d.kind)) return file.string() + ": unknown plugin kind in the descriptor";
  if (!d.name || !*d.name) return file.string() + ": the descriptor has no plugin name";
  if (!d.create) return file.string() + ": the descriptor has no factory function";
  for (std::uint32_t i = 0; i < d.num_params; ++i)
    if (!d.params || !d.params[i].name)
      return file.string() + ": parameter " + std::to_string(i) + " of the descriptor has no name";
  return check_traits(d, file);
}

std::vector<fs::path> Registry::default_dirs(std::vector<std::string>* warnings) {
  std::vector<fs::path> dirs;
  boost::system::error_code ec;
  fs::path exe = boost::dll::program_location(ec).string();
  if (!ec)
    dirs.push_back((exe.parent_path().parent_path() / MASQUE_PLUGIN_SUBDIR).lexically_normal());
  if (const char* env = std::getenv("MASQUE_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ':')) {
      if (item.empty()) continue;
      fs::path dir(item);
      if (!dir.is_absolute()) {
        if (warnings)
          warnings->push_back("MASQUE_PLUGIN_PATH: ignoring the relative directory '" + item +
                              "' (use an absolute path)");
        continue;
      }
      dirs.push_back(dir.lexically_normal());
    }
  }
  return dirs;
}

Registry::Registry(const std::vector<fs::path>& dirs) {
  std::set<fs::path> seen;
  for (const fs::path& dir : dirs) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(dir, ec);
    if (ec) canonical = dir;
    if (!seen.insert(canonical).second) continue;
    dirs_.push_back(dir);
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (is_plugin_file_name(e.path()) && e.is_regular_file(ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      std::string error;
      if (!load(f, &error)) problems_.push_back({f, kind_name_from_file(f), error});
    }
  }
}

namespace {
std::string not_a_plugin(const fs::path& file) {
  return file.string() + ": not a masque plugin (no '" MASQUE_PLUGIN_SYMBOL
                         "' symbol in section '" MASQUE_PLUGIN_SECTION
                         "'; build plugins with MASQUE_PLUGIN(...))";
}
}  // namespace

bool Registry::load(const fs::path& file, std::string* error) {
  // Look at the section names first, without running any code from the file, once the file is
  // known to be sound enough for Boost.DLL's ELF reader.
  if (std::string problem = elf_file_problem(file); !problem.empty()) {
    *error = file.string() + ": not a loadable shared library (" + problem + ")";
    return false;
  }
  try {
    // The section names only: Boost 1.74's symbol reader takes the names from the wrong
    // string table (see plugin_file.hpp).
    boost::dll::library_info info(file.string());
    auto sections = info.sections();
    if (std::find(sections.begin(), sections.end(), MASQUE_PLUGIN_SECTION) == sections.end()) {
      *error = not_a_plugin(file);
      return false;
    }
  } catch (const std::exception& e) {
    *error = file.string() + ": not a loadable shared library (" + e.what() + ")";
    return false;
  }
  boost::dll::shared_library lib;
  try {
    lib.load(file.string(), boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    *error = file.string() + ": cannot be loaded: " + e.what();
    return false;
  }
  if (!lib.has(MASQUE_PLUGIN_SYMBOL)) {
    *error = not_a_plugin(file);
    return false;
  }
  auto& get = lib.get_alias<const PluginDescriptor*()>(MASQUE_PLUGIN_SYMBOL);
  const PluginDescriptor* d = get();
  if (!d) {
    *error = file.string() + ": the plugin returned no descriptor";
    return false;
  }
  if (std::string problem = check_descriptor(*d, file); !problem.empty()) {
    *error = problem;
    return false;
  }
  loaded_libraries().push_back(std::move(lib));
  plugins_.push_back({file, d});
  return true;
}

const PluginEntry& Registry::add_file(const fs::path& file) {
  if (!fs::is_regular_file(file)) throw ConfigError(file.string() + ": no such plugin file");
  std::string error;
  if (!load(file, &error)) throw ConfigError(error);
  return plugins_.back();
}

std::vector<std::string> Registry::names(PluginKind kind) const {
  std::set<std::string> names;
  for (const auto& p : plugins_)
    if (p.descriptor->kind == kind) names.insert(p.descriptor->name);
  return {names.begin(), names.end()};
}

const PluginEntry& Registry::find(PluginKind kind, std::string_view name) const {
  std::vector<const PluginEntry*> matches;
  for (const auto& p : plugins_)
    if (p.descriptor->kind == kind && name == p.descriptor->name) matches.push_back(&p);
  const std::string key = std::string(to_string(kind)) + "/" + std::string(name);
  if (matches.size() > 1) {
    std::string files;
    for (auto* m : matches) files += "\n  " + m->file.string();
    throw ConfigError("two plugins provide " + std::string(to_string(kind)) + " '" +
                      std::string(name) + "':" + files +
                      "\nremove one of them or take its directory out of MASQUE_PLUGIN_PATH");
  }
  for (const auto& problem : problems_)
    if (problem.kind_name == key)
      throw ConfigError(std::string(to_string(kind)) + " plugin '" + std::string(name) +
                        "' cannot be used: " + problem.message);
  if (matches.empty()) {
    std::string available;
    for (const auto& n : names(kind)) available += (available.empty() ? "" : ", ") + n;
    throw ConfigError("unknown " + std::string(to_string(kind)) + " plugin '" + std::string(name) +
                      "'; available: " + (available.empty() ? "(none)" : available));
  }
  return *matches.front();
}

const PluginEntry* Registry::default_plugin(PluginKind kind) const {
  std::vector<const PluginEntry*> defaults;
  for (const auto& p : plugins_)
    if (p.descriptor->kind == kind && kind == PluginKind::decoder && p.descriptor->decoder &&
        p.descriptor->decoder->is_default)
      defaults.push_back(&p);
  if (defaults.size() > 1)
    throw ConfigError("two " + std::string(to_string(kind)) +
                      " plugins declare themselves the default: " + defaults[0]->file.string() +
                      " and " + defaults[1]->file.string() + "; name one in the pipeline");
  return defaults.empty() ? nullptr : defaults.front();
}

std::vector<const PluginEntry*> Registry::find_any(std::string_view name) const {
  std::vector<const PluginEntry*> out;
  for (const auto& p : plugins_)
    if (name == p.descriptor->name) out.push_back(&p);
  return out;
}

std::unique_ptr<Plugin> Registry::create(const PluginEntry& entry, const Params& params) const {
  std::unique_ptr<Plugin> plugin(entry.descriptor->create(params));
  if (!plugin) throw ConfigError(entry.file.string() + ": the plugin factory returned nothing");
  bool ok = false;
  switch (entry.descriptor->kind) {
    case PluginKind::tokenizer:
      ok = dynamic_cast<Tokenizer*>(plugin.get()) != nullptr;
      break;
    case PluginKind::mask:
      ok = dynamic_cast<MaskStrategy*>(plugin.get()) != nullptr;
      break;
    case PluginKind::model:
      ok = dynamic_cast<Model*>(plugin.get()) != nullptr;
      break;
    case PluginKind::decoder:
      ok = dynamic_cast<Decoder*>(plugin.get()) != nullptr;
      break;
    case PluginKind::constraint:
      ok = dynamic_cast<Constraint*>(plugin.get()) != nullptr;
      break;
  }
  if (!ok)
    throw ConfigError(entry.file.string() + ": the plugin says it is a " +
                      to_string(entry.descriptor->kind) + " but created something else");
  return plugin;
}

}  // namespace masque
