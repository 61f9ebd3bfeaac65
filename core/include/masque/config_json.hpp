// Typed access to a model's config.json. Errors are ConfigErrors naming the file and the key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/config.hpp>
#include <nlohmann/json_fwd.hpp>

namespace masque {

class BOOST_SYMBOL_VISIBLE JsonConfig {
 public:
  JsonConfig() = default;
  static JsonConfig load(const std::filesystem::path& file);
  // Parses `text`; `file` is only used in messages.
  static JsonConfig parse(std::string_view text, const std::filesystem::path& file);

  const std::filesystem::path& file() const;
  // Present and not null.
  bool has(std::string_view key) const;

  // Required values (ConfigError when missing, null or of another type).
  std::int64_t get_int(std::string_view key) const;
  double get_number(std::string_view key) const;  // integers are accepted
  bool get_bool(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  // An integer or a list of integers (e.g. eos_token_id).
  std::vector<std::int64_t> get_int_list(std::string_view key) const;

  // Optional values: `fallback` when missing or null; a present value of another type is an error.
  std::int64_t get_int(std::string_view key, std::int64_t fallback) const;
  double get_number(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;
  std::string get_string(std::string_view key, std::string fallback) const;

  // The whole document, for nested settings (e.g. rope_scaling).
  const nlohmann::json& json() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace masque
