#include "pretokenizer.hpp"

#include <memory>
#include <stdexcept>
#include <string>

#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/utext.h>

#include "icu_find_all.hpp"
#include "utf8.hpp"

namespace masque::bpe {

namespace {

CharClass icu_class(char32_t c) {
  const auto cp = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(cp, UCHAR_WHITE_SPACE)) return kSpace;
  switch (u_charType(cp)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kNumber;
    default:
      return kOther;
  }
}

struct BmpTable {
  std::unique_ptr<std::uint8_t[]> cls{new std::uint8_t[0x10000]};
  BmpTable() {
    for (char32_t c = 0; c < 0x10000; ++c) cls[c] = icu_class(c);
  }
};

const BmpTable& bmp() {
  static const BmpTable table;  // thread-safe initialization
  return table;
}

// Class and byte length of the code point at byte i of `text` (i < its size): the scanners'
// one decoding step, an ASCII byte straight from the table.
inline CharClass class_at(std::string_view text, const std::uint8_t* table, std::size_t i, int& len,
                          const char* scanner) {
  const auto c = static_cast<unsigned char>(text[i]);
  if (c < 0x80) {
    len = 1;
    return static_cast<CharClass>(table[c]);
  }
  char32_t cp = 0;
  len = tok::decode_utf8(text, i, cp);
  if (len == 0) throw std::invalid_argument(std::string(scanner) + ": invalid UTF-8");
  return cp < 0x10000 ? static_cast<CharClass>(table[cp]) : icu_class(cp);
}

}  // namespace

CharClass char_class(char32_t c) {
  return c < 0x10000 ? static_cast<CharClass>(bmp().cls[c]) : icu_class(c);
}

void split_gpt2(std::string_view text, std::vector<Piece>& out) {
  const std::uint8_t* table = bmp().cls.get();
  const std::size_t n = text.size();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  auto at = [&](std::size_t i, int& len) { return class_at(text, table, i, len, "split_gpt2"); };
  std::size_t i = 0;
  while (i < n) {
    // 's 't 're 've 'm 'll 'd (case-sensitive).
    if (s[i] == '\'' && i + 1 < n) {
      const unsigned char c1 = s[i + 1];
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        out.emplace_back(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < n) {
        const unsigned char c2 = s[i + 2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          out.emplace_back(i, i + 3);
          i += 3;
          continue;
        }
      }
    }
    int len = 0;
    CharClass cls = at(i, len);
    std::size_t j = i + static_cast<std::size_t>(len);  // end of the first code point
    // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": a space may lead a run of another class.
    if (s[i] == ' ' && j < n) {
      int len1 = 0;
      const CharClass next = at(j, len1);
      if (next != kSpace) {
        cls = next;
        j += static_cast<std::size_t>(len1);
      }
    }
    if (cls != kSpace) {
      while (j < n) {
        int l = 0;
        if (at(j, l) != cls) break;
        j += static_cast<std::size_t>(l);
      }
      out.emplace_back(i, j);
      i = j;
      continue;
    }
    // A whitespace run [i, q). "\s+(?!\S)" takes all of it at the end of the text, else all
    // but its last character (which then leads the next piece); when that would leave nothing,
    // "\s+" takes the run (a single character here).
    std::size_t last = i;  // start of the last whitespace character
    std::size_t q = j;
    while (q < n) {
      int l = 0;
      if (at(q, l) != kSpace) break;
      last = q;
      q += static_cast<std::size_t>(l);
    }
    const std::size_t end = (q == n || last == i) ? q : last;
    out.emplace_back(i, end);
    i = end;
  }
}

void split_llama3(std::string_view text, int max_digits, std::vector<Piece>& out) {
  const std::uint8_t* table = bmp().cls.get();
  const std::size_t n = text.size();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  auto at = [&](std::size_t i, int& len) { return class_at(text, table, i, len, "split_llama3"); };
  auto newline = [&](std::size_t i) { return s[i] == '\r' || s[i] == '\n'; };
  auto ascii_lower = [&](std::size_t i) -> int {
    const unsigned char c = s[i];
    if (c >= 'A' && c <= 'Z') return c + 32;
    return c >= 'a' && c <= 'z' ? c : -1;
  };
  // (?i:'s|'t|'re|'ve|'m|'ll|'d) at i (s[i] == '\''): its length, or 0. Case-insensitive as
  // Unicode folds: U+017F (long s) matches s.
  auto contraction = [&](std::size_t i) -> std::size_t {
    if (i + 1 >= n) return 0;
    const int c1 = ascii_lower(i + 1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (i + 2 < n && s[i + 1] == 0xC5 && s[i + 2] == 0xBF) return 3;  // 'ſ
    if (i + 2 >= n) return 0;
    const int c2 = ascii_lower(i + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
  };
  std::size_t i = 0;
  while (i < n) {
    if (s[i] == '\'') {
      if (const std::size_t len = contraction(i)) {
        out.emplace_back(i, i + len);
        i += len;
        continue;
      }
    }
    int len0 = 0;
    const CharClass c0 = at(i, len0);
    const std::size_t j0 = i + static_cast<std::size_t>(len0);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    std::size_t letters = n;  // where a run of letters starts, if this alternative applies
    if (c0 == kLetter) {
      letters = i;
    } else if (c0 != kNumber && !newline(i) && j0 < n) {
      int l = 0;
      if (at(j0, l) == kLetter) letters = j0;
    }
    if (letters != n) {
      std::size_t j = letters;
      while (j < n) {
        int l = 0;
        if (at(j, l) != kLetter) break;
        j += static_cast<std::size_t>(l);
      }
      out.emplace_back(i, j);
      i = j;
      continue;
    }
    // \p{N}{1,max_digits}
    if (c0 == kNumber) {
      std::size_t j = j0;
      for (int d = 1; d < max_digits && j < n; ++d) {
        int l = 0;
        if (at(j, l) != kNumber) break;
        j += static_cast<std::size_t>(l);
      }
      out.emplace_back(i, j);
      i = j;
      continue;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*"
    std::size_t other = n;
    if (c0 == kOther) {
      other = i;
    } else if (s[i] == ' ' && j0 < n) {
      int l = 0;
      if (at(j0, l) == kOther) other = j0;
    }
    if (other != n) {
      std::size_t j = other;
      while (j < n) {
        int l = 0;
        if (at(j, l) != kOther) break;
        j += static_cast<std::size_t>(l);
      }
      while (j < n && newline(j)) ++j;
      out.emplace_back(i, j);
      i = j;
      continue;
    }
    // c0 is whitespace: the run [i, q), the start of its last character, and the end of its
    // last \r or \n.
    std::size_t q = i, last = i, after_newline = 0;
    bool has_newline = false;
    while (q < n) {
      int l = 0;
      if (at(q, l) != kSpace) break;
      last = q;
      if (newline(q)) {
        has_newline = true;
        after_newline = q + 1;
      }
      q += static_cast<std::size_t>(l);
    }
    std::size_t end;
    if (has_newline) {
      end = after_newline;  // \s*[\r\n]+
    } else if (q == n || last == i) {
      end = q;  // \s+(?!\S) at the end of the text, or \s+ for a single character
    } else {
      end = last;  // \s+(?!\S): all but the last character
    }
    out.emplace_back(i, end);
    i = end;
  }
}

std::vector<Piece> split_gpt2_regex(std::string_view text) {
  static const std::unique_ptr<icu::RegexPattern> pattern = [] {
    UErrorCode status = U_ZERO_ERROR;
    UParseError pe;
    std::unique_ptr<icu::RegexPattern> p(
        icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(kGpt2Pattern), 0, pe, status));
    if (U_FAILURE(status))
      throw std::runtime_error(std::string("ICU regex: ") + u_errorName(status));
    return p;
  }();
  std::vector<Piece> out;
  tok::icu_find_all(*pattern, text, out);
  return out;
}

}  // namespace masque::bpe
