// Reading a JSON file for the tokenizer plugins (header only; needs nlohmann_json).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "masque/error.hpp"
#include "token_files.hpp"

namespace masque::tok {

// The parsed file; a missing file or invalid JSON is a ConfigError naming the file.
inline nlohmann::json read_json_file(const std::string& path, const char* what) {
  try {
    return nlohmann::json::parse(read_whole_file(path, what));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + ": invalid JSON: " + e.what());
  }
}

}  // namespace masque::tok
