#include "chat/python_str.hpp"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <algorithm>

#include "chat/jinja_error.hpp"

namespace masque::chat::jinja::pystr {

std::u32string decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const std::uint8_t*>(text.data());
  const auto n = static_cast<std::int32_t>(text.size());
  std::int32_t i = 0;
  while (i < n) {
    UChar32 c;
    U8_NEXT(p, i, n, c);
    out.push_back(c < 0 ? U'\uFFFD' : static_cast<char32_t>(c));
  }
  return out;
}

std::string encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    char buf[4];
    std::int32_t len = 0;
    UBool error = false;
    U8_APPEND(reinterpret_cast<std::uint8_t*>(buf), len, 4, static_cast<UChar32>(c), error);
    if (error)
      out += "\xEF\xBF\xBD";  // a lone surrogate from a template's \ud800 escape
    else
      out.append(buf, static_cast<std::size_t>(len));
  }
  return out;
}

std::int64_t length(std::string_view text) {
  std::int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;  // count lead bytes
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                  bool right) {
  const std::u32string s = decode(text);
  const std::u32string set = chars ? decode(*chars) : std::u32string();
  auto strippable = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : is_space(c);
  };
  std::size_t begin = 0, end = s.size();
  if (left)
    while (begin < end && strippable(s[begin])) ++begin;
  if (right)
    while (end > begin && strippable(s[end - 1])) --end;
  return encode(std::u32string_view(s).substr(begin, end - begin));
}

namespace {

std::vector<std::string> split_whitespace(std::string_view text, std::int64_t maxsplit,
                                          bool from_right) {
  std::u32string s = decode(text);
  if (from_right) std::reverse(s.begin(), s.end());
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i])) ++i;
    if (i == s.size()) break;
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
      // The rest is the last item as it is, whitespace at its far end included.
      std::u32string rest = s.substr(i);
      if (from_right) std::reverse(rest.begin(), rest.end());
      out.push_back(encode(rest));
      break;
    }
    std::size_t j = i;
    while (j < s.size() && !is_space(s[j])) ++j;
    std::u32string word = s.substr(i, j - i);
    if (from_right) std::reverse(word.begin(), word.end());
    out.push_back(encode(word));
    i = j;
  }
  if (from_right) std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> split(std::string_view text, const std::optional<std::string>& sep,
                               std::int64_t maxsplit, bool from_right) {
  if (!sep) return split_whitespace(text, maxsplit, from_right);
  if (sep->empty()) fail("ValueError: empty separator");
  std::vector<std::string> out;
  if (!from_right) {
    std::size_t pos = 0;
    while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
      const std::size_t hit = text.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(text.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(text.substr(pos));
    return out;
  }
  std::size_t end = text.size();
  std::int64_t splits = 0;
  while (maxsplit < 0 || splits < maxsplit) {
    if (end < sep->size()) break;
    const std::size_t hit = text.rfind(*sep, end - sep->size());
    if (hit == std::string_view::npos) break;
    out.emplace_back(text.substr(hit + sep->size(), end - hit - sep->size()));
    end = hit;
    ++splits;
  }
  out.emplace_back(text.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view text, bool keep_ends) {
  const std::u32string s = decode(text);
  std::vector<std::string> out;
  std::size_t start = 0, i = 0;
  auto is_break = [](char32_t c) {
    return c == U'\n' || c == U'\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
           c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
  };
  while (i < s.size()) {
    if (!is_break(s[i])) {
      ++i;
      continue;
    }
    std::size_t end = i + 1;
    if (s[i] == U'\r' && end < s.size() && s[end] == U'\n') ++end;
    out.push_back(encode(std::u32string_view(s).substr(start, (keep_ends ? end : i) - start)));
    start = i = end;
  }
  if (start < s.size()) out.push_back(encode(std::u32string_view(s).substr(start)));
  return out;
}

std::string replace(std::string_view text, std::string_view old, std::string_view with,
                    std::int64_t count) {
  std::string out;
  std::int64_t done = 0;
  if (old.empty()) {
    // Python inserts `with` before every code point and at the end.
    const std::u32string s = decode(text);
    for (char32_t c : s) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      out += encode(std::u32string_view(&c, 1));
    }
    if (count < 0 || done < count) out += with;
    return out;
  }
  std::size_t pos = 0;
  while (count < 0 || done < count) {
    const std::size_t hit = text.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos)).append(with);
    pos = hit + old.size();
    ++done;
  }
  out.append(text.substr(pos));
  return out;
}

std::int64_t find(std::string_view text, std::string_view sub, bool from_right) {
  const std::size_t hit = from_right ? text.rfind(sub) : text.find(sub);
  if (hit == std::string_view::npos) return -1;
  return length(text.substr(0, hit));
}

std::int64_t count(std::string_view text, std::string_view sub) {
  if (sub.empty()) return length(text) + 1;
  std::int64_t n = 0;
  for (std::size_t pos = text.find(sub); pos != std::string_view::npos;
       pos = text.find(sub, pos + sub.size()))
    ++n;
  return n;
}

namespace {

std::string icu_case(std::string_view text, bool to_upper) {
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (to_upper)
    s.toUpper(icu::Locale::getRoot());
  else
    s.toLower(icu::Locale::getRoot());
  std::string out;
  s.toUTF8String(out);
  return out;
}

bool is_cased(char32_t c) {
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED);
}

}  // namespace

std::string lower(std::string_view text) {
  return icu_case(text, false);
}
std::string upper(std::string_view text) {
  return icu_case(text, true);
}

std::string capitalize(std::string_view text) {
  std::u32string s = decode(text);
  if (s.empty()) return {};
  const char32_t first = static_cast<char32_t>(u_totitle(static_cast<UChar32>(s[0])));
  return encode(std::u32string_view(&first, 1)) + lower(encode(std::u32string_view(s).substr(1)));
}

std::string title(std::string_view text) {
  std::u32string s = decode(text);
  bool previous_cased = false;
  for (char32_t& c : s) {
    const bool cased = is_cased(c);
    if (cased)
      c = static_cast<char32_t>(previous_cased ? u_tolower(static_cast<UChar32>(c))
                                               : u_totitle(static_cast<UChar32>(c)));
    previous_cased = cased;
  }
  return encode(s);
}

bool is_lower(std::string_view text) {
  bool any = false;
  for (char32_t c : decode(text)) {
    const auto u = static_cast<UChar32>(c);
    if (u_isUUppercase(u) || u_istitle(u)) return false;
    any = any || u_isULowercase(u);
  }
  return any;
}

bool is_upper(std::string_view text) {
  bool any = false;
  for (char32_t c : decode(text)) {
    const auto u = static_cast<UChar32>(c);
    if (u_isULowercase(u) || u_istitle(u)) return false;
    any = any || u_isUUppercase(u);
  }
  return any;
}

bool all_of(std::string_view text, CharClass cls) {
  const std::u32string s = decode(text);
  if (s.empty()) return false;
  for (char32_t c : s) {
    const auto u = static_cast<UChar32>(c);
    const auto numeric = u_getIntPropertyValue(u, UCHAR_NUMERIC_TYPE);
    const bool digit = numeric == U_NT_DECIMAL || numeric == U_NT_DIGIT;
    const auto type = u_charType(u);
    const bool alpha = type == U_UPPERCASE_LETTER || type == U_LOWERCASE_LETTER ||
                       type == U_TITLECASE_LETTER || type == U_MODIFIER_LETTER ||
                       type == U_OTHER_LETTER;
    bool ok = false;
    switch (cls) {
      case CharClass::digit:
        ok = digit;
        break;
      case CharClass::alpha:
        ok = alpha;
        break;
      case CharClass::alnum:
        ok = alpha || numeric != U_NT_NONE;
        break;
      case CharClass::space:
        ok = is_space(c);
        break;
    }
    if (!ok) return false;
  }
  return true;
}

bool is_printable(char32_t c) {
  if (c == U' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

}  // namespace masque::chat::jinja::pystr
