// GPT-2's byte-level alphabet (header only): every byte has a printable stand-in character, so
// a vocabulary of byte sequences can be written as text. Shared by `bpe` and `tokenizer-json`.
#pragma once

#include <array>
#include <string>

#include "utf8.hpp"

namespace masque::tok {

// bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100.. in byte order (a space is U+0120 'Ġ', a newline U+010A 'Ċ').
inline std::array<char32_t, 256> bytes_to_unicode() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    map[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

// The inverse: code point (< 0x200) -> byte, or -1.
inline std::array<int, 0x200> unicode_to_bytes() {
  std::array<int, 0x200> map;
  map.fill(-1);
  const auto b2u = bytes_to_unicode();
  for (int b = 0; b < 256; ++b) map[b2u[b]] = b;
  return map;
}

// The raw bytes a token spelled in the alphabet stands for; false (and `out` unspecified) when a
// character of `token` is not in the alphabet.
inline bool alphabet_to_bytes(std::string_view token, std::string& out) {
  static const std::array<int, 0x200> u2b = unicode_to_bytes();
  out.clear();
  for (std::size_t i = 0; i < token.size();) {
    char32_t cp = 0;
    const int len = decode_utf8(token, i, cp);
    if (len == 0 || cp >= u2b.size() || u2b[cp] < 0) return false;
    out.push_back(static_cast<char>(u2b[cp]));
    i += static_cast<std::size_t>(len);
  }
  return true;
}

// `bytes` spelled in the alphabet.
inline std::string bytes_to_alphabet(std::string_view bytes) {
  static const std::array<char32_t, 256> b2u = bytes_to_unicode();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, b2u[b]);
  return out;
}

}  // namespace masque::tok
