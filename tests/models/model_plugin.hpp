// Loading built plugins in the model tests (dlopen through Boost.DLL, as the host does), and
// building padded batches with a real mask strategy.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/dll/shared_library.hpp>

#include "masque/mask.hpp"
#include "masque/model.hpp"
#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "test_support.hpp"

namespace masque::test {

// A plugin object. Its library stays loaded until the process ends (see open_plugin).
template <typename T>
using LoadedPlugin = std::unique_ptr<T>;

// libmasque-KIND-NAME.so from the build's plugin directory, loaded once for the whole process:
// objects, exceptions thrown by plugin code (their destructors live in the plugin) and
// thread_local workspaces must never outlive the code they run.
inline const boost::dll::shared_library& open_plugin(const std::string& kind,
                                                     const std::string& name) {
  static std::mutex mutex;
  static auto* loaded = new std::map<std::string, boost::dll::shared_library>();
  const std::string file = (plugin_dir() / ("libmasque-" + kind + "-" + name + ".so")).string();
  std::lock_guard lock(mutex);
  auto it = loaded->find(file);
  if (it == loaded->end()) it = loaded->emplace(file, boost::dll::shared_library(file)).first;
  return it->second;
}

inline const PluginDescriptor& descriptor_of(const boost::dll::shared_library& library) {
  const PluginDescriptor* d = library.get_alias<const PluginDescriptor*()>(MASQUE_PLUGIN_SYMBOL)();
  if (!d || d->magic != kDescriptorMagic)
    throw std::runtime_error(library.location().string() + " is not a masque plugin");
  return *d;
}

// Creates a plugin object; `params` must set every declared parameter (the host would), except
// string and integer parameters with a default, which get it as the host would fill it.
template <typename T>
LoadedPlugin<T> load_plugin(const std::string& kind, const std::string& name,
                            const Params& given = {}) {
  const PluginDescriptor& d = descriptor_of(open_plugin(kind, name));
  Params params = given;
  for (std::uint32_t i = 0; i < d.num_params; ++i) {
    const ParamSpec& spec = d.params[i];
    if (params.has(spec.name)) continue;
    if (spec.type == ParamType::integer && !(spec.flags & kParamRequired)) {
      params.set(spec.name, static_cast<std::int64_t>(std::stoll(spec.default_value)));
      continue;
    }
    if (spec.type != ParamType::string || (spec.flags & kParamRequired))
      throw std::runtime_error(name + ": parameter '" + spec.name + "' is not set");
    params.set(spec.name, std::string(spec.default_value));
  }
  std::unique_ptr<Plugin> plugin(d.create(params));
  auto* object = dynamic_cast<T*>(plugin.get());
  if (!object) throw std::runtime_error(name + " did not create the expected kind of object");
  plugin.release();
  return LoadedPlugin<T>(object);
}

inline LoadedPlugin<Model> load_model(const std::string& name,
                                      const std::filesystem::path& folder) {
  Params params;
  params.set("path", folder.string());
  return load_plugin<Model>("model", name, params);
}

inline LoadedPlugin<MaskStrategy> load_mask(const std::string& name, const Params& params = {}) {
  return load_plugin<MaskStrategy>("mask", name, params);
}

// A right-padded batch of `rows` (positions 0..len-1) under the layout `mask` builds for each
// row. Pad slots get id `pad_id` and position `pad_position`: a model must ignore both.
inline Batch make_batch(const MaskStrategy& mask, const std::vector<std::vector<TokenId>>& rows,
                        TokenId pad_id = 0, std::int32_t pad_position = 0) {
  Batch batch;
  batch.batch = static_cast<std::int32_t>(rows.size());
  for (const auto& r : rows)
    batch.length = std::max(batch.length, static_cast<std::int32_t>(r.size()));
  const auto n = static_cast<std::size_t>(batch.batch) * batch.length;
  batch.ids.assign(n, pad_id);
  batch.positions.assign(n, pad_position);
  batch.attention.reset(batch.batch, batch.length);
  for (std::int32_t b = 0; b < batch.batch; ++b) {
    const auto& r = rows[b];
    for (std::size_t t = 0; t < r.size(); ++t) {
      batch.ids[b * batch.length + t] = r[t];
      batch.positions[b * batch.length + t] = static_cast<std::int32_t>(t);
    }
    MaskRequest request;
    request.length = static_cast<std::int32_t>(r.size());
    batch.attention.set_row(b, mask.build(request));
  }
  return batch;
}

}  // namespace masque::test
