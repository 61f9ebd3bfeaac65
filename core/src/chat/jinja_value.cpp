#include "chat/jinja_value.hpp"

#include <limits>

#include "chat/jinja_error.hpp"

namespace masque::chat::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries_)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& [k, v] : entries_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  entries_.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string why) {
  Value v;
  if (!why.empty()) v.data_ = std::make_shared<const std::string>(std::move(why));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::none;
  return v;
}

Value::Value(std::string s)
    : kind_(Kind::string), data_(std::make_shared<const std::string>(std::move(s))) {}

Value::Value(List items, bool tuple)
    : kind_(tuple ? Kind::tuple : Kind::list),
      data_(std::make_shared<const List>(std::move(items))) {}

Value::Value(Dict dict) : kind_(Kind::dict), data_(std::make_shared<const Dict>(std::move(dict))) {}

std::int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<std::int64_t>(data_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

std::string Value::undefined_message() const {
  if (kind_ == Kind::undefined && std::holds_alternative<StringPtr>(data_))
    return *std::get<StringPtr>(data_);
  return "a value is undefined";
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
      return as_bool();
    case Kind::integer:
      return as_int() != 0;
    case Kind::floating:
      return as_double() != 0.0;
    case Kind::string:
      return !as_string().empty();
    case Kind::list:
    case Kind::tuple:
      return !as_list().empty();
    case Kind::dict:
      return as_dict().size() != 0;
    case Kind::ns:
    case Kind::loop:
    case Kind::callable:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::undefined:
      return "Undefined";
    case Kind::none:
      return "NoneType";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::string:
      return "str";
    case Kind::list:
      return "list";
    case Kind::tuple:
      return "tuple";
    case Kind::dict:
      return "dict";
    case Kind::ns:
      return "Namespace";
    case Kind::loop:
      return "LoopContext";
    case Kind::callable:
      return "function";
  }
  return "object";
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  using T = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case T::null:
      return none();
    case T::boolean:
      return Value(json.get<bool>());
    case T::number_integer:
      return Value(json.get<std::int64_t>());
    case T::number_unsigned: {
      const auto u = json.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail("the integer " + std::to_string(u) + " is too large (at most 2^63-1)");
      return Value(static_cast<std::int64_t>(u));
    }
    case T::number_float:
      return Value(json.get<double>());
    case T::string:
      return Value(json.get<std::string>());
    case T::array: {
      List items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return Value(std::move(items));
    }
    case T::object: {
      Dict dict;
      for (const auto& [key, item] : json.items()) dict.set(key, from_json(item));
      return Value(std::move(dict));
    }
    default:
      fail("a JSON value of type " + std::string(json.type_name()) + " has no Jinja value");
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return true;
    case Value::Kind::string:
      return a.as_string() == b.as_string();
    case Value::Kind::list:
    case Value::Kind::tuple: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::dict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [key, value] : x.entries()) {
        const Value* other = y.find(key);
        if (!other || !equal(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::ns:
      return &a.as_namespace() == &b.as_namespace();
    case Value::Kind::loop:
      return &a.as_loop() == &b.as_loop();
    case Value::Kind::callable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) fail((a.is_undefined() ? a : b).undefined_message());
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // code point order
  if (a.kind() == b.kind() && a.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equal(x[i], y[i])) return less(x[i], y[i]);
    return x.size() < y.size();
  }
  fail("TypeError: '<' not supported between instances of '" + a.type_name() + "' and '" +
       b.type_name() + "'");
}

}  // namespace masque::chat::jinja
