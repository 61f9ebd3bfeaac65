// Validated parameter values handed to a plugin factory.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include <boost/config.hpp>

#include "masque/plugin.hpp"

namespace masque {

using ParamValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>,
                                std::vector<std::string>>;

// Parameter values by name. The host fills every declared parameter (explicit value or default)
// with the declared type before calling a factory, so the getters only fail on programming
// errors (a name the plugin did not declare, or the wrong getter), with a RuntimeError.
class BOOST_SYMBOL_VISIBLE Params {
 public:
  void set(const std::string& name, ParamValue value) { values_[name] = std::move(value); }
  bool has(const std::string& name) const { return values_.count(name) != 0; }

  bool get_bool(const std::string& name) const;
  std::int64_t get_int(const std::string& name) const;
  double get_number(const std::string& name) const;              // also accepts an integer value
  const std::string& get_string(const std::string& name) const;  // string and path
  const std::vector<std::int64_t>& get_int_list(const std::string& name) const;
  const std::vector<std::string>& get_string_list(const std::string& name) const;

  const std::map<std::string, ParamValue>& values() const { return values_; }

 private:
  const ParamValue& at(const std::string& name) const;
  std::map<std::string, ParamValue> values_;
};

// Renders a value as it would be written in a pipeline file.
std::string to_yaml_text(const ParamValue& value);

}  // namespace masque
