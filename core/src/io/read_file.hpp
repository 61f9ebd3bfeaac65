// Whole files read into memory, for libmasque's own small text files (pipelines, config.json,
// the files a training checkpoint carries).
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "masque/error.hpp"

namespace masque::io {

// The bytes of `file`; ConfigError "FILE: cannot open" (+ " the " + what) when it cannot be
// opened.
inline std::string read_file(const std::filesystem::path& file, const std::string& what = "") {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec))
    throw ConfigError(file.string() + ": is a directory" +
                      (what.empty() ? "" : ", not the " + what));
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw ConfigError(file.string() + ": cannot open" + (what.empty() ? "" : " the " + what));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace masque::io
