// The labels of a sequence-classification model, as its Hugging Face config.json names them.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace masque {

// The label names in logit order: id2label's values ({"0": "NEG", "1": "POS"}), else LABEL_0 ..
// LABEL_{num_labels - 1} (num_labels, default 2) as Hugging Face names them. ConfigError for a
// malformed id2label (a key that is not an index, a gap, an empty name).
std::vector<std::string> config_labels(const nlohmann::json& config);

}  // namespace masque
