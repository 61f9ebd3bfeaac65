#include "masque/params.hpp"

#include <sstream>

#include "masque/error.hpp"

namespace masque {

const ParamValue& Params::at(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw RuntimeError("parameter '" + name + "' was not declared");
  return it->second;
}

namespace {
template <class T>
const T& get_as(const ParamValue& v, const std::string& name, const char* what) {
  if (auto* p = std::get_if<T>(&v)) return *p;
  throw RuntimeError("parameter '" + name + "' is not " + what);
}
}  // namespace

bool Params::get_bool(const std::string& name) const {
  return get_as<bool>(at(name), name, "a bool");
}
std::int64_t Params::get_int(const std::string& name) const {
  return get_as<std::int64_t>(at(name), name, "an integer");
}
double Params::get_number(const std::string& name) const {
  const ParamValue& v = at(name);
  if (auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
  return get_as<double>(v, name, "a number");
}
const std::string& Params::get_string(const std::string& name) const {
  return get_as<std::string>(at(name), name, "a string");
}
const std::vector<std::int64_t>& Params::get_int_list(const std::string& name) const {
  return get_as<std::vector<std::int64_t>>(at(name), name, "an int list");
}
const std::vector<std::string>& Params::get_string_list(const std::string& name) const {
  return get_as<std::vector<std::string>>(at(name), name, "a string list");
}

namespace {
std::string quote_if_needed(const std::string& s) {
  bool plain = !s.empty();
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
          c == '/' || (static_cast<unsigned char>(c) >= 0x80)))
      plain = false;
  }
  if (plain && s != "true" && s != "false" && s != "null" && s != "~") return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\t') {
      out += "\\t";
      continue;
    }
    out += c;
  }
  return out + "\"";
}
}  // namespace

std::string to_yaml_text(const ParamValue& value) {
  std::ostringstream os;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          os << (v ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          os << v;
        } else if constexpr (std::is_same_v<T, double>) {
          std::ostringstream d;
          d.precision(17);
          d << v;
          std::string s = d.str();
          if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
          os << s;
        } else if constexpr (std::is_same_v<T, std::string>) {
          os << quote_if_needed(v);
        } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          os << '[';
          for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
          os << ']';
        } else {
          os << '[';
          for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << quote_if_needed(v[i]);
          os << ']';
        }
      },
      value);
  return os.str();
}

}  // namespace masque
