// Helpers shared by the tokenizer plugins (header only, not a plugin): reading one-token-per-line
// vocabularies, a string-keyed map with string_view lookup, and splitting text around special
// tokens that appear in it literally.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "literal_matcher.hpp"
#include "masque/error.hpp"
#include "masque/tokenizer.hpp"

namespace masque::tok {

// A fast hash for short byte strings (tokens, words): 8 bytes at a time, then a final mix.
inline std::uint64_t hash_bytes(std::string_view s) {
  const char* p = s.data();
  std::size_t n = s.size();
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
  auto mix = [&h](std::uint64_t w) {
    h = (h ^ (w * 0x87C37B91114253D5ull)) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
  };
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    mix(w);
  }
  if (n > 0) {
    std::uint64_t w = 0;
    std::memcpy(&w, p, n);
    mix(w);
  }
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 33;
  return h;
}

// Byte equality for short strings without a call into libc.
inline bool same_bytes(const char* a, const char* b, std::size_t n) {
  if (n >= 8) {
    std::uint64_t x, y;
    for (; n > 8; a += 8, b += 8, n -= 8) {
      std::memcpy(&x, a, 8);
      std::memcpy(&y, b, 8);
      if (x != y) return false;
    }
    std::memcpy(&x, a + n - 8, 8);  // the last 8 bytes (overlapping what was compared)
    std::memcpy(&y, b + n - 8, 8);
    return x == y;
  }
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// String -> token id, open addressing over one array of 16-byte slots, keys stored in one
// arena. A probe compares 32 bits of the hash first, so a miss rarely touches the key bytes.
class TokenMap {
 public:
  // Returns the id already stored for `key`, or -1 after inserting (key, id).
  TokenId insert(std::string_view key, TokenId id) {
    // Slots hold 32-bit arena offsets.
    if (arena_.size() + key.size() > UINT32_MAX)
      throw ConfigError("more than 4 GiB of token text: not a vocabulary masque can hold");
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    const std::uint64_t h = hash_bytes(key);
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = {fingerprint(h), static_cast<std::uint32_t>(arena_.size()),
             static_cast<std::uint32_t>(key.size()), id};
        arena_.append(key);
        ++size_;
        set_filter(h);
        return -1;
      }
      if (matches(s, fingerprint(h), key)) return s.id;
    }
  }
  // The id of `key`, or -1. `h` must be hash_bytes(key).
  TokenId find(std::string_view key, std::uint64_t h) const {
    if (size_ == 0 || !maybe_present(h)) return -1;
    const std::uint32_t f = fingerprint(h);
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (matches(s, f, key)) return s.id;
    }
  }
  TokenId find(std::string_view key) const { return find(key, hash_bytes(key)); }
  // Starts loading the slot a later find(key, h) will read.
  void prefetch(std::uint64_t h) const {
    if (size_ != 0) __builtin_prefetch(&slots_[h & mask_]);
  }
  std::size_t size() const { return size_; }

 private:
  struct Slot {
    std::uint32_t fingerprint = 0;
    std::uint32_t offset = 0, length = 0;
    TokenId id = -1;  // -1: empty
  };
  static std::uint32_t fingerprint(std::uint64_t h) { return static_cast<std::uint32_t>(h >> 32); }
  // A one-bit-per-key filter about 32 times larger than the key count (small enough to stay in
  // cache): most lookups of absent keys (WordPiece tries many) end here.
  bool maybe_present(std::uint64_t h) const {
    const std::uint64_t bit = (h >> 20) & filter_mask_;
    return (filter_[bit >> 6] >> (bit & 63)) & 1;
  }
  void set_filter(std::uint64_t h) {
    const std::uint64_t bit = (h >> 20) & filter_mask_;
    filter_[bit >> 6] |= std::uint64_t{1} << (bit & 63);
  }
  bool matches(const Slot& s, std::uint32_t f, std::string_view key) const {
    return s.fingerprint == f && s.length == key.size() &&
           same_bytes(arena_.data() + s.offset, key.data(), key.size());
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    filter_.assign(std::max<std::size_t>(1024, slots_.size() / 4), 0);  // 16 bits per slot
    filter_mask_ = filter_.size() * 64 - 1;
    for (const Slot& s : old) {
      if (s.id < 0) continue;
      const std::uint64_t h = hash_bytes(std::string_view(arena_).substr(s.offset, s.length));
      std::size_t i = h & mask_;
      while (slots_[i].id >= 0) i = (i + 1) & mask_;
      slots_[i] = s;
      set_filter(h);
    }
  }
  std::vector<Slot> slots_;
  std::vector<std::uint64_t> filter_;
  std::string arena_;
  std::size_t mask_ = 0, size_ = 0;
  std::uint64_t filter_mask_ = 0;
};

inline std::string read_whole_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot read the " + std::string(what) + " " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ConfigError("error while reading the " + std::string(what) + " " + path);
  return ss.str();
}

// A token as it may be quoted in a message: control bytes escaped, and a token longer than
// kQuotedBytes cut (at a character boundary) with its size, so a megabyte "token" from a
// broken file does not become a megabyte error message.
inline constexpr std::size_t kQuotedBytes = 64;
inline std::string quote_token(std::string_view t) {
  std::string suffix = "'";
  if (t.size() > kQuotedBytes) {
    suffix = "...' (" + std::to_string(t.size()) + " bytes)";
    std::size_t cut = kQuotedBytes;
    while (cut > 0 && (static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) --cut;
    t = t.substr(0, cut);
  }
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
  return out + suffix;
}

// The longest token a vocabulary may hold. Real tokens are a few bytes; the bound keeps a
// broken or hostile file from making every word lookup scan megabytes.
inline constexpr std::size_t kMaxTokenBytes = 0xFFFF;

// Reads a vocabulary with one token per line; id = 0-based line number. Lines are split on '\n'
// only (never on other Unicode line breaks, and never trimmed: tokens may be invisible format
// characters); with `strip_cr` one '\r' before the '\n' is removed (CRLF files). The final
// line break is optional. A missing or empty file, an empty line, a line longer than
// kMaxTokenBytes and a token that appears twice are ConfigErrors naming the file and line.
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
    if (line.size() > kMaxTokenBytes)
      throw ConfigError(path + ":" + std::to_string(tokens.size() + 1) + ": a line of " +
                        std::to_string(line.size()) + " bytes; a token is at most " +
                        std::to_string(kMaxTokenBytes) + " bytes (is this a vocabulary?)");
    tokens.emplace_back(line);
    pos = nl + 1;
  }
  return tokens;
}

// token -> id; a duplicate is a ConfigError naming both lines.
inline TokenMap index_tokens(const std::vector<std::string>& tokens, const std::string& path) {
  if (tokens.size() > static_cast<std::size_t>(INT32_MAX))
    throw ConfigError(path + ": more than 2^31 tokens, more than token ids can number");
  TokenMap map;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const TokenId before = map.insert(tokens[i], static_cast<TokenId>(i));
    if (before >= 0)
      throw ConfigError(path + ":" + std::to_string(i + 1) + ": duplicate token " +
                        quote_token(tokens[i]) + " (already at line " + std::to_string(before + 1) +
                        ")");
  }
  return map;
}

// Finds special tokens written literally in a text (leftmost match first; the longest one when
// several start at the same byte), like Hugging Face's added-token splitting.
class SpecialSplitter {
 public:
  void add(const std::string& text, TokenId id) { matcher_.add(text, id); }
  bool empty() const { return matcher_.empty(); }

  // Calls on_text(begin, end) for every non-empty stretch of ordinary text and
  // on_special(begin, end, id) for every special token, in text order.
  template <class OnText, class OnSpecial>
  void split(std::string_view text, OnText&& on_text, OnSpecial&& on_special) const {
    std::size_t pos = 0;
    LiteralMatcher::Match m;
    while (matcher_.next(text, pos, m)) {
      if (m.begin > pos) on_text(pos, m.begin);
      on_special(m.begin, m.end, static_cast<TokenId>(m.value));
      pos = m.end;
    }
    if (pos < text.size()) on_text(pos, text.size());
  }

 private:
  LiteralMatcher matcher_;
};

// "auto" | "true" | "false" parameters.
enum class Tristate { automatic, yes, no };
inline Tristate parse_tristate(const std::string& v) {
  if (v == "true") return Tristate::yes;
  if (v == "false") return Tristate::no;
  return Tristate::automatic;
}

}  // namespace masque::tok
