#include "chat/jinja_builtins.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <limits>
#include <optional>
#include <set>

#include "chat/jinja_error.hpp"
#include "chat/python_str.hpp"
#include "chat/python_text.hpp"

namespace masque::chat::jinja {

namespace {

constexpr std::int64_t kMaxRange = 100000;               // jinja2's sandbox refuses longer ranges
constexpr std::size_t kMaxText = std::size_t{64} << 20;  // any one string a template builds

Value integer(std::size_t n) {
  return Value(static_cast<std::int64_t>(n));
}

[[noreturn]] void type_error(const std::string& message) {
  fail("TypeError: " + message);
}

void check_size(std::size_t n) {
  if (n > kMaxText)
    fail("a string or list of more than " + std::to_string(kMaxText) + " items or bytes");
}

// Python's binding of call arguments to parameter names; absent ones are nullopt.
std::vector<std::optional<Value>> bind(const Arguments& args,
                                       std::initializer_list<const char*> names,
                                       const std::string& function) {
  std::vector<std::optional<Value>> bound(names.size());
  if (args.positional.size() > names.size())
    type_error(function + "() takes at most " + std::to_string(names.size()) + " argument(s) (" +
               std::to_string(args.positional.size()) + " given)");
  for (std::size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    std::size_t i = 0;
    for (const char* n : names) {
      if (key == n) break;
      ++i;
    }
    if (i == names.size())
      type_error(function + "() got an unexpected keyword argument '" + key + "'");
    if (bound[i]) type_error(function + "() got multiple values for argument '" + key + "'");
    bound[i] = value;
  }
  return bound;
}

std::optional<std::string> optional_string(const std::optional<Value>& v, const std::string& what) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) type_error(what + " must be None or a string, not " + v->type_name());
  return v->as_string();
}

std::int64_t int_arg(const std::optional<Value>& v, std::int64_t fallback,
                     const std::string& what) {
  if (!v || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool())
    type_error(what + ": an integer is required, not " + v->type_name());
  return v->as_int();
}

bool bool_arg(const std::optional<Value>& v, bool fallback) {
  return v ? v->truthy() : fallback;
}

const std::string& string_arg(const std::optional<Value>& v, const std::string& what) {
  if (!v) type_error(what + " missing a required argument");
  if (!v->is_string()) type_error(what + " must be str, not " + v->type_name());
  return v->as_string();
}

Value string_list(const std::vector<std::string>& items) {
  List out;
  out.reserve(items.size());
  for (const auto& s : items) out.emplace_back(s);
  return Value(std::move(out));
}

// --- attribute paths, as jinja2's make_attrgetter reads "a.b.0" ---
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = get_item(v, digits ? Value(static_cast<std::int64_t>(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// The key a sort / unique / min / max compares: lower-cased strings unless case-sensitive.
Value sort_key(const Value& item, const std::optional<std::string>& attribute,
               bool case_sensitive) {
  Value v = attribute ? attribute_path(item, *attribute) : item;
  if (!case_sensitive && v.is_string()) return Value(pystr::lower(v.as_string()));
  return v;
}

List sorted(List items, const std::optional<std::string>& attribute, bool case_sensitive,
            bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (auto& item : items) keyed.emplace_back(sort_key(item, attribute, case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  List out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return out;
}

std::size_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return 0;
    case Value::Kind::string:
      return static_cast<std::size_t>(pystr::length(v.as_string()));
    case Value::Kind::list:
    case Value::Kind::tuple:
      return v.as_list().size();
    case Value::Kind::dict:
      return v.as_dict().size();
    default:
      type_error("object of type '" + v.type_name() + "' has no len()");
  }
}

// --- filters ---
using Filter = Value (*)(const Value& input, const Arguments& args);

Value filter_abs(const Value& v, const Arguments& a) {
  bind(a, {}, "abs");
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == std::numeric_limits<std::int64_t>::min()) fail("integer overflow in abs");
    return Value(static_cast<std::int64_t>(std::llabs(v.as_int())));
  }
  type_error("bad operand type for abs(): '" + v.type_name() + "'");
}

Value filter_capitalize(const Value& v, const Arguments& a) {
  bind(a, {}, "capitalize");
  return Value(pystr::capitalize(python_str(v)));
}

Value filter_length(const Value& v, const Arguments& a) {
  bind(a, {}, "length");
  return integer(length_of(v));
}

Value filter_default(const Value& v, const Arguments& a) {
  auto b = bind(a, {"default_value", "boolean"}, "default");
  if (v.is_undefined() || (bool_arg(b[1], false) && !v.truthy()))
    return b[0] ? *b[0] : Value(std::string());
  return v;
}

Value filter_dictsort(const Value& v, const Arguments& a) {
  auto b = bind(a, {"case_sensitive", "by", "reverse"}, "dictsort");
  if (!v.is_dict()) type_error("dictsort: can only sort a mapping, not " + v.type_name());
  const std::string by = b[1] ? string_arg(b[1], "dictsort by") : "key";
  if (by != "key" && by != "value")
    fail("FilterArgumentError: You can only sort by either 'key' or 'value'");
  List items;
  for (const auto& [key, value] : v.as_dict().entries()) items.emplace_back(List{key, value}, true);
  return Value(sorted(std::move(items), std::string(by == "key" ? "0" : "1"), bool_arg(b[0], false),
                      bool_arg(b[2], false)));
}

Value filter_escape(const Value& v, const Arguments& a) {
  bind(a, {}, "escape");
  std::string out;
  for (char c : python_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return Value(std::move(out));
}

Value filter_first(const Value& v, const Arguments& a) {
  bind(a, {}, "first");
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value filter_last(const Value& v, const Arguments& a) {
  bind(a, {}, "last");
  if (v.is_undefined()) return Value::undefined("No last item, sequence was empty.");
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// Python's float() of a string: surrounding whitespace allowed, then a whole number.
std::optional<double> parse_float(const std::string& text) {
  const std::string s = pystr::strip(text, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  std::string lowered = pystr::lower(s);
  std::string digits;
  for (char c : lowered)
    if (c != '_') digits += c;
  try {
    std::size_t used = 0;
    const double d = std::stod(digits, &used);
    if (used != digits.size()) return std::nullopt;
    return d;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

Value filter_float(const Value& v, const Arguments& a) {
  auto b = bind(a, {"default"}, "float");
  const Value fallback = b[0] ? *b[0] : Value(0.0);
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string())
    if (auto d = parse_float(v.as_string())) return Value(*d);
  return fallback;
}

Value filter_int(const Value& v, const Arguments& a) {
  auto b = bind(a, {"default", "base"}, "int");
  const Value fallback = b[0] ? *b[0] : Value(0);
  const std::int64_t base = int_arg(b[1], 10, "int base");
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    const double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value(static_cast<std::int64_t>(d));
  }
  if (!v.is_string()) return fallback;
  std::string s = pystr::strip(v.as_string(), std::nullopt, true, true);
  std::string digits;
  for (char c : s)
    if (c != '_') digits += c;
  try {
    std::size_t used = 0;
    const long long n = std::stoll(digits, &used, static_cast<int>(base));
    if (used == digits.size() && !digits.empty()) return Value(static_cast<std::int64_t>(n));
  } catch (const std::exception&) {
  }
  if (auto d = parse_float(v.as_string()))
    if (std::isfinite(*d) && std::fabs(*d) < 9.2e18) return Value(static_cast<std::int64_t>(*d));
  return fallback;
}

Value filter_indent(const Value& v, const Arguments& a) {
  auto b = bind(a, {"width", "first", "blank"}, "indent");
  std::string indention;
  if (b[0] && b[0]->is_string())
    indention = b[0]->as_string();
  else
    indention = std::string(
        static_cast<std::size_t>(std::max<std::int64_t>(0, int_arg(b[0], 4, "indent width"))), ' ');
  const std::string s = python_str(v) + "\n";  // jinja2's quirk for splitlines
  std::vector<std::string> lines = pystr::splitlines(s);
  std::string out;
  if (bool_arg(b[2], false)) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i) out.append("\n").append(indention);
      out.append(lines[i]);
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i) {
      out.append("\n");
      if (!lines[i].empty()) out.append(indention);
      out.append(lines[i]);
    }
  }
  if (bool_arg(b[1], false)) out = indention + out;
  return Value(std::move(out));
}

Value filter_items(const Value& v, const Arguments& a) {
  bind(a, {}, "items");
  if (v.is_undefined()) return Value(List{});
  if (!v.is_dict()) type_error("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [key, value] : v.as_dict().entries()) out.emplace_back(List{key, value}, true);
  return Value(std::move(out));
}

Value filter_join(const Value& v, const Arguments& a) {
  auto b = bind(a, {"d", "attribute"}, "join");
  const std::string sep = b[0] ? python_str(*b[0]) : "";
  std::optional<std::string> attribute;
  if (b[1] && !b[1]->is_none()) attribute = python_str(*b[1]);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += python_str(attribute ? attribute_path(item, *attribute) : item);
    check_size(out.size());
  }
  return Value(std::move(out));
}

Value filter_list(const Value& v, const Arguments& a) {
  bind(a, {}, "list");
  return Value(iterate(v));
}

Value filter_lower(const Value& v, const Arguments& a) {
  bind(a, {}, "lower");
  return Value(pystr::lower(python_str(v)));
}

Value filter_upper(const Value& v, const Arguments& a) {
  bind(a, {}, "upper");
  return Value(pystr::upper(python_str(v)));
}

Value filter_map(const Value& v, const Arguments& a) {
  List out;
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [key, value] : a.keyword) {
    if (key == "attribute")
      attribute = &value;
    else if (key == "default")
      fallback = &value;
  }
  if (attribute) {
    for (const Value& item : iterate(v)) {
      Value x = attribute_path(item, python_str(*attribute));
      out.push_back(x.is_undefined() && fallback ? *fallback : x);
    }
    return Value(std::move(out));
  }
  if (a.positional.empty()) type_error("map requires a filter argument");
  if (!a.positional[0].is_string()) type_error("map: the filter name must be a string");
  const std::string name = a.positional[0].as_string();
  if (!is_filter(name)) unsupported("map with the filter '" + name + "'");
  Arguments rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : iterate(v)) out.push_back(apply_filter(name, item, rest));
  return Value(std::move(out));
}

// select / reject / selectattr / rejectattr: the items whose (attribute's) test holds or not.
Value select_items(const Value& v, const Arguments& a, bool by_attribute, bool keep) {
  std::size_t next = 0;
  std::optional<std::string> attribute;
  if (by_attribute) {
    if (a.positional.empty()) type_error("missing the attribute to test");
    attribute = python_str(a.positional[next++]);
  }
  std::optional<std::string> test;
  if (next < a.positional.size()) test = python_str(a.positional[next++]);
  if (test && !is_test(*test)) unsupported("selecting with the test '" + *test + "'");
  Arguments rest;
  rest.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next),
                         a.positional.end());
  rest.keyword = a.keyword;
  List out;
  for (const Value& item : iterate(v)) {
    const Value subject = attribute ? attribute_path(item, *attribute) : item;
    const bool holds = test ? apply_test(*test, subject, rest) : subject.truthy();
    if (holds == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value filter_select(const Value& v, const Arguments& a) {
  return select_items(v, a, false, true);
}
Value filter_reject(const Value& v, const Arguments& a) {
  return select_items(v, a, false, false);
}
Value filter_selectattr(const Value& v, const Arguments& a) {
  return select_items(v, a, true, true);
}
Value filter_rejectattr(const Value& v, const Arguments& a) {
  return select_items(v, a, true, false);
}

Value extreme(const Value& v, const Arguments& a, bool want_max) {
  auto b = bind(a, {"case_sensitive", "attribute"}, want_max ? "max" : "min");
  std::optional<std::string> attribute;
  if (b[1] && !b[1]->is_none()) attribute = python_str(*b[1]);
  const bool case_sensitive = bool_arg(b[0], false);
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  std::size_t best = 0;
  Value best_key = sort_key(items[0], attribute, case_sensitive);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(items[i], attribute, case_sensitive);
    if (want_max ? less(best_key, key) : less(key, best_key)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value filter_max(const Value& v, const Arguments& a) {
  return extreme(v, a, true);
}
Value filter_min(const Value& v, const Arguments& a) {
  return extreme(v, a, false);
}

Value filter_replace(const Value& v, const Arguments& a) {
  auto b = bind(a, {"old", "new", "count"}, "replace");
  const std::string s = python_str(v);
  return Value(pystr::replace(s, python_str(b[0].value_or(Value(""))),
                              python_str(b[1].value_or(Value(""))),
                              int_arg(b[2], -1, "replace count")));
}

Value filter_reverse(const Value& v, const Arguments& a) {
  bind(a, {}, "reverse");
  if (v.is_string()) {
    std::u32string s = pystr::decode(v.as_string());
    std::reverse(s.begin(), s.end());
    return Value(pystr::encode(s));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

// Python's round(x, n): the double's exact value rounded to n decimals, ties to even
// (glibc's printf rounds the exact binary value the same way: 2.675 is 2.67).
double python_round(double x, std::int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits < 0) {
    const double scale = std::pow(10.0, static_cast<double>(-digits));
    return std::nearbyint(x / scale) * scale;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<std::int64_t>(digits, 300)), x);
  return std::strtod(buf, nullptr);
}

Value filter_round(const Value& v, const Arguments& a) {
  auto b = bind(a, {"precision", "method"}, "round");
  const std::int64_t precision = int_arg(b[0], 0, "round precision");
  const std::string method = b[1] ? string_arg(b[1], "round method") : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    fail("FilterArgumentError: method must be common, ceil or floor");
  if (!v.is_number()) type_error("type " + v.type_name() + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_int() || v.is_bool()) return Value(v.as_int());
    return Value(python_round(v.as_double(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value filter_safe(const Value& v, const Arguments& a) {
  bind(a, {}, "safe");
  return Value(python_str(v));
}

Value filter_sort(const Value& v, const Arguments& a) {
  auto b = bind(a, {"reverse", "case_sensitive", "attribute"}, "sort");
  std::optional<std::string> attribute;
  if (b[2] && !b[2]->is_none()) attribute = python_str(*b[2]);
  return Value(sorted(iterate(v), attribute, bool_arg(b[1], false), bool_arg(b[0], false)));
}

Value filter_string(const Value& v, const Arguments& a) {
  bind(a, {}, "string");
  return Value(python_str(v));
}

Value filter_sum(const Value& v, const Arguments& a) {
  auto b = bind(a, {"attribute", "start"}, "sum");
  std::optional<std::string> attribute;
  if (b[0] && !b[0]->is_none()) attribute = python_str(*b[0]);
  Value total = b[1] ? *b[1] : Value(0);
  for (const Value& item : iterate(v))
    total = arithmetic("+", total, attribute ? attribute_path(item, *attribute) : item);
  return total;
}

Value filter_title(const Value& v, const Arguments& a) {
  bind(a, {}, "title");
  // jinja2 splits before runs of [-\s({\[<] and capitalizes every piece, separators included.
  const std::u32string s = pystr::decode(python_str(v));
  auto separator = [](char32_t c) {
    return pystr::is_space(c) || c == U'-' || c == U'(' || c == U'{' || c == U'[' || c == U'<';
  };
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    const bool sep = separator(s[i]);
    while (j < s.size() && separator(s[j]) == sep) ++j;
    const std::u32string_view piece = std::u32string_view(s).substr(i, j - i);
    out += pystr::upper(pystr::encode(piece.substr(0, 1))) +
           pystr::lower(pystr::encode(piece.substr(1)));
    i = j;
  }
  return Value(std::move(out));
}

// transformers' own tojson: json.dumps(x, ensure_ascii=False, indent, separators, sort_keys),
// without jinja2's HTML escaping.
Value filter_tojson(const Value& v, const Arguments& a) {
  auto b = bind(a, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
  JsonStyle style;
  style.ensure_ascii = bool_arg(b[0], false);
  if (b[1] && !b[1]->is_none()) {
    if (b[1]->is_string())
      style.indent = b[1]->as_string();
    else
      style.indent = std::string(
          static_cast<std::size_t>(std::max<std::int64_t>(0, int_arg(b[1], 0, "tojson indent"))),
          ' ');
  }
  if (b[2] && !b[2]->is_none()) {
    if (!b[2]->is_list() || b[2]->as_list().size() != 2 || !b[2]->as_list()[0].is_string() ||
        !b[2]->as_list()[1].is_string())
      type_error("tojson separators must be a pair of strings");
    style.item_separator = b[2]->as_list()[0].as_string();
    style.key_separator = b[2]->as_list()[1].as_string();
  }
  style.sort_keys = bool_arg(b[3], false);
  return Value(python_json(v, style));
}

Value filter_trim(const Value& v, const Arguments& a) {
  auto b = bind(a, {"chars"}, "trim");
  return Value(pystr::strip(python_str(v), optional_string(b[0], "trim chars"), true, true));
}

Value filter_unique(const Value& v, const Arguments& a) {
  auto b = bind(a, {"case_sensitive", "attribute"}, "unique");
  std::optional<std::string> attribute;
  if (b[1] && !b[1]->is_none()) attribute = python_str(*b[1]);
  List out, seen;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(item, attribute, bool_arg(b[0], false));
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value(std::move(out));
}

Value filter_wordcount(const Value& v, const Arguments& a) {
  bind(a, {}, "wordcount");
  std::int64_t words = 0;
  bool in_word = false;
  for (char32_t c : pystr::decode(python_str(v))) {
    const std::string ch = pystr::encode(std::u32string_view(&c, 1));
    const bool word = c == U'_' || pystr::all_of(ch, pystr::CharClass::alnum);
    if (word && !in_word) ++words;
    in_word = word;
  }
  return Value(words);
}

struct NamedFilter {
  const char* name;
  Filter filter;
};

const NamedFilter kFilters[] = {
    {"abs", filter_abs},
    {"capitalize", filter_capitalize},
    {"count", filter_length},
    {"d", filter_default},
    {"default", filter_default},
    {"dictsort", filter_dictsort},
    {"e", filter_escape},
    {"escape", filter_escape},
    {"first", filter_first},
    {"float", filter_float},
    {"indent", filter_indent},
    {"int", filter_int},
    {"items", filter_items},
    {"join", filter_join},
    {"last", filter_last},
    {"length", filter_length},
    {"list", filter_list},
    {"lower", filter_lower},
    {"map", filter_map},
    {"max", filter_max},
    {"min", filter_min},
    {"reject", filter_reject},
    {"rejectattr", filter_rejectattr},
    {"replace", filter_replace},
    {"reverse", filter_reverse},
    {"round", filter_round},
    {"safe", filter_safe},
    {"select", filter_select},
    {"selectattr", filter_selectattr},
    {"sort", filter_sort},
    {"string", filter_string},
    {"sum", filter_sum},
    {"title", filter_title},
    {"tojson", filter_tojson},
    {"trim", filter_trim},
    {"unique", filter_unique},
    {"upper", filter_upper},
    {"wordcount", filter_wordcount},
};

const char* const kJinjaFilters[] = {"attr",        "batch",  "center",    "filesizeformat",
                                     "forceescape", "format", "groupby",   "pprint",
                                     "random",      "slice",  "striptags", "truncate",
                                     "urlencode",   "urlize", "wordwrap",  "xmlattr"};

// --- tests ---
bool is_identical(const Value& a, const Value& b) {
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_bool() || b.is_bool()) return a.is_bool() && b.is_bool() && a.as_bool() == b.as_bool();
  if (a.is_undefined() || b.is_undefined()) return false;
  if (a.kind() != b.kind()) return false;
  if (a.is_int()) return a.as_int() == b.as_int() && a.as_int() >= -5 && a.as_int() <= 256;
  if (a.is_string()) return &a.as_string() == &b.as_string();
  if (a.is_list()) return &a.as_list() == &b.as_list();
  if (a.is_dict()) return &a.as_dict() == &b.as_dict();
  return equal(a, b);
}

Value one_arg(const Arguments& a, const std::string& test) {
  auto b = bind(a, {"other"}, test);
  if (!b[0]) type_error(test + "() missing 1 required positional argument");
  return *b[0];
}

bool test_by_name(const std::string& name, const Value& v, const Arguments& a) {
  auto none = [&] { bind(a, {}, name); };
  if (name == "defined") return none(), !v.is_undefined();
  if (name == "undefined") return none(), v.is_undefined();
  if (name == "none") return none(), v.is_none();
  if (name == "boolean") return none(), v.is_bool();
  if (name == "false") return none(), v.is_bool() && !v.as_bool();
  if (name == "true") return none(), v.is_bool() && v.as_bool();
  if (name == "integer") return none(), v.is_int();
  if (name == "float") return none(), v.is_float();
  if (name == "number") return none(), v.is_number();
  if (name == "string") return none(), v.is_string();
  if (name == "mapping") return none(), v.is_dict();
  if (name == "iterable")
    return none(), v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence")
    return none(), v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "callable") return none(), v.is_callable();
  if (name == "escaped") return none(), false;
  if (name == "lower") return none(), pystr::is_lower(python_str(v));
  if (name == "upper") return none(), pystr::is_upper(python_str(v));
  if (name == "odd" || name == "even") {
    none();
    const Value r = arithmetic("%", v, Value(2));
    return equal(r, Value(1)) == (name == "odd");
  }
  if (name == "divisibleby") {
    auto b = bind(a, {"num"}, name);
    if (!b[0]) type_error("divisibleby() missing 1 required positional argument: 'num'");
    return equal(arithmetic("%", v, *b[0]), Value(0));
  }
  if (name == "filter") return none(), v.is_string() && is_filter(v.as_string());
  if (name == "test") return none(), v.is_string() && is_test(v.as_string());
  if (name == "in") return contains(one_arg(a, name), v);
  if (name == "sameas") return is_identical(v, one_arg(a, name));
  if (name == "==" || name == "eq" || name == "equalto") return equal(v, one_arg(a, name));
  if (name == "!=" || name == "ne") return !equal(v, one_arg(a, name));
  if (name == "<" || name == "lt" || name == "lessthan") return less(v, one_arg(a, name));
  if (name == ">" || name == "gt" || name == "greaterthan") return less(one_arg(a, name), v);
  if (name == "<=" || name == "le") return !less(one_arg(a, name), v);
  if (name == ">=" || name == "ge") return !less(v, one_arg(a, name));
  unsupported("the '" + name + "' test");
}

const char* const kTests[] = {
    "defined", "undefined", "none",   "boolean",  "false",    "true",        "integer",
    "float",   "number",    "string", "mapping",  "iterable", "sequence",    "callable",
    "escaped", "lower",     "upper",  "odd",      "even",     "divisibleby", "filter",
    "test",    "in",        "sameas", "==",       "eq",       "equalto",     "!=",
    "ne",      "<",         "lt",     "lessthan", ">",        "gt",          "greaterthan",
    "<=",      "le",        ">=",     "ge"};

// --- methods of str, dict and list ---
const char* const kStrMethods[] = {
    "strip",        "lstrip",    "rstrip",       "split",       "rsplit",  "splitlines",
    "startswith",   "endswith",  "lower",        "upper",       "title",   "capitalize",
    "replace",      "find",      "rfind",        "count",       "join",    "isdigit",
    "isalpha",      "isalnum",   "isspace",      "islower",     "isupper", "format",
    "index",        "rindex",    "center",       "ljust",       "rjust",   "zfill",
    "casefold",     "swapcase",  "partition",    "rpartition",  "encode",  "expandtabs",
    "isdecimal",    "isnumeric", "isidentifier", "isprintable", "istitle", "removeprefix",
    "removesuffix", "translate", "maketrans",    "format_map",  "isascii"};
const char* const kDictMethods[] = {"items", "keys",    "values",     "get",    "copy",    "clear",
                                    "pop",   "popitem", "setdefault", "update", "fromkeys"};
const char* const kListMethods[] = {"append", "extend",  "insert", "pop",   "remove", "clear",
                                    "sort",   "reverse", "count",  "index", "copy"};
const char* const kMutators[] = {"append", "extend",  "insert",  "pop",        "remove", "clear",
                                 "sort",   "reverse", "popitem", "setdefault", "update"};

template <std::size_t N>
bool listed(const char* const (&names)[N], std::string_view name) {
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return name == n; });
}

bool has_method(const Value& object, std::string_view name) {
  if (object.is_string()) return listed(kStrMethods, name);
  if (object.is_dict()) return listed(kDictMethods, name);
  if (object.kind() == Value::Kind::list) return listed(kListMethods, name);
  if (object.kind() == Value::Kind::tuple) return name == "count" || name == "index";
  return false;
}

// str.startswith / endswith with a string or a tuple of strings.
bool affix(const std::string& s, const Value& what, bool prefix, const std::string& method) {
  auto one = [&](const Value& p) {
    if (!p.is_string())
      type_error(method + " arg must be str or a tuple of str, not " + p.type_name());
    const std::string& x = p.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (what.kind() == Value::Kind::tuple)
    return std::any_of(what.as_list().begin(), what.as_list().end(), one);
  return one(what);
}

// The str methods implemented below; the other names of kStrMethods are Python's too, so a
// template calling them is outside the subset rather than wrong.
const char* const kStrImplemented[] = {
    "strip", "lstrip",  "rstrip",  "split",      "rsplit",  "splitlines", "startswith", "endswith",
    "lower", "upper",   "title",   "capitalize", "replace", "find",       "rfind",      "count",
    "join",  "isdigit", "isalpha", "isalnum",    "isspace", "islower",    "isupper"};

Value string_method(const std::string& s, const std::string& m, const Arguments& a) {
  if (!listed(kStrImplemented, m)) unsupported("the string method '" + m + "'");
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    auto b = bind(a, {"chars"}, m);
    return Value(pystr::strip(s, optional_string(b[0], m + " arg"), m != "rstrip", m != "lstrip"));
  }
  if (m == "split" || m == "rsplit") {
    auto b = bind(a, {"sep", "maxsplit"}, m);
    return string_list(pystr::split(s, optional_string(b[0], m + " sep"),
                                    int_arg(b[1], -1, m + " maxsplit"), m == "rsplit"));
  }
  if (m == "splitlines") {
    auto b = bind(a, {"keepends"}, m);
    return string_list(pystr::splitlines(s, bool_arg(b[0], false)));
  }
  if (m == "startswith" || m == "endswith") {
    auto b = bind(a, {"prefix"}, m);
    if (!b[0]) type_error(m + "() takes at least 1 argument (0 given)");
    return Value(affix(s, *b[0], m == "startswith", m));
  }
  if (m == "lower" || m == "upper" || m == "title" || m == "capitalize") {
    bind(a, {}, m);
    if (m == "lower") return Value(pystr::lower(s));
    if (m == "upper") return Value(pystr::upper(s));
    if (m == "title") return Value(pystr::title(s));
    return Value(pystr::capitalize(s));
  }
  if (m == "replace") {
    auto b = bind(a, {"old", "new", "count"}, m);
    return Value(pystr::replace(s, string_arg(b[0], "replace old"), string_arg(b[1], "replace new"),
                                int_arg(b[2], -1, "replace count")));
  }
  if (m == "find" || m == "rfind" || m == "count") {
    auto b = bind(a, {"sub"}, m);
    const std::string& sub = string_arg(b[0], m + " sub");
    if (m == "count") return Value(pystr::count(s, sub));
    return Value(pystr::find(s, sub, m == "rfind"));
  }
  if (m == "join") {
    auto b = bind(a, {"iterable"}, m);
    if (!b[0]) type_error("join() takes exactly one argument (0 given)");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(*b[0])) {
      if (!item.is_string())
        type_error("sequence item: expected str instance, " + item.type_name() + " found");
      if (!first) out += s;
      first = false;
      out += item.as_string();
      check_size(out.size());
    }
    return Value(std::move(out));
  }
  bind(a, {}, m);
  if (m == "isdigit") return Value(pystr::all_of(s, pystr::CharClass::digit));
  if (m == "isalpha") return Value(pystr::all_of(s, pystr::CharClass::alpha));
  if (m == "isalnum") return Value(pystr::all_of(s, pystr::CharClass::alnum));
  if (m == "isspace") return Value(pystr::all_of(s, pystr::CharClass::space));
  if (m == "islower") return Value(pystr::is_lower(s));
  if (m == "isupper") return Value(pystr::is_upper(s));
  unsupported("the string method '" + m + "'");
}

Value dict_method(const Dict& d, const std::string& m, const Arguments& a) {
  if (m == "get") {
    auto b = bind(a, {"key", "default"}, m);
    if (!b[0]) type_error("get expected at least 1 argument, got 0");
    if (b[0]->is_string())
      if (const Value* v = d.find(b[0]->as_string())) return *v;
    return b[1] ? *b[1] : Value::none();
  }
  bind(a, {}, m);
  if (m == "copy") return Value(d);
  if (m != "items" && m != "keys" && m != "values") unsupported("the dict method '" + m + "'");
  List out;
  for (const auto& [key, value] : d.entries()) {
    if (m == "items")
      out.emplace_back(List{key, value}, true);
    else if (m == "keys")
      out.emplace_back(key);
    else
      out.push_back(value);
  }
  return Value(std::move(out));
}

Value list_method(const Value& list, const std::string& m, const Arguments& a) {
  if (m == "copy") {
    bind(a, {}, m);
    return Value(list.as_list(), list.kind() == Value::Kind::tuple);
  }
  auto b = bind(a, {"value"}, m);
  if (!b[0]) type_error(m + "() takes exactly one argument (0 given)");
  const List& items = list.as_list();
  if (m == "count")
    return integer(static_cast<std::size_t>(std::count_if(
        items.begin(), items.end(), [&](const Value& x) { return equal(x, *b[0]); })));
  for (std::size_t i = 0; i < items.size(); ++i)
    if (equal(items[i], *b[0])) return integer(i);
  fail("ValueError: " + python_repr(*b[0]) + " is not in list");
}

Value call_method(const Value& object, const std::string& m, const Arguments& a) {
  if (listed(kMutators, m) && !object.is_string())
    fail("SecurityError: access to attribute '" + m + "' of '" + object.type_name() +
         "' object is unsafe.");
  if (object.is_string()) return string_method(object.as_string(), m, a);
  if (object.is_dict()) return dict_method(object.as_dict(), m, a);
  return list_method(object, m, a);
}

class BoundMethod : public Callable {
 public:
  BoundMethod(Value object, std::string method)
      : object_(std::move(object)), method_(std::move(method)) {}
  Value call(Evaluator&, Arguments& arguments) const override {
    return call_method(object_, method_, arguments);
  }
  std::string name() const override { return object_.type_name() + "." + method_; }

 private:
  Value object_;
  std::string method_;
};

// --- loop ---
// `loop.cycle(a, b, ...)`: the argument at the iteration's index, round robin.
class LoopCycle : public Callable {
 public:
  explicit LoopCycle(std::size_t index0) : index0_(index0) {}
  Value call(Evaluator&, Arguments& arguments) const override {
    if (arguments.positional.empty()) type_error("no items for cycling given");
    return arguments.positional[index0_ % arguments.positional.size()];
  }
  std::string name() const override { return "loop.cycle"; }

 private:
  std::size_t index0_;
};

Value loop_attribute(const LoopState& loop, const std::string& name) {
  const std::size_t n = loop.items->size(), i = loop.index;
  if (name == "index0") return integer(i);
  if (name == "index") return integer(i + 1);
  if (name == "revindex0") return integer(n - i - 1);
  if (name == "revindex") return integer(n - i);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i + 1 == n);
  if (name == "length") return integer(n);
  if (name == "depth") return Value(1);
  if (name == "depth0") return Value(0);
  if (name == "previtem")
    return i > 0 ? (*loop.items)[i - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return i + 1 < n ? (*loop.items)[i + 1] : Value::undefined("there is no next item");
  if (name == "cycle") return Value(std::make_shared<const LoopCycle>(i));
  if (name == "changed") unsupported("loop.changed");
  return Value::undefined("'LoopContext object' has no attribute '" + name + "'");
}

// --- global functions ---
class Function : public Callable {
 public:
  using Body = std::function<Value(const Arguments&)>;
  Function(std::string name, Body body) : name_(std::move(name)), body_(std::move(body)) {}
  Value call(Evaluator&, Arguments& arguments) const override { return body_(arguments); }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  Body body_;
};

Value range(const Arguments& a) {
  if (!a.keyword.empty()) type_error("range() takes no keyword arguments");
  if (a.positional.empty() || a.positional.size() > 3)
    type_error("range expected 1 to 3 arguments, got " + std::to_string(a.positional.size()));
  std::int64_t start = 0, stop = 0, step = 1;
  std::vector<std::int64_t> n;
  for (const Value& v : a.positional) {
    if (!v.is_int() && !v.is_bool())
      type_error("'" + v.type_name() + "' object cannot be interpreted as an integer");
    n.push_back(v.as_int());
  }
  if (n.size() == 1)
    stop = n[0];
  else {
    start = n[0];
    stop = n[1];
    if (n.size() == 3) step = n[2];
  }
  if (step == 0) fail("ValueError: range() arg 3 must not be zero");
  const long double count_f = step > 0
                                  ? (static_cast<long double>(stop) - start + step - 1) / step
                                  : (static_cast<long double>(start) - stop - step - 1) / -step;
  const std::int64_t count = count_f <= 0 ? 0 : static_cast<std::int64_t>(count_f);
  if (count > kMaxRange)
    fail("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  List out;
  out.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) out.emplace_back(start + i * step);
  return Value(std::move(out));
}

Dict dict_from(const Arguments& a, const std::string& function) {
  if (a.positional.size() > 1) type_error(function + " expected at most 1 argument");
  Dict d;
  if (!a.positional.empty()) {
    const Value& v = a.positional[0];
    if (!v.is_dict()) unsupported(function + "() from anything but a mapping and keywords");
    d = v.as_dict();
  }
  for (const auto& [key, value] : a.keyword) d.set(key, value);
  return d;
}

Value strftime_now(const Arguments& a) {
  auto b = bind(a, {"format"}, "strftime_now");
  const std::string& format = string_arg(b[0], "strftime_now format");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buf(256, '\0');
  while (true) {
    const std::size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
    if (n > 0 || format.empty()) return Value(buf.substr(0, n));
    if (buf.size() > 65536) return Value(std::string());
    buf.resize(buf.size() * 4);
  }
}

}  // namespace

bool is_filter(std::string_view name) {
  return std::any_of(std::begin(kFilters), std::end(kFilters),
                     [&](const NamedFilter& f) { return name == f.name; });
}
bool is_jinja_filter(std::string_view name) {
  return is_filter(name) || listed(kJinjaFilters, name);
}
bool is_test(std::string_view name) {
  return listed(kTests, name);
}
bool is_jinja_test(std::string_view name) {
  return is_test(name);
}

Value apply_filter(const std::string& name, const Value& input, const Arguments& args) {
  for (const NamedFilter& f : kFilters)
    if (name == f.name) return f.filter(input, args);
  unsupported("the '" + name + "' filter");
}

bool apply_test(const std::string& name, const Value& input, const Arguments& args) {
  return test_by_name(name, input, args);
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) fail(object.undefined_message());
  if (object.is_loop()) return loop_attribute(object.as_loop(), name);
  if (has_method(object, name)) return Value(std::make_shared<const BoundMethod>(object, name));
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().find(name)) return *v;
    return Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  if (object.is_namespace()) {
    if (const Value* v = object.as_namespace().attributes.find(name)) return *v;
    return Value::undefined("'jinja2.utils.Namespace object' has no attribute '" + name + "'");
  }
  return Value::undefined("'" + object.type_name() + " object' has no attribute '" + name + "'");
}

Value get_item(const Value& object, const Value& index) {
  if (object.is_undefined()) fail(object.undefined_message());
  if (object.is_dict() && index.is_string()) {
    if (const Value* v = object.as_dict().find(index.as_string())) return *v;
  } else if ((object.is_list() || object.is_string()) && (index.is_int() || index.is_bool())) {
    std::int64_t i = index.as_int();
    if (object.is_list()) {
      const auto n = static_cast<std::int64_t>(object.as_list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return object.as_list()[static_cast<std::size_t>(i)];
      return Value::undefined("'" + object.type_name() + " object' has no element " +
                              std::to_string(index.as_int()));
    }
    const std::u32string s = pystr::decode(object.as_string());
    const auto n = static_cast<std::int64_t>(s.size());
    if (i < 0) i += n;
    if (i >= 0 && i < n)
      return Value(pystr::encode(std::u32string_view(s).substr(static_cast<std::size_t>(i), 1)));
    return Value::undefined("'str object' has no element " + std::to_string(index.as_int()));
  }
  if (index.is_string()) return get_attribute(object, index.as_string());
  return Value::undefined("'" + object.type_name() + " object' has no element " +
                          python_repr(index));
}

Value get_slice(const Value& object, const Value* start, const Value* stop, const Value* step) {
  if (object.is_undefined()) fail(object.undefined_message());
  // jinja2 slices with Python's own subscript: anything else fails (no undefined here).
  if (object.is_dict()) type_error("unhashable type: 'slice'");
  if (!object.is_list() && !object.is_string())
    type_error("'" + object.type_name() + "' object is not subscriptable");
  auto bound = [](const Value* v, const char* what) -> std::optional<std::int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (!v->is_int() && !v->is_bool())
      type_error(std::string("slice ") + what + " indices must be integers or None");
    return v->as_int();
  };
  const std::int64_t st = bound(step, "step").value_or(1);
  if (st == 0) fail("ValueError: slice step cannot be zero");
  std::u32string chars;
  const bool text = object.is_string();
  if (text) chars = pystr::decode(object.as_string());
  const auto n = static_cast<std::int64_t>(text ? chars.size() : object.as_list().size());
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
    if (!v) return fallback;
    std::int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  const std::int64_t b = adjust(bound(start, "start"), st < 0 ? n - 1 : 0);
  const std::int64_t e = adjust(bound(stop, "stop"), st < 0 ? -1 : n);
  std::vector<std::size_t> picked;
  for (std::int64_t i = b; st > 0 ? i < e : i > e; i += st)
    picked.push_back(static_cast<std::size_t>(i));
  if (text) {
    std::u32string out;
    for (std::size_t i : picked) out += chars[i];
    return Value(pystr::encode(out));
  }
  List out;
  for (std::size_t i : picked) out.push_back(object.as_list()[i]);
  return Value(std::move(out), object.kind() == Value::Kind::tuple);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::undefined:
      return false;
    case Value::Kind::string:
      if (!item.is_string())
        type_error("'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::list:
    case Value::Kind::tuple:
      return std::any_of(container.as_list().begin(), container.as_list().end(),
                         [&](const Value& x) { return equal(x, item); });
    case Value::Kind::dict:
      return item.is_string() && container.as_dict().find(item.as_string());
    default:
      type_error("argument of type '" + container.type_name() + "' is not iterable");
  }
}

List iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::undefined:
      return {};
    case Value::Kind::list:
    case Value::Kind::tuple:
      return value.as_list();
    case Value::Kind::dict: {
      List keys;
      for (const auto& [key, v] : value.as_dict().entries()) keys.emplace_back(key);
      return keys;
    }
    case Value::Kind::string: {
      List chars;
      for (char32_t c : pystr::decode(value.as_string()))
        chars.emplace_back(pystr::encode(std::u32string_view(&c, 1)));
      return chars;
    }
    default:
      type_error("'" + value.type_name() + "' object is not iterable");
  }
}

Dict global_functions() {
  Dict g;
  auto add = [&g](const std::string& name, Function::Body body) {
    g.set(name, Value(std::make_shared<const Function>(name, std::move(body))));
  };
  add("range", range);
  add("dict", [](const Arguments& a) { return Value(dict_from(a, "dict")); });
  add("namespace", [](const Arguments& a) {
    auto ns = std::make_shared<Namespace>();
    ns->attributes = dict_from(a, "namespace");
    return Value(ns);
  });
  add("raise_exception", [](const Arguments& a) -> Value {
    auto b = bind(a, {"message"}, "raise_exception");
    fail(b[0] ? python_str(*b[0]) : std::string());
  });
  add("strftime_now", strftime_now);
  for (const char* name : {"lipsum", "cycler", "joiner"})
    add(name, [name](const Arguments&) -> Value {
      unsupported(std::string("the global function '") + name + "'");
    });
  return g;
}

Value negate(const Value& a, bool minus) {
  if (a.is_undefined()) fail(a.undefined_message());
  if (a.is_float()) return Value(minus ? -a.as_double() : a.as_double());
  if (a.is_int() || a.is_bool()) {
    if (minus && a.as_int() == std::numeric_limits<std::int64_t>::min()) fail("integer overflow");
    return Value(minus ? -a.as_int() : a.as_int());
  }
  type_error(std::string("bad operand type for unary ") + (minus ? "-" : "+") + ": '" +
             a.type_name() + "'");
}

namespace {

[[noreturn]] void unsupported_operands(const std::string& op, const Value& a, const Value& b) {
  type_error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
             b.type_name() + "'");
}

Value repeat(const Value& seq, std::int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    check_size(seq.as_string().size() * static_cast<std::size_t>(times));
    std::string out;
    for (std::int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  check_size(seq.as_list().size() * static_cast<std::size_t>(times));
  List out;
  for (std::int64_t i = 0; i < times; ++i)
    out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value(std::move(out), seq.kind() == Value::Kind::tuple);
}

// CPython's float divmod: the remainder takes the divisor's sign.
std::pair<double, double> float_divmod(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return {floordiv, mod};
}

Value int_power(std::int64_t base, std::int64_t exp) {
  if (exp < 0) {
    if (base == 0) fail("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    return Value(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  std::int64_t result = 1;
  while (exp > 0) {
    if (exp & 1)
      if (__builtin_mul_overflow(result, base, &result)) fail("integer overflow in **");
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) fail("integer overflow in **");
  }
  return Value(result);
}

}  // namespace

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail(a.undefined_message());
  if (b.is_undefined()) fail(b.undefined_message());
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (floats) return Value(a.as_double() + b.as_double());
    if (numbers) {
      std::int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow in +");
      return Value(r);
    }
    if (a.is_string() && b.is_string()) {
      check_size(a.as_string().size() + b.as_string().size());
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && a.kind() == b.kind()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      check_size(out.size());
      return Value(std::move(out), a.kind() == Value::Kind::tuple);
    }
    if (a.is_string() || b.is_string())
      type_error(a.is_string()
                     ? "can only concatenate str (not \"" + b.type_name() + "\") to str"
                     : "unsupported operand type(s) for +: '" + a.type_name() + "' and 'str'");
    unsupported_operands("+", a, b);
  }
  if (op == "-") {
    if (floats) return Value(a.as_double() - b.as_double());
    if (numbers) {
      std::int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow in -");
      return Value(r);
    }
    unsupported_operands("-", a, b);
  }
  if (op == "*") {
    if (floats) return Value(a.as_double() * b.as_double());
    if (numbers) {
      std::int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) fail("integer overflow in *");
      return Value(r);
    }
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
    unsupported_operands("*", a, b);
  }
  if (op == "/") {
    if (!numbers) unsupported_operands("/", a, b);
    if (b.as_double() == 0.0) fail("ZeroDivisionError: division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (a.is_string() && op == "%") unsupported("printf-style string formatting ('...' % x)");
    if (!numbers) unsupported_operands(op, a, b);
    if (b.as_double() == 0.0)
      fail(op == "%" ? "ZeroDivisionError: integer division or modulo by zero"
                     : "ZeroDivisionError: integer division or modulo by zero");
    if (floats) {
      const auto [q, r] = float_divmod(a.as_double(), b.as_double());
      return Value(op == "//" ? q : r);
    }
    const std::int64_t x = a.as_int(), y = b.as_int();
    if (x == std::numeric_limits<std::int64_t>::min() && y == -1) fail("integer overflow in //");
    std::int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      q -= 1;
      r += y;
    }
    return Value(op == "//" ? q : r);
  }
  if (op == "**") {
    if (!numbers) unsupported_operands("** or pow()", a, b);
    if (floats) {
      if (a.as_double() < 0 && std::floor(b.as_double()) != b.as_double())
        unsupported("a negative number to a fractional power (a complex number)");
      if (a.as_double() == 0.0 && b.as_double() < 0)
        fail("ZeroDivisionError: 0.0 cannot be raised to a negative power");
      return Value(std::pow(a.as_double(), b.as_double()));
    }
    return int_power(a.as_int(), b.as_int());
  }
  unsupported("the operator '" + op + "'");
}

}  // namespace masque::chat::jinja
