#include "grammar/schema_grammar.hpp"

#include <map>
#include <set>
#include <vector>

#include "masque/error.hpp"

namespace masque::grammar {

namespace {

using Json = nlohmann::ordered_json;

// Keywords that say something about a schema but constrain nothing.
const std::set<std::string> kAnnotations = {"title",    "description", "$schema", "$id",
                                            "examples", "default",     "$comment"};
const std::map<std::string, std::set<std::string>> kKeywords = {
    {"object", {"properties", "required", "additionalProperties"}},
    {"array", {"items", "minItems", "maxItems"}},
    {"string", {"minLength", "maxLength", "pattern"}},
    {"number", {}},
    {"integer", {}},
    {"boolean", {}},
    {"null", {}}};

// Rules every schema may share, emitted once when used.
const std::map<std::string, std::string> kShared = {
    {"json-char", R"([^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
    {"json-string", R"("\"" json-char* "\"")"},
    {"json-integer", R"("-"? ("0" | [1-9] [0-9]{0,15}))"},
    {"json-number", R"(json-integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?)"},
    {"json-object", R"("{" (json-string ":" json-value ("," json-string ":" json-value)*)? "}")"},
    {"json-array", R"("[" (json-value ("," json-value)*)? "]")"},
    {"json-value",
     R"(json-object | json-array | json-string | json-number | "true" | "false" | "null")"}};
const std::map<std::string, std::vector<std::string>> kSharedUses = {
    {"json-string", {"json-char"}},
    {"json-number", {"json-integer"}},
    {"json-object", {"json-string", "json-value"}},
    {"json-array", {"json-value"}},
    {"json-value", {"json-object", "json-array", "json-string", "json-number"}}};

// A GBNF literal for `text` (UTF-8 kept as it is).
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const std::string& source) : source_(source) {}

  std::string compile(const Json& schema) {
    const std::string root = expression(schema, "", "root");
    std::string out = "root ::= " + root + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    for (const auto& [name, body] : kShared)
      if (shared_used_.count(name)) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& pointer, const std::string& what) const {
    throw ConfigError(source_ + ": " + (pointer.empty() ? "/" : pointer) + ": " + what);
  }

  std::string shared(const std::string& name) {
    if (shared_used_.insert(name).second)
      if (const auto it = kSharedUses.find(name); it != kSharedUses.end())
        for (const std::string& used : it->second) shared(used);
    return name;
  }

  // A new rule for `body`, named after the schema's place; returns its name.
  std::string rule(const std::string& hint, const std::string& body) {
    std::string name;
    for (char c : hint) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    std::string unique = name;
    for (int k = 2; names_.count(unique) || kShared.count(unique); ++k)
      unique = name + "-" + std::to_string(k);
    names_.insert(unique);
    rules_.emplace_back(unique, body);
    return unique;
  }

  std::size_t count(const Json& schema, const char* key, const std::string& pointer) const {
    const auto it = schema.find(key);
    if (it == schema.end()) return 0;
    if (!it->is_number_unsigned()) fail(pointer + "/" + key, "expected a non-negative integer");
    if (it->get<std::uint64_t>() > 10000) fail(pointer + "/" + key, "above 10000");
    return it->get<std::size_t>();
  }

  // The types a schema allows: its `type`, else what its keywords imply; empty: any value.
  std::vector<std::string> types(const Json& schema, const std::string& pointer) const {
    std::vector<std::string> out;
    if (const auto it = schema.find("type"); it != schema.end()) {
      for (const Json& t : it->is_array() ? *it : Json::array({*it})) {
        if (!t.is_string() || !kKeywords.count(t.get<std::string>()))
          fail(pointer + "/type", "unsupported type " + t.dump() +
                                      " (object, array, string, number, integer, boolean, null)");
        out.push_back(t.get<std::string>());
      }
      if (out.empty()) fail(pointer + "/type", "an empty list of types");
      return out;
    }
    for (const auto& [type, keywords] : kKeywords)
      for (const std::string& k : keywords)
        if (schema.contains(k) && (out.empty() || out.back() != type)) out.push_back(type);
    return out;
  }

  void check_keywords(const Json& schema, const std::string& pointer,
                      const std::vector<std::string>& types) const {
    for (const auto& [key, value] : schema.items()) {
      if (kAnnotations.count(key) || key == "type" || key == "enum" || key == "const") continue;
      bool applies = false, known = false;
      for (const auto& [type, keywords] : kKeywords) {
        known = known || keywords.count(key);
        for (const std::string& t : types) applies = applies || (t == type && keywords.count(key));
      }
      if (!known)
        fail(pointer + "/" + key,
             "the keyword '" + key + "' is not in masque's JSON-schema subset (docs/instruct.md)");
      if (!applies) fail(pointer + "/" + key, "'" + key + "' does not apply to this schema's type");
    }
  }

  std::string expression(const Json& schema, const std::string& pointer, const std::string& hint) {
    if (schema.is_boolean() && schema.get<bool>()) return shared("json-value");
    if (!schema.is_object()) fail(pointer, "a schema must be an object (or true)");
    if (const auto it = schema.find("const"); it != schema.end()) return literal(it->dump());
    if (const auto it = schema.find("enum"); it != schema.end()) {
      if (!it->is_array() || it->empty()) fail(pointer + "/enum", "expected a non-empty list");
      std::string alternatives;
      for (const Json& v : *it)
        alternatives += (alternatives.empty() ? "" : " | ") + literal(v.dump());
      return "(" + alternatives + ")";
    }
    const std::vector<std::string> allowed = types(schema, pointer);
    check_keywords(schema, pointer, allowed);
    if (allowed.empty()) return shared("json-value");
    std::string alternatives;
    for (const std::string& type : allowed)
      alternatives += (alternatives.empty() ? "" : " | ") + of_type(type, schema, pointer, hint);
    return allowed.size() == 1 ? alternatives : "(" + alternatives + ")";
  }

  std::string of_type(const std::string& type, const Json& schema, const std::string& pointer,
                      const std::string& hint) {
    if (type == "object") return object(schema, pointer, hint);
    if (type == "array") return array(schema, pointer, hint);
    if (type == "string") return string(schema, pointer, hint);
    if (type == "number") return shared("json-number");
    if (type == "integer") return shared("json-integer");
    if (type == "boolean") return R"(("true" | "false"))";
    return R"("null")";
  }

  std::string object(const Json& schema, const std::string& pointer, const std::string& hint) {
    const auto props = schema.find("properties");
    const auto extra = schema.find("additionalProperties");
    if (extra != schema.end() && !(extra->is_boolean() && !extra->get<bool>()))
      fail(pointer + "/additionalProperties",
           "only false is supported (outputs hold the listed properties alone)");
    if (props == schema.end()) {
      if (schema.contains("required")) fail(pointer + "/required", "required without properties");
      return extra == schema.end() ? shared("json-object") : R"("{}")";
    }
    if (!props->is_object()) fail(pointer + "/properties", "expected an object");
    std::set<std::string> required;
    if (const auto it = schema.find("required"); it != schema.end()) {
      if (!it->is_array()) fail(pointer + "/required", "expected a list of property names");
      for (const Json& name : *it) {
        if (!name.is_string() || !props->contains(name.get<std::string>()))
          fail(pointer + "/required", "names " + name.dump() + ", which is not in properties");
        required.insert(name.get<std::string>());
      }
    }
    // "key":value for each property, in order.
    std::vector<std::pair<std::string, bool>> members;  // (expression, required)
    for (const auto& [name, sub] : props->items()) {
      const std::string value = expression(sub, pointer + "/properties/" + name, hint + "-" + name);
      members.emplace_back(literal(Json(name).dump() + ":") + " " + value,
                           required.count(name) > 0);
    }
    // after[i]: properties i.. once one is written (each after a comma); first[i]: the same
    // with none written yet. Rules keep the text linear in the number of properties.
    const std::size_t n = members.size();
    std::vector<std::string> after(n + 1), first(n + 1);
    for (std::size_t i = n; i-- > 0;) {
      const auto& [member, needed] = members[i];
      std::string rest = after[i + 1].empty() ? "" : " " + after[i + 1];
      after[i] = needed ? "\",\" " + member + rest : "(\",\" " + member + ")?" + rest;
      // Rules for what is referred to: after[i] by member i - 1, first[i] by an optional one.
      if (i > 0 && i + 1 < n) after[i] = rule(hint + "-after-" + std::to_string(i), after[i]);
      if (needed)
        first[i] = member + rest;
      else if (first[i + 1].empty())
        first[i] = "(" + member + rest + ")?";
      else
        first[i] = member + rest + " | " + first[i + 1];
      if (i > 0 && i + 1 < n && !members[i - 1].second)
        first[i] = rule(hint + "-from-" + std::to_string(i), first[i]);
    }
    return "\"{\" " + (first[0].empty() ? "" : "(" + first[0] + ") ") + "\"}\"";
  }

  std::string array(const Json& schema, const std::string& pointer, const std::string& hint) {
    const std::size_t min = count(schema, "minItems", pointer);
    const bool bounded = schema.contains("maxItems");
    const std::size_t max = count(schema, "maxItems", pointer);
    if (bounded && max < min) fail(pointer + "/maxItems", "below minItems");
    if (bounded && max == 0) return R"("[]")";
    const auto items = schema.find("items");
    const std::string item =
        rule(hint + "-item", items == schema.end()
                                 ? shared("json-value")
                                 : expression(*items, pointer + "/items", hint + "-item"));
    const std::size_t more_min = min > 0 ? min - 1 : 0;
    const std::string more =
        bounded ? "{" + std::to_string(more_min) + "," + std::to_string(max - 1) + "}"
                : (more_min == 0 ? "*" : "{" + std::to_string(more_min) + ",}");
    const std::string list = item + " (\",\" " + item + ")" + more;
    return "\"[\" " + (min == 0 ? "(" + list + ")?" : list) + " \"]\"";
  }

  // One class repeated: ^[...]*$, ^[...]+$, ^[...]{m}$, ^[...]{m,n}$, ^[...]{m,}$.
  std::string pattern(const std::string& p, const std::string& pointer, std::size_t& min,
                      std::size_t& max, bool& bounded) const {
    const auto bad = [&] {
      fail(pointer + "/pattern",
           "only one character class repeated is supported (e.g. ^[a-z0-9_]{1,20}$), not " +
               Json(p).dump());
    };
    const std::size_t close = p.find(']');
    if (p.size() < 5 || p.compare(0, 2, "^[") != 0 || p.back() != '$' || close == std::string::npos)
      bad();
    const std::string chars = p.substr(2, close - 2);
    if (chars.empty() || chars[0] == '^') bad();
    for (char c : chars)
      if (c == '"' || c == '\\' || c == '[' || static_cast<unsigned char>(c) < 0x20) bad();
    const std::string q = p.substr(close + 1, p.size() - close - 2);
    std::size_t lo = 0, hi = 0;
    bool open = false;
    if (q == "*") {
      open = true;
    } else if (q == "+") {
      lo = 1, open = true;
    } else if (q.size() >= 3 && q.front() == '{' && q.back() == '}') {
      const std::string inner = q.substr(1, q.size() - 2);
      const std::size_t comma = inner.find(',');
      try {
        lo = std::stoul(inner.substr(0, comma));
        if (comma == std::string::npos)
          hi = lo;
        else if (comma + 1 == inner.size())
          open = true;
        else
          hi = std::stoul(inner.substr(comma + 1));
      } catch (const std::exception&) {
        bad();
      }
      if (!open && hi < lo) bad();
    } else {
      bad();
    }
    min = std::max(min, lo);
    if (!open) {
      max = bounded ? std::min(max, hi) : hi;
      bounded = true;
    }
    return "[" + chars + "]";
  }

  std::string string(const Json& schema, const std::string& pointer, const std::string& hint) {
    std::size_t min = count(schema, "minLength", pointer);
    bool bounded = schema.contains("maxLength");
    std::size_t max = count(schema, "maxLength", pointer);
    std::string ch = shared("json-char");
    if (const auto it = schema.find("pattern"); it != schema.end()) {
      if (!it->is_string()) fail(pointer + "/pattern", "expected a string");
      ch = pattern(it->get<std::string>(), pointer, min, max, bounded);
    }
    if (bounded && max < min) fail(pointer, "no string fits the length limits");
    const std::string reps = bounded ? "{" + std::to_string(min) + "," + std::to_string(max) + "}"
                                     : (min == 0 ? "*" : "{" + std::to_string(min) + ",}");
    if (ch == "json-char" && min == 0 && !bounded) return shared("json-string");
    (void)hint;
    return "\"\\\"\" " + ch + reps + " \"\\\"\"";
  }

  const std::string& source_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_{"root"};
  std::set<std::string> shared_used_;
};

}  // namespace

std::string schema_to_gbnf(const nlohmann::ordered_json& schema, const std::string& source) {
  return SchemaCompiler(source).compile(schema);
}

}  // namespace masque::grammar
