#include "tasks/labels.hpp"

#include <string>

#include "masque/error.hpp"

namespace masque {

std::vector<std::string> config_labels(const nlohmann::json& config) {
  std::vector<std::string> labels;
  const auto it = config.find("id2label");
  if (it == config.end() || it->is_null()) {
    const auto n = config.find("num_labels");
    const std::int64_t count =
        n != config.end() && n->is_number_integer() ? n->get<std::int64_t>() : 2;
    if (count < 1 || count > 1000000)
      throw ConfigError("config.json: num_labels must be a positive integer");
    for (std::int64_t i = 0; i < count; ++i) labels.push_back("LABEL_" + std::to_string(i));
    return labels;
  }
  if (!it->is_object() || it->empty())
    throw ConfigError("config.json: id2label: expected a non-empty object {\"0\": label, ...}");
  labels.resize(it->size());
  for (const auto& [key, value] : it->items()) {
    std::size_t used = 0;
    long i = -1;
    try {
      i = std::stol(key, &used);
    } catch (const std::exception&) {
    }
    if (used != key.size() || i < 0 || static_cast<std::size_t>(i) >= labels.size() ||
        !value.is_string() || value.get_ref<const std::string&>().empty())
      throw ConfigError("config.json: id2label: key '" + key + "' is not a label index in [0, " +
                        std::to_string(labels.size()) + ") with a non-empty name");
    labels[static_cast<std::size_t>(i)] = value.get<std::string>();
  }
  return labels;
}

}  // namespace masque
