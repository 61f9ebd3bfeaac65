// Strict UTF-8 decoding shared by the tokenizer plugins (header only, not a plugin).
//
// Invalid input (stray continuation bytes, overlong forms, encoded surrogates U+D800..U+DFFF,
// code points above U+10FFFF, truncated sequences) is reported, never read past.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "masque/error.hpp"

namespace masque::tok {

// Decodes the code point starting at byte `i` of `s` (i < s.size()). Returns its length in
// bytes (1..4) and sets `cp`, or returns 0 when the bytes at `i` are not valid UTF-8.
inline int decode_utf8(std::string_view s, std::size_t i, char32_t& cp) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const std::size_t left = s.size() - i;
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  auto cont = [&](std::size_t k) { return k < left && (p[k] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!cont(1)) return 0;
    cp = (char32_t(b0 & 0x1F) << 6) | (p[1] & 0x3F);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    cp = (char32_t(b0 & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;  // overlong or surrogate
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    cp = (char32_t(b0 & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
         (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    if (cp < 0x10000 || cp > 0x10FFFF) return 0;
    return 4;
  }
  return 0;  // continuation byte, 0xC0/0xC1 or 0xF5..0xFF
}

// Byte offset of the first invalid sequence, or npos when `s` is valid UTF-8.
inline std::size_t find_invalid_utf8(std::string_view s) {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    // Skip ASCII eight bytes at a time.
    while (i + 8 <= n) {
      std::uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    char32_t cp;
    const int len = decode_utf8(s, i, cp);
    if (len == 0) return i;
    i += static_cast<std::size_t>(len);
  }
  return std::string_view::npos;
}

// Throws RecordError when `s` is not valid UTF-8 (the tokenizer contract).
inline void check_utf8(std::string_view s, const char* who) {
  const std::size_t bad = find_invalid_utf8(s);
  if (bad != std::string_view::npos) {
    char hex[8];
    static const char digits[] = "0123456789ABCDEF";
    const auto b = static_cast<unsigned char>(s[bad]);
    hex[0] = '0', hex[1] = 'x', hex[2] = digits[b >> 4], hex[3] = digits[b & 15], hex[4] = 0;
    throw RecordError(std::string(who) + ": the text is not valid UTF-8 (byte " + hex +
                      " at offset " + std::to_string(bad) + ")");
  }
}

inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace masque::tok
