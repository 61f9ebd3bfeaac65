// Helpers shared by the tokenizer plugins (header only, not a plugin): reading one-token-per-line
// vocabularies, a string-keyed map with string_view lookup, and splitting text around special
// tokens that appear in it literally.
#pragma once

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "masque/error.hpp"
#include "masque/tokenizer.hpp"

namespace masque::tok {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
using TokenMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

inline std::string read_whole_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot read the " + std::string(what) + " " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ConfigError("error while reading the " + std::string(what) + " " + path);
  return ss.str();
}

// A token as it may be quoted in a message: control bytes escaped.
inline std::string quote_token(std::string_view t) {
  std::string out = "'";
  for (char c : t) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b == 0x7F) {
      static const char digits[] = "0123456789abcdef";
      out += "\\x";
      out += digits[b >> 4];
      out += digits[b & 15];
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Reads a vocabulary with one token per line; id = 0-based line number. Lines are split on '\n'
// only (never on other Unicode line breaks, and never trimmed: tokens may be invisible format
// characters); with `strip_cr` one '\r' before the '\n' is removed (CRLF files). The final
// line break is optional. A missing or empty file, an empty line and a token that appears twice
// are ConfigErrors naming the file and line.
inline std::vector<std::string> read_token_lines(const std::string& path, bool strip_cr,
                                                 const char* what = "vocabulary file") {
  const std::string data = read_whole_file(path, what);
  if (data.empty()) throw ConfigError(path + ": the " + std::string(what) + " is empty");
  std::vector<std::string> tokens;
  std::size_t pos = 0;
  while (pos < data.size()) {
    std::size_t nl = data.find('\n', pos);
    if (nl == std::string::npos) nl = data.size();
    std::string_view line(data.data() + pos, nl - pos);
    if (strip_cr && !line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty())
      throw ConfigError(path + ":" + std::to_string(tokens.size() + 1) +
                        ": empty line (a vocabulary has one non-empty token per line)");
    tokens.emplace_back(line);
    pos = nl + 1;
  }
  return tokens;
}

// token -> id; a duplicate is a ConfigError naming both lines.
inline TokenMap index_tokens(const std::vector<std::string>& tokens, const std::string& path) {
  TokenMap map;
  map.reserve(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    auto [it, inserted] = map.emplace(tokens[i], static_cast<TokenId>(i));
    if (!inserted)
      throw ConfigError(path + ":" + std::to_string(i + 1) + ": duplicate token " +
                        quote_token(tokens[i]) + " (already at line " +
                        std::to_string(it->second + 1) + ")");
  }
  return map;
}

// Finds special tokens written literally in a text (leftmost match first; the longest one when
// several start at the same byte), like Hugging Face's added-token splitting.
class SpecialSplitter {
 public:
  void add(std::string text, TokenId id) {
    if (!text.empty()) tokens_.emplace_back(std::move(text), id);
  }
  bool empty() const { return tokens_.empty(); }

  // Calls on_text(begin, end) for every non-empty stretch of ordinary text and
  // on_special(begin, end, id) for every special token, in text order.
  template <class OnText, class OnSpecial>
  void split(std::string_view text, OnText&& on_text, OnSpecial&& on_special) const {
    if (tokens_.empty()) {
      if (!text.empty()) on_text(std::size_t{0}, text.size());
      return;
    }
    std::vector<std::size_t> next(tokens_.size());
    for (std::size_t k = 0; k < tokens_.size(); ++k) next[k] = text.find(tokens_[k].first);
    std::size_t pos = 0;
    while (true) {
      std::size_t best = std::string_view::npos, best_k = 0;
      for (std::size_t k = 0; k < tokens_.size(); ++k) {
        if (next[k] != std::string_view::npos && next[k] < pos)
          next[k] = text.find(tokens_[k].first, pos);
        if (next[k] < best || (next[k] == best && next[k] != std::string_view::npos &&
                               tokens_[k].first.size() > tokens_[best_k].first.size())) {
          best = next[k];
          best_k = k;
        }
      }
      if (best == std::string_view::npos) break;
      if (best > pos) on_text(pos, best);
      const std::size_t end = best + tokens_[best_k].first.size();
      on_special(best, end, tokens_[best_k].second);
      pos = end;
    }
    if (pos < text.size()) on_text(pos, text.size());
  }

 private:
  std::vector<std::pair<std::string, TokenId>> tokens_;
};

// "auto" | "true" | "false" parameters.
enum class Tristate { automatic, yes, no };
inline Tristate parse_tristate(const std::string& v) {
  if (v == "true") return Tristate::yes;
  if (v == "false") return Tristate::no;
  return Tristate::automatic;
}

}  // namespace masque::tok
