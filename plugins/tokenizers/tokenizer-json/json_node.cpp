#include "json_node.hpp"

#include <vector>

#include "masque/error.hpp"
#include "token_files.hpp"

namespace masque::hfjson {

namespace {

const json& null_json() {
  static const json null;
  return null;
}

std::string kind_of(const json& j) {
  return j.type_name();
}

// SAX events that only track where in the document the parser is, for messages about invalid
// JSON (the DOM parse that failed cannot say it).
class PathTracker : public nlohmann::json_sax<json> {
 public:
  std::string path() const {
    std::string p = "$";
    for (const Level& l : stack_) {
      if (l.array)
        p += "[" + std::to_string(l.index) + "]";
      else if (!l.key.empty() || l.has_key)
        p += "." + (l.key.size() > 64 ? l.key.substr(0, 64) + "..." : l.key);
    }
    return p;
  }
  std::string error;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    stack_.push_back({false, 0, "", false, false});
    return true;
  }
  bool key(string_t& k) override {
    stack_.back().key = k;
    stack_.back().has_key = true;
    return true;
  }
  bool end_object() override { return end(); }
  bool start_array(std::size_t) override {
    stack_.push_back({true, 0, "", false, false});
    return true;
  }
  bool end_array() override { return end(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }

 private:
  struct Level {
    bool array;
    std::size_t index;
    std::string key;
    bool has_key;
    bool started;
  };
  bool value() {
    if (!stack_.empty() && stack_.back().array) {
      if (stack_.back().started) ++stack_.back().index;
      stack_.back().started = true;
    }
    return true;
  }
  bool end() {
    stack_.pop_back();
    return value();
  }
  std::vector<Level> stack_;
};

}  // namespace

void Node::fail(const std::string& message) const {
  throw ConfigError(*file_ + ": " + path_ + ": " + message);
}

bool Node::has(const char* key) const {
  return value_->is_object() && value_->contains(key);
}

Node Node::at(const char* key) const {
  if (!value_->is_object()) fail("expected an object, got " + kind_of(*value_));
  auto it = value_->find(key);
  if (it == value_->end()) fail(std::string("missing \"") + key + "\"");
  return Node(*it, *file_, path_ + "." + key);
}

Node Node::get(const char* key) const {
  if (value_->is_object()) {
    auto it = value_->find(key);
    if (it != value_->end()) return Node(*it, *file_, path_ + "." + key);
  }
  return Node(null_json(), *file_, path_ + "." + key);
}

Node Node::at(std::size_t index) const {
  if (!value_->is_array()) fail("expected an array, got " + kind_of(*value_));
  if (index >= value_->size()) fail("index " + std::to_string(index) + " out of range");
  return Node((*value_)[index], *file_, path_ + "[" + std::to_string(index) + "]");
}

std::size_t Node::size() const {
  if (!value_->is_array()) fail("expected an array, got " + kind_of(*value_));
  return value_->size();
}

std::string Node::str() const {
  if (!value_->is_string()) fail("expected a string, got " + kind_of(*value_));
  return value_->get<std::string>();
}

std::string Node::str(const char* key, const std::string& fallback) const {
  const Node n = get(key);
  return n.is_null() ? fallback : n.str();
}

bool Node::boolean(const char* key, bool fallback) const {
  const Node n = get(key);
  if (n.is_null()) return fallback;
  if (!n.value().is_boolean()) n.fail("expected true or false, got " + kind_of(n.value()));
  return n.value().get<bool>();
}

std::int64_t Node::integer() const {
  if (!value_->is_number_integer()) fail("expected an integer, got " + kind_of(*value_));
  if (value_->is_number_unsigned() && value_->get<std::uint64_t>() > INT64_MAX)
    fail("integer out of range");
  return value_->get<std::int64_t>();
}

std::int64_t Node::integer(const char* key, std::int64_t fallback) const {
  const Node n = get(key);
  return n.is_null() ? fallback : n.integer();
}

double Node::number() const {
  if (!value_->is_number()) fail("expected a number, got " + kind_of(*value_));
  return value_->get<double>();
}

void Node::unknown_type(const std::string& kind, const char* known) const {
  const Node t = get("type");
  const std::string name = t.value().is_string() ? t.str() : t.value().dump();
  Node(t.is_null() ? *value_ : t.value(), *file_, t.is_null() ? path_ : t.path())
      .fail("unknown " + kind + " type " + masque::tok::quote_token(name) + " (masque knows " +
            known + ")");
}

json read_tokenizer_json(const std::string& path) {
  const std::string text = masque::tok::read_whole_file(path, "tokenizer file");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    PathTracker tracker;
    (void)json::sax_parse(text, &tracker);
    throw ConfigError(path + ": invalid JSON at byte " + std::to_string(e.byte) + " (in " +
                      tracker.path() + "): " + e.what() +
                      (e.byte >= text.size() ? " (is the file truncated?)" : ""));
  } catch (const json::exception& e) {
    throw ConfigError(path + ": invalid JSON: " + e.what());
  }
  if (!j.is_object()) throw ConfigError(path + ": $: expected a JSON object, got " + kind_of(j));
  return j;
}

}  // namespace masque::hfjson
