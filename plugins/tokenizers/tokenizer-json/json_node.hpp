// Reading tokenizer.json: a JSON value together with the file and the JSON path it was found
// at, so every configuration error names both ("tokenizer.json: $.model.merges[12]: ...").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace masque::hfjson {

using nlohmann::json;

class Node {
 public:
  Node(const json& value, const std::string& file, std::string path)
      : value_(&value), file_(&file), path_(std::move(path)) {}

  const json& value() const { return *value_; }
  const std::string& file() const { return *file_; }
  const std::string& path() const { return path_; }

  // A ConfigError "FILE: PATH: message", or "FILE: PATHsub: message".
  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void fail_at(const std::string& sub, const std::string& message) const;

  bool is_null() const { return value_->is_null(); }
  bool has(const char* key) const;
  // The member `key` of this object (an error when this is not an object or `key` is missing).
  Node at(const char* key) const;
  // The member, or a null node when it is absent.
  Node get(const char* key) const;
  Node at(std::size_t index) const;
  std::size_t size() const;  // of an array (an error for anything else)

  std::string str() const;  // this value as a string (an error for anything else)
  // This value as a string of exactly one character, which is returned (Metaspace's
  // replacement, Strip's content); anything else is an error.
  char32_t one_char() const;
  std::string str(const char* key) const { return at(key).str(); }
  std::string str(const char* key, const std::string& fallback) const;
  bool boolean(const char* key, bool fallback) const;
  std::int64_t integer(const char* key, std::int64_t fallback) const;
  std::int64_t integer() const;
  double number() const;
  // The component's "type" (e.g. "BPE").
  std::string type() const { return str("type"); }

  // An unknown component type, naming the ones masque knows.
  [[noreturn]] void unknown_type(const std::string& kind, const char* known) const;

 private:
  const json* value_;
  const std::string* file_;
  std::string path_;
};

// The model's vocabulary and merges, read while parsing instead of as JSON values (Gemma 3's
// 262k entries and 515k merges would take seconds and hundreds of MB as a JSON tree). The tree
// keeps an empty array or object in their place.
struct ModelTables {
  bool has_vocab = false, has_merges = false;
  bool vocab_is_list = false;                               // Unigram: [["piece", score], ...]
  std::vector<std::pair<std::string, std::int64_t>> vocab;  // {"token": id, ...}
  std::vector<std::pair<std::string, double>> scored;       // Unigram
  std::vector<std::pair<std::string, std::string>> merges;  // "a b" or ["a", "b"]
};

struct TokenizerFile {
  json root;
  ModelTables tables;
};

// Parses `path`; a missing file, invalid or truncated JSON is a ConfigError naming the file, the
// byte offset and the JSON path where parsing stopped. The top level must be an object.
TokenizerFile read_tokenizer_json(const std::string& path);

}  // namespace masque::hfjson
