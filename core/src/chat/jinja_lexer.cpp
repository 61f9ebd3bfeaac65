#include "chat/jinja_lexer.hpp"

#include <cctype>
#include <cstring>
#include <limits>

#include "chat/jinja_error.hpp"
#include "chat/python_str.hpp"

namespace masque::chat::jinja {

namespace {

// \r\n and \r become \n, and one final newline goes (jinja2 without keep_trailing_newline).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// The UTF-8 length of the whitespace code point at `pos` (Python's \s), or 0.
std::size_t space_at(std::string_view s, std::size_t pos) {
  if (pos >= s.size()) return 0;
  const auto c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return pystr::is_space(c) ? 1 : 0;
  std::size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  if (pos + len > s.size()) return 0;
  const std::u32string cp = pystr::decode(s.substr(pos, len));
  return cp.size() == 1 && pystr::is_space(cp[0]) ? len : 0;
}

std::size_t skip_spaces(std::string_view s, std::size_t pos) {
  while (std::size_t len = space_at(s, pos)) pos += len;
  return pos;
}

std::string rstrip_spaces(std::string_view text) {
  return pystr::strip(text, std::nullopt, false, true);
}

bool starts_with(std::string_view s, std::size_t pos, std::string_view prefix) {
  return s.substr(pos, prefix.size()) == prefix;
}

class Lexer {
 public:
  Lexer(std::string source, const std::string& name, const LexerOptions& options)
      : s_(std::move(source)), name_(name), options_(options) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) root();
    push(Token::Type::eof, "", s_.size());
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(const std::string& message, std::size_t pos) {
    throw TemplateError(TemplateError::Kind::syntax, message, name_, line_of(pos));
  }

  int line_of(std::size_t pos) {
    // Tokens come in order, so the count moves forward only (pos never goes back much).
    if (pos < counted_pos_) {
      counted_pos_ = 0;
      counted_line_ = 1;
    }
    for (; counted_pos_ < pos && counted_pos_ < s_.size(); ++counted_pos_)
      if (s_[counted_pos_] == '\n') ++counted_line_;
    return counted_line_;
  }

  void push(Token::Type type, std::string text, std::size_t pos) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.line = line_of(pos);
    tokens_.push_back(std::move(t));
  }

  // Whitespace control of the text before a tag: `sign` is '-', '+' or 0.
  std::string control_before(std::string text, char sign, bool is_variable) {
    if (sign == '-') return rstrip_spaces(text);
    if (sign == '+' || !options_.lstrip_blocks || is_variable) return text;
    // lstrip_blocks: the spaces between the line's start and the tag go, when nothing else
    // is on the line before the tag.
    const std::size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (line_start == 0 && !line_starting_) return text;
    if (line_start == text.size()) return text;
    if (skip_spaces(text, line_start) != text.size()) return text;
    return text.substr(0, line_start);
  }

  void emit_data(std::string text, std::size_t pos) {
    if (!text.empty()) push(Token::Type::data, std::move(text), pos);
  }

  // The match of a block end (`+%}`, `-%}` + whitespace, `%}` + one newline with trim_blocks)
  // at pos: its end, or npos.
  std::size_t block_end_at(std::size_t pos, char close) {
    const std::string end = std::string(1, close) + "}";
    if (starts_with(s_, pos, "+" + end) && close != '}') return pos + 3;
    if (starts_with(s_, pos, "-" + end)) return skip_spaces(s_, pos + 3);
    if (starts_with(s_, pos, end)) {
      std::size_t after = pos + 2;
      if (close != '}' && options_.trim_blocks && after < s_.size() && s_[after] == '\n') ++after;
      return after;
    }
    return std::string::npos;
  }

  // `{% raw %}` (with optional signs) at pos: its end, or npos.
  std::size_t raw_begin_at(std::size_t pos) {
    std::size_t p = pos + 2;
    if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ++p;
    p = skip_spaces(s_, p);
    if (!starts_with(s_, p, "raw")) return std::string::npos;
    p = skip_spaces(s_, p + 3);
    if (starts_with(s_, p, "-%}")) return skip_spaces(s_, p + 3);
    if (starts_with(s_, p, "%}")) return p + 2;  // no trim_blocks here, as in jinja2
    return std::string::npos;
  }

  void set_line_starting(std::size_t match_end) {
    line_starting_ = match_end > 0 && s_[match_end - 1] == '\n';
  }

  void root() {
    std::size_t tag = s_.find('{', pos_);
    while (
        tag != std::string::npos &&
        (tag + 1 >= s_.size() || (s_[tag + 1] != '{' && s_[tag + 1] != '%' && s_[tag + 1] != '#')))
      tag = s_.find('{', tag + 1);
    if (tag == std::string::npos) {
      emit_data(s_.substr(pos_), pos_);
      pos_ = s_.size();
      return;
    }
    const char kind = s_[tag + 1];
    const char sign =
        tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : 0;
    emit_data(control_before(s_.substr(pos_, tag - pos_), sign, kind == '{'), pos_);
    if (kind == '%') {
      const std::size_t raw_end = raw_begin_at(tag);
      if (raw_end != std::string::npos) return raw(tag, raw_end);
    }
    std::size_t p = tag + 2 + (sign ? 1 : 0);
    line_starting_ = false;
    if (kind == '#') return comment(tag, p);
    push(kind == '{' ? Token::Type::variable_begin : Token::Type::block_begin, "", tag);
    inside_tag(p, kind == '{' ? '}' : '%');
  }

  void comment(std::size_t tag, std::size_t p) {
    const std::size_t q = s_.find("#}", p);
    if (q == std::string::npos) error("Missing end of comment tag", tag);
    std::size_t end;
    if (q > p && s_[q - 1] == '+')
      end = q + 2;
    else if (q > p && s_[q - 1] == '-')
      end = skip_spaces(s_, q + 2);
    else
      end = q + 2 + (options_.trim_blocks && q + 2 < s_.size() && s_[q + 2] == '\n' ? 1 : 0);
    pos_ = end;
    set_line_starting(end);
  }

  void raw(std::size_t tag, std::size_t content) {
    set_line_starting(content);
    for (std::size_t q = s_.find("{%", content); q != std::string::npos; q = s_.find("{%", q + 1)) {
      std::size_t p = q + 2;
      const char sign = p < s_.size() && (s_[p] == '-' || s_[p] == '+') ? s_[p] : 0;
      if (sign) ++p;
      p = skip_spaces(s_, p);
      if (!starts_with(s_, p, "endraw")) continue;
      p = skip_spaces(s_, p + 6);
      const std::size_t end = block_end_at(p, '%');
      if (end == std::string::npos) continue;
      emit_data(control_before(s_.substr(content, q - content), sign, false), content);
      pos_ = end;
      set_line_starting(end);
      return;
    }
    error("Missing end of raw directive", tag);
  }

  void inside_tag(std::size_t p, char close) {
    std::vector<char> balance;  // closing brackets expected, innermost last
    while (true) {
      if (balance.empty()) {
        const std::size_t end = block_end_at(p, close);
        if (end != std::string::npos) {
          push(close == '}' ? Token::Type::variable_end : Token::Type::block_end, "", p);
          pos_ = end;
          set_line_starting(end);
          return;
        }
      }
      if (std::size_t after = skip_spaces(s_, p); after != p) {
        p = after;
        continue;
      }
      if (p >= s_.size()) {  // the parser reports the unfinished tag
        pos_ = p;
        return;
      }
      const char c = s_[p];
      if (std::isdigit(static_cast<unsigned char>(c)))
        p = number(p);
      else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_')
        p = name(p);
      else if (c == '\'' || c == '"')
        p = string(p);
      else
        p = op(p, balance);
    }
  }

  std::size_t name(std::size_t p) {
    std::size_t e = p;
    while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
    if (e < s_.size() && static_cast<unsigned char>(s_[e]) >= 0x80) unsupported_name(p);
    push(Token::Type::name, s_.substr(p, e - p), p);
    return e;
  }

  [[noreturn]] void unsupported_name(std::size_t p) {
    throw TemplateError(TemplateError::Kind::unsupported, "a name with non-ASCII letters", name_,
                        line_of(p));
  }

  // Digits with single underscores between them, from p; returns the end.
  std::size_t digits(std::size_t p) {
    std::size_t e = p;
    while (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) {
      ++e;
      if (e + 1 < s_.size() && s_[e] == '_' && std::isdigit(static_cast<unsigned char>(s_[e + 1])))
        ++e;
    }
    return e;
  }

  std::size_t number(std::size_t p) {
    if (s_[p] == '0' && p + 1 < s_.size() && std::strchr("xXoObB", s_[p + 1]) && s_[p + 1])
      throw TemplateError(TemplateError::Kind::unsupported, "hexadecimal, octal and binary numbers",
                          name_, line_of(p));
    std::size_t e = digits(p);
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && std::isdigit(static_cast<unsigned char>(s_[e + 1])) &&
        !(p > 0 && s_[p - 1] == '.')) {
      e = digits(e + 1);
      is_float = true;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E') && !(p > 0 && s_[p - 1] == '.')) {
      std::size_t x = e + 1;
      if (x < s_.size() && (s_[x] == '+' || s_[x] == '-')) ++x;
      if (x < s_.size() && std::isdigit(static_cast<unsigned char>(s_[x]))) {
        e = digits(x);
        is_float = true;
      }
    }
    std::string text;
    for (std::size_t i = p; i < e; ++i)
      if (s_[i] != '_') text += s_[i];
    Token t;
    t.line = line_of(p);
    if (is_float) {
      t.type = Token::Type::floating;
      t.floating = std::stod(text);
    } else {
      if (text.size() > 1 && text[0] == '0' && text.find_first_not_of('0') != std::string::npos) {
        // jinja2 reads "0" then the rest as a second number; no template means that.
        error("a number with a leading zero", p);
      }
      t.type = Token::Type::integer;
      try {
        t.integer = std::stoll(text);
      } catch (const std::out_of_range&) {
        throw TemplateError(TemplateError::Kind::unsupported,
                            "the integer " + text + " (at most 2^63-1)", name_, t.line);
      }
    }
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
    return e;
  }

  // A string literal, its escapes read as Python's unicode-escape codec reads them.
  std::size_t string(std::size_t p) {
    const char quote = s_[p];
    std::string value;
    std::size_t i = p + 1;
    auto hex = [&](std::size_t at, int n) -> char32_t {
      if (at + n > s_.size()) error("truncated escape in a string", p);
      std::uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        const char h = s_[at + k];
        if (!std::isxdigit(static_cast<unsigned char>(h))) error("truncated escape in a string", p);
        v = v * 16 + static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                    ? h - '0'
                                                    : std::tolower(static_cast<unsigned char>(h)) -
                                                          'a' + 10);
      }
      if (v > 0x10FFFF) error("an escape beyond U+10FFFF in a string", p);
      return static_cast<char32_t>(v);
    };
    auto append = [&](char32_t c) { value += pystr::encode(std::u32string_view(&c, 1)); };
    while (true) {
      if (i >= s_.size()) error("unexpected end of template inside a string", p);
      const char c = s_[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= s_.size()) error("unexpected end of template inside a string", p);
      const char e = s_[i + 1];
      i += 2;
      switch (e) {
        case '\n':
          break;  // a line continuation
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'v':
          value += '\v';
          break;
        case 'x':
          append(hex(i, 2));
          i += 2;
          break;
        case 'u':
          append(hex(i, 4));
          i += 4;
          break;
        case 'U':
          append(hex(i, 8));
          i += 8;
          break;
        case 'N':
          throw TemplateError(TemplateError::Kind::unsupported, "\\N{...} escapes in strings",
                              name_, line_of(p));
        default:
          if (e >= '0' && e <= '7') {
            std::uint32_t v = static_cast<std::uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < s_.size() && s_[i] >= '0' && s_[i] <= '7'; ++k, ++i)
              v = v * 8 + static_cast<std::uint32_t>(s_[i] - '0');
            append(static_cast<char32_t>(v));
          } else {
            value += '\\';  // an unknown escape stays as written
            value += e;
          }
      }
    }
    push(Token::Type::string, std::move(value), p);
    return i + 1;
  }

  std::size_t op(std::size_t p, std::vector<char>& balance) {
    static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* o : two)
      if (starts_with(s_, p, o)) {
        push(Token::Type::op, o, p);
        return p + 2;
      }
    const char c = s_[p];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      if (static_cast<unsigned char>(c) >= 0x80) unsupported_name(p);
      error(std::string("unexpected char '") + c + "'", p);
    }
    if (c == '(' || c == '[' || c == '{') balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) error(std::string("unexpected '") + c + "'", p);
      if (balance.back() != c)
        error(std::string("unexpected '") + c + "', expected '" + balance.back() + "'", p);
      balance.pop_back();
    }
    push(Token::Type::op, std::string(1, c), p);
    return p + 1;
  }

  std::string s_;
  const std::string& name_;
  LexerOptions options_;
  std::size_t pos_ = 0;
  bool line_starting_ = true;  // the previous match ended a line (for lstrip_blocks)
  std::vector<Token> tokens_;
  std::size_t counted_pos_ = 0;
  int counted_line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& source_name,
                            const LexerOptions& options) {
  return Lexer(normalize_newlines(source), source_name, options).run();
}

}  // namespace masque::chat::jinja
