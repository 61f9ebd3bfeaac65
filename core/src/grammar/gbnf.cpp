#include "grammar/gbnf.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "masque/error.hpp"

namespace masque::grammar {

bool CharSet::matches(char32_t c) const {
  bool in = false;
  for (const CharRange& r : ranges)
    if (c >= r.lo && c <= r.hi) {
      in = true;
      break;
    }
  return in != negated;
}

bool CharSet::matches_any_in(char32_t lo, char32_t hi) const {
  if (!negated) {
    for (const CharRange& r : ranges)
      if (r.lo <= hi && r.hi >= lo) return true;
    return false;
  }
  // Negated: some code point of [lo, hi] lies outside every (sorted, disjoint) range.
  char32_t next = lo;
  for (const CharRange& r : ranges) {
    if (r.hi < next) continue;
    if (r.lo > next) return true;
    if (r.hi >= hi) return false;
    next = r.hi + 1;
  }
  return next <= hi;
}

namespace {

constexpr std::uint32_t kMaxRepetition = 10000;  // {m,n}: rules per bound, kept sane
constexpr std::size_t kMaxGroupDepth = 1000;     // parsed by recursion: bounded stack

using Sequence = std::vector<Element>;

struct RuleDraft {
  std::string name;
  std::vector<Sequence> alternatives;
  bool defined = false;
  std::size_t used_at = 0;  // where a reference first named it (for "not defined")
};

class Parser {
 public:
  Parser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  Grammar parse() {
    skip_space(true);
    while (pos_ < text_.size()) {
      parse_rule();
      skip_space(true);
    }
    for (const RuleDraft& rule : rules_)
      if (!rule.defined) fail_at(rule.used_at, "rule '" + rule.name + "' is used but not defined");
    const auto root = ids_.find("root");
    if (root == ids_.end()) fail_at(0, "no rule 'root' (the start rule)");
    Grammar g = flatten();
    g.root = root->second;
    g.source = source_;
    check_left_recursion(g);
    return g;
  }

 private:
  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw ConfigError(source_ + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " +
                      what);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  // Blanks and comments; newlines too when `newlines` (inside groups, after `::=` and `|`).
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && text_[pos_] != '\n') ++pos_;
      } else if (newlines && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }

  std::string parse_name() {
    const std::size_t begin = pos_;
    while (!at_end() && is_name_char(text_[pos_])) ++pos_;
    if (pos_ == begin) fail("expected a rule name");
    return std::string(text_.substr(begin, pos_ - begin));
  }

  std::uint32_t rule_id(const std::string& name, std::size_t at) {
    const auto [it, added] = ids_.emplace(name, static_cast<std::uint32_t>(rules_.size()));
    if (added) {
      RuleDraft rule;
      rule.name = name;
      rule.used_at = at;
      rules_.push_back(std::move(rule));
    }
    return it->second;
  }

  std::uint32_t new_rule(const std::string& base) {
    std::string name;
    do name = base + "-" + std::to_string(++generated_[base]);
    while (ids_.count(name));
    const std::uint32_t id = rule_id(name, pos_);
    rules_[id].defined = true;
    return id;
  }

  void parse_rule() {
    const std::size_t at = pos_;
    const std::string name = parse_name();
    skip_space(false);
    if (text_.substr(pos_, 3) != "::=") fail("expected '::=' after the rule name '" + name + "'");
    pos_ += 3;
    skip_space(true);
    const std::uint32_t id = rule_id(name, at);
    if (rules_[id].defined) fail_at(at, "rule '" + name + "' is defined twice");
    rules_[id].defined = true;
    current_ = name;
    auto alternatives = parse_alternatives(false);
    rules_[id].alternatives = std::move(alternatives);
    if (!at_end() && peek() != '\n' && peek() != '\r')
      fail(std::string("unexpected '") + peek() + "' in rule '" + name + "'");
  }

  std::vector<Sequence> parse_alternatives(bool nested) {
    std::vector<Sequence> out;
    out.push_back(parse_sequence(nested));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      out.push_back(parse_sequence(nested));
    }
    return out;
  }

  Sequence parse_sequence(bool nested) {
    Sequence seq;
    std::size_t last = 0;  // where the last item's elements start, for a repetition
    bool have_item = false;
    for (;;) {
      const char c = peek();
      const std::size_t start = seq.size();
      if (c == '"') {
        parse_literal(seq);
      } else if (c == '[') {
        seq.push_back(add_chars(parse_class()));
      } else if (c == '.') {
        ++pos_;
        seq.push_back(add_chars(CharSet{.ranges = {}, .negated = true}));
      } else if (is_name_char(c)) {
        const std::size_t at = pos_;
        seq.push_back({Element::Kind::rule, rule_id(parse_name(), at)});
      } else if (c == '(') {
        if (++depth_ > kMaxGroupDepth)
          fail("groups nested more than " + std::to_string(kMaxGroupDepth) + " deep");
        ++pos_;
        skip_space(true);
        const std::uint32_t id = new_rule(current_);
        auto alternatives = parse_alternatives(true);
        rules_[id].alternatives = std::move(alternatives);
        if (peek() != ')') fail("expected ')'");
        ++pos_;
        --depth_;
        seq.push_back({Element::Kind::rule, id});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_item) fail(std::string("'") + c + "' repeats nothing");
        repeat(seq, last);
        skip_space(nested);
        continue;
      } else {
        break;
      }
      last = start;
      have_item = true;
      skip_space(nested);
    }
    return seq;
  }

  // Reads a literal's code points into `seq`, one element each.
  void parse_literal(Sequence& seq) {
    ++pos_;
    while (peek() != '"') {
      if (at_end() || peek() == '\n') fail("unterminated string literal");
      const char32_t c = parse_char();
      seq.push_back(add_chars(CharSet{.ranges = {{c, c}}, .negated = false}));
    }
    ++pos_;
  }

  CharSet parse_class() {
    ++pos_;
    CharSet set;
    if (peek() == '^') {
      set.negated = true;
      ++pos_;
    }
    while (peek() != ']') {
      if (at_end() || peek() == '\n') fail("unterminated character class");
      const char32_t lo = parse_char();
      char32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) fail("a character range whose end comes before its start");
      }
      set.ranges.push_back({lo, hi});
    }
    ++pos_;
    normalize(set);
    return set;
  }

  static void normalize(CharSet& set) {
    auto& r = set.ranges;
    std::sort(r.begin(), r.end(), [](CharRange a, CharRange b) { return a.lo < b.lo; });
    std::vector<CharRange> merged;
    for (const CharRange& x : r)
      if (!merged.empty() && x.lo <= merged.back().hi + 1)
        merged.back().hi = std::max(merged.back().hi, x.hi);
      else
        merged.push_back(x);
    r = std::move(merged);
  }

  // One code point of a literal or class: UTF-8, or an escape.
  char32_t parse_char() {
    const auto byte = static_cast<unsigned char>(text_[pos_]);
    if (byte == '\\') return parse_escape();
    return parse_utf8();
  }

  char32_t parse_escape() {
    ++pos_;
    if (at_end()) fail("a '\\' at the end of the grammar");
    const char c = text_[pos_++];
    switch (c) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
        return static_cast<char32_t>(c);
      case 'x':
        return parse_hex(2);
      case 'u':
        return parse_hex(4);
      case 'U':
        return parse_hex(8);
      default:
        fail_at(pos_ - 2, std::string("unknown escape '\\") + c + "'");
    }
  }

  char32_t parse_hex(int digits) {
    char32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) fail("expected " + std::to_string(digits) + " hex digits");
      value = value * 16 + static_cast<char32_t>(d);
      ++pos_;
    }
    if (value > 0x10FFFF) fail("a code point above U+10FFFF");
    return value;
  }

  char32_t parse_utf8() {
    const auto b0 = static_cast<unsigned char>(text_[pos_]);
    int extra = 0;
    char32_t c = b0;
    if (b0 >= 0xF0 && b0 <= 0xF4) {
      extra = 3;
      c = b0 & 0x07;
    } else if (b0 >= 0xE0) {
      extra = 2;
      c = b0 & 0x0F;
    } else if (b0 >= 0xC2 && b0 < 0xE0) {
      extra = 1;
      c = b0 & 0x1F;
    } else if (b0 >= 0x80) {
      fail("invalid UTF-8");
    }
    ++pos_;
    for (int i = 0; i < extra; ++i) {
      const auto b = static_cast<unsigned char>(peek());
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8");
      c = (c << 6) | (b & 0x3F);
      ++pos_;
    }
    return c;
  }

  Element add_chars(CharSet set) {
    charsets_.push_back(std::move(set));
    return {Element::Kind::chars, static_cast<std::uint32_t>(charsets_.size() - 1)};
  }

  std::uint32_t parse_count() {
    const std::size_t begin = pos_;
    std::uint64_t n = 0;
    while (peek() >= '0' && peek() <= '9') {
      n = n * 10 + static_cast<std::uint64_t>(peek() - '0');
      if (n > kMaxRepetition)
        fail_at(begin, "a repetition count above " + std::to_string(kMaxRepetition));
      ++pos_;
    }
    if (pos_ == begin) fail("expected a number");
    return static_cast<std::uint32_t>(n);
  }

  // The postfix operator at pos_ applied to seq[last..]: the item becomes one element (a rule
  // when it is several), then copies of it and generated rules for the optional part.
  void repeat(Sequence& seq, std::size_t last) {
    std::uint32_t min = 0, max = 0;
    bool unbounded = false;
    const char op = text_[pos_++];
    if (op == '*') {
      unbounded = true;
    } else if (op == '+') {
      min = 1;
      unbounded = true;
    } else if (op == '?') {
      max = 1;
    } else {
      skip_space(false);
      min = parse_count();
      skip_space(false);
      max = min;
      if (peek() == ',') {
        ++pos_;
        skip_space(false);
        if (peek() == '}')
          unbounded = true;
        else
          max = parse_count();
        skip_space(false);
      }
      if (peek() != '}') fail("expected '}'");
      ++pos_;
      if (!unbounded && max < min) fail("a repetition {m,n} with n < m");
    }
    Element item;
    if (seq.size() - last == 1) {
      item = seq[last];
    } else {
      const std::uint32_t id = new_rule(current_);
      rules_[id].alternatives.push_back(
          Sequence(seq.begin() + static_cast<std::ptrdiff_t>(last), seq.end()));
      item = {Element::Kind::rule, id};
    }
    seq.resize(last);
    for (std::uint32_t i = 0; i < min; ++i) seq.push_back(item);
    if (unbounded) {  // R ::= item R | (nothing): right recursion, which the matcher runs flat
      const std::uint32_t r = new_rule(current_);
      rules_[r].alternatives = {{item, {Element::Kind::rule, r}}, {}};
      seq.push_back({Element::Kind::rule, r});
      return;
    }
    // max - min optional copies, nested: O_k ::= item O_{k-1} | (nothing).
    std::optional<Element> inner;
    for (std::uint32_t i = min; i < max; ++i) {
      const std::uint32_t r = new_rule(current_);
      Sequence first{item};
      if (inner) first.push_back(*inner);
      rules_[r].alternatives = {std::move(first), {}};
      inner = Element{Element::Kind::rule, r};
    }
    if (inner) seq.push_back(*inner);
  }

  Grammar flatten() {
    Grammar g;
    g.charsets = std::move(charsets_);
    for (RuleDraft& rule : rules_) {
      std::vector<std::uint32_t> starts;
      for (Sequence& alternative : rule.alternatives) {
        starts.push_back(static_cast<std::uint32_t>(g.elements.size()));
        g.elements.insert(g.elements.end(), alternative.begin(), alternative.end());
        g.elements.push_back({Element::Kind::end, 0});
      }
      g.alternatives.push_back(std::move(starts));
      g.rule_names.push_back(rule.name);
    }
    return g;
  }

  // A rule that can reach itself before consuming a character would expand forever.
  void check_left_recursion(const Grammar& g) const {
    const std::size_t n = g.alternatives.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (std::uint32_t start : g.alternatives[r]) {
          bool all = true;
          for (std::uint32_t p = start; g.elements[p].kind != Element::Kind::end; ++p)
            if (g.elements[p].kind == Element::Kind::chars || !nullable[g.elements[p].index]) {
              all = false;
              break;
            }
          if (all) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<std::uint32_t>> first(n);  // rules a rule may begin with
    for (std::size_t r = 0; r < n; ++r)
      for (std::uint32_t start : g.alternatives[r])
        for (std::uint32_t p = start; g.elements[p].kind == Element::Kind::rule; ++p) {
          first[r].push_back(g.elements[p].index);
          if (!nullable[g.elements[p].index]) break;
        }
    std::vector<char> mark(n, 0);  // 1: on the path, 2: done
    std::vector<std::uint32_t> path;
    const auto visit = [&](auto& self, std::uint32_t r) -> void {
      mark[r] = 1;
      path.push_back(r);
      for (std::uint32_t next : first[r]) {
        if (mark[next] == 1) {
          std::string cycle;
          auto it = std::find(path.begin(), path.end(), next);
          for (; it != path.end(); ++it) cycle += g.rule_names[*it] + " -> ";
          throw ConfigError(source_ + ": rule '" + g.rule_names[next] + "' is left-recursive (" +
                            cycle + g.rule_names[next] +
                            "): rewrite it to consume a character first");
        }
        if (mark[next] == 0) self(self, next);
      }
      path.pop_back();
      mark[r] = 2;
    };
    for (std::uint32_t r = 0; r < n; ++r)
      if (mark[r] == 0) visit(visit, r);
  }

  std::string_view text_;
  const std::string& source_;
  std::size_t depth_ = 0;  // groups open at pos_
  std::size_t pos_ = 0;
  std::string current_;  // the rule being parsed: generated rules are named after it
  std::vector<RuleDraft> rules_;
  std::map<std::string, std::uint32_t> ids_;
  std::map<std::string, std::uint32_t> generated_;
  std::vector<CharSet> charsets_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, const std::string& source) {
  return Parser(text, source).parse();
}

}  // namespace masque::grammar
