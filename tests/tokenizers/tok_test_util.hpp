// Shared by the tokenizer tests: loading plugins and the reference vectors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "masque/tokenizer.hpp"
#include "test_support.hpp"
#include "tokenizer_loader.hpp"

namespace masque::test {

inline std::unique_ptr<Tokenizer> tokenizer(const std::string& name,
                                            const std::map<std::string, ParamValue>& params) {
  return make_tokenizer(name, params, plugin_dir());
}

inline std::filesystem::path tokenizers_dir() {
  return shared_dir() / "tokenizers";
}

inline std::vector<TokenId> ids_of(const nlohmann::json& j) {
  return j.get<std::vector<TokenId>>();
}

inline std::string slice(std::string_view text, ByteSpan s) {
  return std::string(text.substr(s.begin, s.end - s.begin));
}

// Bytes as hex, for messages about invalid UTF-8.
inline std::string hex_bytes(std::string_view s) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (!out.empty()) out += ' ';
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// Every span lies inside the text and begin <= end.
inline bool spans_in_bounds(const Encoding& e, std::size_t size) {
  for (const ByteSpan& s : e.offsets)
    if (s.begin > s.end || s.end > size) return false;
  return true;
}

// The Encoding's parallel vectors have one entry per token.
inline bool consistent(const Encoding& e) {
  return e.pieces.size() == e.ids.size() && e.offsets.size() == e.ids.size() &&
         e.type_ids.size() == e.ids.size();
}

}  // namespace masque::test
