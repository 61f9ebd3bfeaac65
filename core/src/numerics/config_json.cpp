#include "masque/config_json.hpp"

#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "io/read_file.hpp"
#include "json_depth.hpp"
#include "masque/error.hpp"

namespace masque {

struct JsonConfig::Impl {
  std::filesystem::path file;
  nlohmann::json doc;
};

namespace {

const nlohmann::json* lookup(const nlohmann::json& doc, std::string_view key) {
  auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return nullptr;
  return &*it;
}

[[noreturn]] void fail(const std::filesystem::path& file, std::string_view key,
                       const std::string& what) {
  throw ConfigError(file.string() + ": key '" + std::string(key) + "': " + what);
}

}  // namespace

JsonConfig JsonConfig::parse(std::string_view text, const std::filesystem::path& file) {
  auto impl = std::make_shared<Impl>();
  impl->file = file;
  try {
    impl->doc = parse_json_bounded<nlohmann::json>(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file.string() + ": invalid JSON: " + e.what());
  } catch (const JsonTooDeep& e) {
    throw ConfigError(file.string() + ": invalid JSON: " + e.what());
  }
  if (!impl->doc.is_object()) throw ConfigError(file.string() + ": expected a JSON object");
  JsonConfig config;
  config.impl_ = std::move(impl);
  return config;
}

JsonConfig JsonConfig::load(const std::filesystem::path& file) {
  return parse(io::read_file(file), file);
}

const std::filesystem::path& JsonConfig::file() const {
  static const std::filesystem::path none;
  return impl_ ? impl_->file : none;
}

const nlohmann::json& JsonConfig::json() const {
  static const nlohmann::json empty = nlohmann::json::object();
  return impl_ ? impl_->doc : empty;
}

bool JsonConfig::has(std::string_view key) const {
  return lookup(json(), key) != nullptr;
}

namespace {

const nlohmann::json& required(const JsonConfig& c, std::string_view key) {
  const nlohmann::json* v = lookup(c.json(), key);
  if (!v) fail(c.file(), key, "missing");
  return *v;
}

std::int64_t as_int(const JsonConfig& c, std::string_view key, const nlohmann::json& v) {
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX)
    fail(c.file(), key, "the integer " + v.dump() + " is too large");
  if (v.is_number_integer()) return v.get<std::int64_t>();
  // Some configs write integers as 12.0. Converting a double outside the int64 range is
  // undefined behaviour, so the range is checked first (2^63 is exact in a double).
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= -0x1p63 && d < 0x1p63 && d == std::trunc(d)) return static_cast<std::int64_t>(d);
  }
  fail(c.file(), key, "expected an integer, got " + v.dump());
}

double as_number(const JsonConfig& c, std::string_view key, const nlohmann::json& v) {
  if (!v.is_number()) fail(c.file(), key, "expected a number, got " + v.dump());
  return v.get<double>();
}

bool as_bool(const JsonConfig& c, std::string_view key, const nlohmann::json& v) {
  if (!v.is_boolean()) fail(c.file(), key, "expected true or false, got " + v.dump());
  return v.get<bool>();
}

std::string as_string(const JsonConfig& c, std::string_view key, const nlohmann::json& v) {
  if (!v.is_string()) fail(c.file(), key, "expected a string, got " + v.dump());
  return v.get<std::string>();
}

}  // namespace

std::int64_t JsonConfig::get_int(std::string_view key) const {
  return as_int(*this, key, required(*this, key));
}
double JsonConfig::get_number(std::string_view key) const {
  return as_number(*this, key, required(*this, key));
}
bool JsonConfig::get_bool(std::string_view key) const {
  return as_bool(*this, key, required(*this, key));
}
std::string JsonConfig::get_string(std::string_view key) const {
  return as_string(*this, key, required(*this, key));
}

std::vector<std::int64_t> JsonConfig::get_int_list(std::string_view key) const {
  const nlohmann::json& v = required(*this, key);
  std::vector<std::int64_t> out;
  if (v.is_array()) {
    for (const auto& item : v) out.push_back(as_int(*this, key, item));
  } else {
    out.push_back(as_int(*this, key, v));
  }
  return out;
}

std::int64_t JsonConfig::get_int(std::string_view key, std::int64_t fallback) const {
  const nlohmann::json* v = lookup(json(), key);
  return v ? as_int(*this, key, *v) : fallback;
}
double JsonConfig::get_number(std::string_view key, double fallback) const {
  const nlohmann::json* v = lookup(json(), key);
  return v ? as_number(*this, key, *v) : fallback;
}
bool JsonConfig::get_bool(std::string_view key, bool fallback) const {
  const nlohmann::json* v = lookup(json(), key);
  return v ? as_bool(*this, key, *v) : fallback;
}
std::string JsonConfig::get_string(std::string_view key, std::string fallback) const {
  const nlohmann::json* v = lookup(json(), key);
  return v ? as_string(*this, key, *v) : std::move(fallback);
}

}  // namespace masque
