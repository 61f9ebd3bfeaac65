#include "precompiled.hpp"

#include <cstring>
#include <stdexcept>

#include "utf8.hpp"

namespace masque::hfjson {

namespace {

std::string decode_base64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  std::uint32_t acc = 0;
  int bits = 0;
  std::size_t i = 0;
  for (; i < text.size() && text[i] != '='; ++i) {
    const int v = value(text[i]);
    if (v < 0)
      throw std::invalid_argument("not base64 (byte " + std::to_string(i) + " of the text)");
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  for (; i < text.size(); ++i)
    if (text[i] != '=') throw std::invalid_argument("not base64 (text after the '=' padding)");
  return out;
}

// darts-clone unit fields.
bool has_leaf(std::uint32_t u) {
  return (u >> 8) & 1;
}
std::uint32_t value_of(std::uint32_t u) {
  return u & ((1u << 31) - 1);
}
std::uint32_t label_of(std::uint32_t u) {
  return u & ((1u << 31) | 0xFF);
}
std::size_t offset_of(std::uint32_t u) {
  return (u >> 10) << ((u & (1u << 9)) >> 6);
}

}  // namespace

Precompiled Precompiled::from_base64(std::string_view text) {
  return from_blob(decode_base64(text));
}

Precompiled Precompiled::from_blob(std::string_view blob) {
  if (blob.size() < 4) throw std::invalid_argument("the charsmap is shorter than its header");
  std::uint32_t trie_bytes = 0;
  for (int k = 3; k >= 0; --k)
    trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(blob[static_cast<std::size_t>(k)]);
  if (trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4)
    throw std::invalid_argument("the charsmap's trie size (" + std::to_string(trie_bytes) +
                                " bytes) does not fit its " + std::to_string(blob.size()) +
                                " bytes");
  Precompiled p;
  p.units_.resize(trie_bytes / 4);
  for (std::size_t k = 0; k < p.units_.size(); ++k) {
    std::uint32_t u = 0;
    for (int b = 3; b >= 0; --b)
      u = (u << 8) | static_cast<unsigned char>(blob[4 + 4 * k + static_cast<std::size_t>(b)]);
    p.units_[k] = u;
  }
  p.pool_.assign(blob.substr(4 + trie_bytes));
  if (p.units_.empty()) throw std::invalid_argument("the charsmap's trie is empty");
  if (masque::tok::find_invalid_utf8(p.pool_) != std::string_view::npos)
    throw std::invalid_argument("the charsmap's replacements are not valid UTF-8");
  return p;
}

bool Precompiled::transform(std::string_view chunk, std::string_view& replacement) const {
  std::size_t node = offset_of(units_[0]);
  for (unsigned char c : chunk) {
    node ^= c;
    if (node >= units_.size()) return false;
    const std::uint32_t unit = units_[node];
    if (label_of(unit) != c) return false;
    node ^= offset_of(unit);
    if (has_leaf(unit)) {
      if (node >= units_.size()) return false;
      const std::size_t at = value_of(units_[node]);
      if (at >= pool_.size()) return false;
      const std::size_t end = pool_.find('\0', at);
      replacement =
          std::string_view(pool_).substr(at, (end == std::string::npos ? pool_.size() : end) - at);
      return true;
    }
  }
  return false;
}

}  // namespace masque::hfjson
