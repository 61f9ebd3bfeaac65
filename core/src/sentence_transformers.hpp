// sentence-transformers folders as they ship: modules.json names the modules after the
// Transformer (1_Pooling, 2_Normalize, ...), which the embed task's settings express.
#pragma once

#include <filesystem>
#include <string>

namespace masque {

// The embed task's settings for a sentence-transformers folder, as YAML lines of the task
// section ("  pooling: mean\n  normalize: true\n"); "" when `dir` has no modules.json.
// ConfigError naming the file and key for what masque cannot do (pooling modes it lacks or
// several at once, a Dense module before the pooling or more than one).
std::string sentence_transformers_settings(const std::filesystem::path& dir);

}  // namespace masque
