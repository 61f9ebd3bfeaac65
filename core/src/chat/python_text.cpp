#include "chat/python_text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/jinja_error.hpp"
#include "chat/python_str.hpp"

namespace masque::chat::jinja {

std::string python_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // The shortest digits that read back as the same double, as Python's repr() chooses them.
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string text(buf, result.ptr);
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    text.erase(0, 1);
  }
  const std::size_t e = text.find('e');
  std::string digits = text.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(text.substr(e + 1));
  const int point = exponent + 1;  // digits before the decimal point
  const int n = static_cast<int>(digits.size());
  if (point <= -4 || point > 16) {  // Python's switch to exponent notation
    std::string mantissa = digits.substr(0, 1);
    if (n > 1) mantissa += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return sign + mantissa + exp;
  }
  if (point <= 0) return sign + "0." + std::string(static_cast<std::size_t>(-point), '0') + digits;
  if (point >= n)
    return sign + digits + std::string(static_cast<std::size_t>(point - n), '0') + ".0";
  return sign + digits.substr(0, static_cast<std::size_t>(point)) + "." +
         digits.substr(static_cast<std::size_t>(point));
}

std::string python_quote(const std::string& text) {
  const bool has_single = text.find('\'') != std::string::npos;
  const bool has_double = text.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : pystr::decode(text)) {
    if (c == static_cast<char32_t>(quote) || c == U'\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (c == U'\t') {
      out += "\\t";
    } else if (c < 0x7F && c >= 0x20) {
      out += static_cast<char>(c);
    } else if (c >= 0x80 && pystr::is_printable(c)) {
      out += pystr::encode(std::u32string_view(&c, 1));
    } else {
      char buf[16];
      if (c <= 0xFF)
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c <= 0xFFFF)
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out += quote;
  return out;
}

namespace {

void append_repr(std::string& out, const Value& value);

void append_items(std::string& out, const List& items) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, items[i]);
  }
}

void append_repr(std::string& out, const Value& value) {
  switch (value.kind()) {
    case Value::Kind::string:
      out += python_quote(value.as_string());
      return;
    case Value::Kind::undefined:
      out += "Undefined";
      return;
    case Value::Kind::list:
      out += '[';
      append_items(out, value.as_list());
      out += ']';
      return;
    case Value::Kind::tuple:
      out += '(';
      append_items(out, value.as_list());
      if (value.as_list().size() == 1) out += ',';
      out += ')';
      return;
    case Value::Kind::dict: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.as_dict().entries()) {
        if (!first) out += ", ";
        first = false;
        out += python_quote(key) + ": ";
        append_repr(out, item);
      }
      out += '}';
      return;
    }
    case Value::Kind::ns: {
      out += "<Namespace {";
      bool first = true;
      for (const auto& [key, item] : value.as_namespace().attributes.entries()) {
        if (!first) out += ", ";
        first = false;
        out += python_quote(key) + ": ";
        append_repr(out, item);
      }
      out += "}>";
      return;
    }
    default:
      out += python_str(value);
  }
}

}  // namespace

std::string python_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::none:
      return "None";
    case Value::Kind::boolean:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::integer:
      return std::to_string(value.as_int());
    case Value::Kind::floating:
      return python_float(value.as_double());
    case Value::Kind::string:
      return value.as_string();
    case Value::Kind::callable:
      return "<function " + value.as_callable().name() + ">";
    case Value::Kind::loop: {
      const LoopState& loop = value.as_loop();
      return "<LoopContext " + std::to_string(loop.index + 1) + "/" +
             std::to_string(loop.items->size()) + ">";
    }
    default: {
      std::string out;
      append_repr(out, value);
      return out;
    }
  }
}

std::string python_repr(const Value& value) {
  std::string out;
  append_repr(out, value);
  return out;
}

namespace {

// json.dumps' string: the two quotes, backslash and control characters escaped; with
// ensure_ascii every non-ASCII code point too (as UTF-16 escapes).
void append_json_string(std::string& out, const std::string& text, bool ensure_ascii) {
  out += '"';
  auto escape16 = [&out](unsigned unit) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", unit);
    out += buf;
  };
  auto plain = [&](char32_t c) {
    switch (c) {
      case U'"':
        out += "\\\"";
        return;
      case U'\\':
        out += "\\\\";
        return;
      case U'\n':
        out += "\\n";
        return;
      case U'\r':
        out += "\\r";
        return;
      case U'\t':
        out += "\\t";
        return;
      case U'\b':
        out += "\\b";
        return;
      case U'\f':
        out += "\\f";
        return;
      default:
        if (c < 0x20)
          escape16(static_cast<unsigned>(c));
        else if (c < 0x80)
          out += static_cast<char>(c);
        else if (!ensure_ascii)
          out += pystr::encode(std::u32string_view(&c, 1));
        else if (c <= 0xFFFF)
          escape16(static_cast<unsigned>(c));
        else {
          const auto v = static_cast<unsigned>(c) - 0x10000;
          escape16(0xD800 + (v >> 10));
          escape16(0xDC00 + (v & 0x3FF));
        }
    }
  };
  bool ascii = true;
  for (unsigned char c : text) ascii = ascii && c < 0x80;
  if (ascii) {
    for (char c : text) plain(static_cast<char32_t>(static_cast<unsigned char>(c)));
  } else {
    for (char32_t c : pystr::decode(text)) plain(c);
  }
  out += '"';
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonStyle& style)
      : style_(style),
        item_sep_(style.item_separator.value_or(style.indent ? "," : ", ")),
        key_sep_(style.key_separator.value_or(": ")) {}

  void write(const Value& value, int level) {
    if (level > 512) fail("ValueError: tojson: a value nested over 512 levels deep");
    switch (value.kind()) {
      case Value::Kind::none:
        out += "null";
        return;
      case Value::Kind::boolean:
        out += value.as_bool() ? "true" : "false";
        return;
      case Value::Kind::integer:
        out += std::to_string(value.as_int());
        return;
      case Value::Kind::floating: {
        const double d = value.as_double();
        if (std::isnan(d))
          out += "NaN";
        else if (std::isinf(d))
          out += d < 0 ? "-Infinity" : "Infinity";
        else
          out += python_float(d);
        return;
      }
      case Value::Kind::string:
        append_json_string(out, value.as_string(), style_.ensure_ascii);
        return;
      case Value::Kind::list:
      case Value::Kind::tuple:
        write_list(value.as_list(), level);
        return;
      case Value::Kind::dict:
        write_dict(value.as_dict(), level);
        return;
      default:
        fail("TypeError: Object of type " + value.type_name() + " is not JSON serializable");
    }
  }

  std::string out;

 private:
  void newline(int level) {
    if (!style_.indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += *style_.indent;
  }

  void write_list(const List& items, int level) {
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_sep_;
      newline(level + 1);
      write(items[i], level + 1);
    }
    newline(level);
    out += ']';
  }

  void write_dict(const Dict& dict, int level) {
    if (dict.size() == 0) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& entry : dict.entries()) entries.push_back(&entry);
    if (style_.sort_keys)
      std::stable_sort(entries.begin(), entries.end(),
                       [](auto* a, auto* b) { return a->first < b->first; });
    out += '{';
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i) out += item_sep_;
      newline(level + 1);
      append_json_string(out, entries[i]->first, style_.ensure_ascii);
      out += key_sep_;
      write(entries[i]->second, level + 1);
    }
    newline(level);
    out += '}';
  }

  const JsonStyle& style_;
  std::string item_sep_, key_sep_;
};

}  // namespace

std::string python_json(const Value& value, const JsonStyle& style) {
  JsonWriter writer(style);
  writer.write(value, 0);
  return std::move(writer.out);
}

}  // namespace masque::chat::jinja
