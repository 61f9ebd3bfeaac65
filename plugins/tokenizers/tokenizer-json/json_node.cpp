#include "json_node.hpp"

#include <vector>

#include "masque/error.hpp"
#include "token_files.hpp"
#include "utf8.hpp"

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
        p += "[" + std::to_string(l.done) + "]";  // the element being read
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
    stack_.push_back({false, 0, "", false});
    return true;
  }
  bool key(string_t& k) override {
    stack_.back().key = k;
    stack_.back().has_key = true;
    return true;
  }
  bool end_object() override { return end(); }
  bool start_array(std::size_t) override {
    stack_.push_back({true, 0, "", false});
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
    std::size_t done;  // elements of an array read whole
    std::string key;
    bool has_key;
  };
  // A value (a scalar, or a container at its end) was read whole.
  bool value() {
    if (!stack_.empty() && stack_.back().array) ++stack_.back().done;
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

void Node::fail_at(const std::string& sub, const std::string& message) const {
  throw ConfigError(*file_ + ": " + path_ + sub + ": " + message);
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

char32_t Node::one_char() const {
  const std::string s = str();
  char32_t cp = 0;
  const int length = s.empty() ? 0 : tok::decode_utf8(s, 0, cp);
  if (length == 0 || static_cast<std::size_t>(length) != s.size())
    fail("expected a single character, got \"" + s + "\"");
  return cp;
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

namespace {

// Builds the JSON tree through nlohmann's own builder, except for $.model.vocab and
// $.model.merges, whose entries go straight into ModelTables.
class TreeWithTables {
 public:
  TreeWithTables(json& root, ModelTables& tables, const std::string& file)
      : dom_(root), tables_(tables), file_(file) {}

  bool null() { return capturing_ ? bad("null") : dom_.null(); }
  bool boolean(bool v) { return capturing_ ? bad("a boolean") : dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) {
    return capturing_ ? number(static_cast<double>(v), true, v) : dom_.number_integer(v);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (!capturing_) return dom_.number_unsigned(v);
    return number(
        static_cast<double>(v), v <= static_cast<json::number_unsigned_t>(INT64_MAX),
        v <= static_cast<json::number_unsigned_t>(INT64_MAX) ? static_cast<std::int64_t>(v) : -1);
  }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return capturing_ ? number(v, false, 0) : dom_.number_float(v, s);
  }
  bool string(json::string_t& v) {
    if (!capturing_) return dom_.string(v);
    if (what_ == What::merges && depth_ == 1) {  // "a b"
      const std::size_t sp = v.find(' ');
      if (sp == std::string::npos)
        fail(element(), "expected a merge \"A B\" (two tokens separated by a space)");
      tables_.merges.emplace_back(v.substr(0, sp), v.substr(sp + 1));
      ++index_;
      return true;
    }
    if (what_ == What::merges && depth_ == 2) {
      if (parts_ >= 2) fail(element(), "expected a merge \"A B\" or [\"A\", \"B\"]");
      (parts_ == 0 ? pair_.first : pair_.second) = std::move(v);
      ++parts_;
      return true;
    }
    if (what_ == What::scored && depth_ == 2 && parts_ == 0) {
      piece_ = std::move(v);
      ++parts_;
      return true;
    }
    return bad("a string");
  }
  bool binary(json::binary_t& v) { return capturing_ ? bad("binary") : dom_.binary(v); }
  bool start_object(std::size_t n) {
    if (capturing_) return bad("an object");
    if (depth_ == 2 && in_model_ && key_ == "vocab") {
      begin(What::vocab);
      return true;
    }
    ++depth_;
    if (depth_ == 2) in_model_ = key_ == "model";
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    if (capturing_) {
      if (what_ != What::vocab) return bad("an object");
      vocab_key_ = std::move(k);
      return true;
    }
    if (depth_ == 1 || depth_ == 2) key_ = k;
    return dom_.key(k);
  }
  bool end_object() {
    if (capturing_ && what_ == What::vocab && depth_ == 1) return end();
    --depth_;
    if (depth_ < 2) in_model_ = false;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (capturing_) {
      if (depth_ != 1 || what_ == What::vocab) return bad("an array");
      depth_ = 2;
      parts_ = 0;
      return true;
    }
    if (depth_ == 2 && in_model_ && (key_ == "merges" || key_ == "vocab")) {
      begin(key_ == "merges" ? What::merges : What::scored);
      if (what_ == What::scored) tables_.vocab_is_list = true;
      return true;
    }
    ++depth_;
    return dom_.start_array(n);
  }
  bool end_array() {
    if (capturing_) {
      if (depth_ == 1) return end();
      depth_ = 1;
      if (what_ == What::merges) {
        if (parts_ != 2) fail(element(), "expected a merge \"A B\" or [\"A\", \"B\"]");
        tables_.merges.push_back(std::move(pair_));
      } else {
        if (parts_ != 2) fail(element(), "expected [\"piece\", score]");
        tables_.scored.emplace_back(std::move(piece_), score_);
      }
      ++index_;
      return true;
    }
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) {
    error_at = pos;
    error = e.what();
    return false;
  }
  std::size_t error_at = 0;
  std::string error;

 private:
  enum class What { vocab, scored, merges };
  void begin(What w) {
    // The tree gets an empty value in place of the table.
    if (w == What::vocab) {
      dom_.start_object(0);
      dom_.end_object();
      tables_.has_vocab = true;
    } else {
      dom_.start_array(0);
      dom_.end_array();
      (w == What::merges ? tables_.has_merges : tables_.has_vocab) = true;
    }
    capturing_ = true;
    what_ = w;
    depth_ = 1;
    index_ = 0;
  }
  bool end() {
    capturing_ = false;
    depth_ = 2;
    return true;
  }
  bool number(double v, bool integral, std::int64_t i) {
    if (what_ == What::vocab && depth_ == 1) {
      if (!integral)
        fail("$.model.vocab",
             "the id of " + masque::tok::quote_token(vocab_key_) + " is not an integer");
      tables_.vocab.emplace_back(std::move(vocab_key_), i);
      return true;
    }
    if (what_ == What::scored && depth_ == 2 && parts_ == 1) {
      score_ = v;
      ++parts_;
      return true;
    }
    return bad("a number");
  }
  std::string element() const {
    return std::string(what_ == What::merges ? "$.model.merges[" : "$.model.vocab[") +
           std::to_string(index_) + "]";
  }
  bool bad(const char* what) {
    if (what_ == What::vocab)
      fail("$.model.vocab", std::string("the id of ") + masque::tok::quote_token(vocab_key_) +
                                " is " + what + ", not an integer");
    fail(element(), std::string("unexpected ") + what);
  }
  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    throw ConfigError(file_ + ": " + path + ": " + message);
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  ModelTables& tables_;
  const std::string& file_;
  bool capturing_ = false, in_model_ = false;
  What what_ = What::vocab;
  int depth_ = 0;  // outside: nesting of the tree; capturing: 1 in the table, 2 in an entry
  std::string key_, vocab_key_, piece_;
  std::pair<std::string, std::string> pair_;
  double score_ = 0;
  int parts_ = 0;
  std::size_t index_ = 0;
};

}  // namespace

TokenizerFile read_tokenizer_json(const std::string& path) {
  const std::string text = masque::tok::read_whole_file(path, "tokenizer file");
  TokenizerFile f;
  TreeWithTables builder(f.root, f.tables, path);
  bool ok = false;
  try {
    ok = json::sax_parse(text, &builder);
  } catch (const json::exception& e) {
    throw ConfigError(path + ": invalid JSON: " + e.what());
  }
  if (!ok) {
    PathTracker tracker;
    (void)json::sax_parse(text, &tracker);
    throw ConfigError(path + ": invalid JSON at byte " + std::to_string(builder.error_at) +
                      " (in " + tracker.path() + "): " + builder.error +
                      (builder.error_at >= text.size() ? " (is the file truncated?)" : ""));
  }
  if (!f.root.is_object())
    throw ConfigError(path + ": $: expected a JSON object, got " + kind_of(f.root));
  return f;
}

}  // namespace masque::hfjson
