#include "decoder_plugins.hpp"

#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include <boost/dll/shared_library.hpp>

#include "test_support.hpp"

namespace masque::test {

namespace {

struct LoadedPlugin {
  boost::dll::shared_library library;
  const PluginDescriptor* descriptor = nullptr;
};

std::vector<std::int64_t> parse_int_list(const std::string& text) {
  std::vector<std::int64_t> out;
  std::string body = text;
  for (char& c : body)
    if (c == '[' || c == ']' || c == ',') c = ' ';
  std::istringstream in(body);
  std::int64_t v = 0;
  while (in >> v) out.push_back(v);
  return out;
}

// "[]" or "[a, b]" (no quoting inside the items).
std::vector<std::string> parse_string_list(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  for (char c : text) {
    if (c == '[' || c == ']' || c == '"' || c == ' ') continue;
    if (c == ',') {
      out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  if (!item.empty()) out.push_back(item);
  return out;
}

// The subset of the pipeline's value syntax that decoder defaults use.
ParamValue parse_default(const ParamSpec& spec) {
  const std::string text = spec.default_value;
  switch (spec.type) {
    case ParamType::boolean:
      return text == "true";
    case ParamType::integer:
      return static_cast<std::int64_t>(std::stoll(text));
    case ParamType::number:
      return std::stod(text);
    case ParamType::int_list:
      return parse_int_list(text);
    case ParamType::string:
    case ParamType::path:
      return text;
    case ParamType::string_list:
      return parse_string_list(text);
  }
  throw std::runtime_error(std::string("no default parser for parameter ") + spec.name);
}

}  // namespace

const PluginDescriptor& decoder_descriptor(const std::string& name) {
  static std::mutex mutex;
  static auto* loaded = new std::map<std::string, LoadedPlugin>();  // never unloaded
  std::lock_guard lock(mutex);
  auto it = loaded->find(name);
  if (it == loaded->end()) {
    LoadedPlugin plugin;
    plugin.library.load((plugin_dir() / ("libmasque-decoder-" + name + ".so")).string(),
                        boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
    plugin.descriptor = plugin.library.get_alias<const PluginDescriptor*()>(MASQUE_PLUGIN_SYMBOL)();
    it = loaded->emplace(name, std::move(plugin)).first;
  }
  return *it->second.descriptor;
}

Params decoder_params(const std::string& name, const Overrides& overrides) {
  const PluginDescriptor& d = decoder_descriptor(name);
  Params params;
  for (std::uint32_t i = 0; i < d.num_params; ++i)
    params.set(d.params[i].name, parse_default(d.params[i]));
  for (const auto& [key, value] : overrides) {
    if (!params.has(key)) throw std::runtime_error(name + " does not declare " + key);
    params.set(key, value);
  }
  return params;
}

std::unique_ptr<Decoder> make_decoder(const std::string& name, const Overrides& overrides) {
  Plugin* plugin = decoder_descriptor(name).create(decoder_params(name, overrides));
  auto* decoder = dynamic_cast<Decoder*>(plugin);
  if (!decoder) {
    delete plugin;
    throw std::runtime_error(name + " did not create a Decoder");
  }
  return std::unique_ptr<Decoder>(decoder);
}

}  // namespace masque::test
