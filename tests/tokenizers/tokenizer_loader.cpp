#include "tokenizer_loader.hpp"

#include <mutex>
#include <stdexcept>
#include <vector>

#include <boost/dll/shared_library.hpp>

namespace masque::test {

const PluginDescriptor& tokenizer_descriptor(const std::string& name,
                                             const std::filesystem::path& plugin_dir) {
  static std::mutex mutex;
  static auto* loaded = new std::map<std::string, boost::dll::shared_library>();
  const std::filesystem::path file = plugin_dir / ("libmasque-tokenizer-" + name + ".so");
  std::lock_guard lock(mutex);
  auto it = loaded->find(file.string());
  if (it == loaded->end())
    it = loaded->emplace(file.string(), boost::dll::shared_library(file.string())).first;
  auto get = it->second.get_alias<const PluginDescriptor*()>(MASQUE_PLUGIN_SYMBOL);
  const PluginDescriptor* d = get();
  if (!d || d->magic != kDescriptorMagic || d->kind != PluginKind::tokenizer)
    throw std::runtime_error(file.string() + " is not a masque tokenizer plugin");
  return *d;
}

namespace {

// A declared default as the host would parse it (the tokenizer plugins' defaults are plain
// scalars: true/false, integers, numbers, unquoted text).
ParamValue parse_default(const ParamSpec& spec) {
  const std::string text = spec.default_value ? spec.default_value : "";
  auto split = [&] {
    std::vector<std::string> items;
    std::string cur;
    for (char c : text) {
      if (c == ',' || c == '[' || c == ']') {
        if (!cur.empty()) items.push_back(cur);
        cur.clear();
      } else if (c != ' ') {
        cur += c;
      }
    }
    if (!cur.empty()) items.push_back(cur);
    return items;
  };
  switch (spec.type) {
    case ParamType::boolean:
      return text == "true";
    case ParamType::integer:
      return static_cast<std::int64_t>(std::stoll(text));
    case ParamType::number:
      return std::stod(text);
    case ParamType::string:
    case ParamType::path:
      return text;
    case ParamType::int_list: {
      std::vector<std::int64_t> v;
      for (const auto& s : split()) v.push_back(std::stoll(s));
      return v;
    }
    case ParamType::string_list:
      return split();
  }
  return text;
}

}  // namespace

Params tokenizer_params(const PluginDescriptor& descriptor,
                        const std::map<std::string, ParamValue>& overrides) {
  Params params;
  for (std::uint32_t i = 0; i < descriptor.num_params; ++i) {
    const ParamSpec& spec = descriptor.params[i];
    if (!(spec.flags & kParamRequired)) params.set(spec.name, parse_default(spec));
  }
  for (const auto& [k, v] : overrides) {
    bool declared = false;
    for (std::uint32_t i = 0; i < descriptor.num_params; ++i)
      declared |= k == descriptor.params[i].name;
    if (!declared)
      throw std::runtime_error(std::string(descriptor.name) + " has no parameter " + k);
    params.set(k, v);
  }
  return params;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name,
                                          const std::map<std::string, ParamValue>& overrides,
                                          const std::filesystem::path& plugin_dir) {
  const PluginDescriptor& d = tokenizer_descriptor(name, plugin_dir);
  std::unique_ptr<Plugin> plugin(d.create(tokenizer_params(d, overrides)));
  auto* tok = dynamic_cast<Tokenizer*>(plugin.get());
  if (!tok) throw std::runtime_error(name + " did not create a Tokenizer");
  plugin.release();
  return std::unique_ptr<Tokenizer>(tok);
}

}  // namespace masque::test
