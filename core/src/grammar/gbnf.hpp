// GBNF, llama.cpp's grammar format (its grammars/README.md): rules `name ::= body`, literals
// "..." and classes [a-z] / [^...] / `.` over Unicode code points, groups, `|`, `*` `+` `?`
// `{m}` `{m,}` `{m,n}`, `#` comments; the start rule is `root`. Parsed into one flat table of
// elements, every group and repetition a rule of its own, for GrammarMatcher.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace masque::grammar {

struct CharRange {
  char32_t lo = 0, hi = 0;  // inclusive
};

// A terminal: one code point from sorted, disjoint ranges (or from outside them, negated).
struct CharSet {
  std::vector<CharRange> ranges;
  bool negated = false;

  bool matches(char32_t c) const;
  // True when some code point in [lo, hi] matches (a partial UTF-8 sequence's possible ends).
  bool matches_any_in(char32_t lo, char32_t hi) const;
};

struct Element {
  enum class Kind : std::uint8_t { chars, rule, end };
  Kind kind = Kind::end;
  std::uint32_t index = 0;  // chars: into Grammar::charsets; rule: a rule id
};

struct Grammar {
  std::vector<CharSet> charsets;
  // Every alternative of every rule laid end to end, each closed by an `end` element.
  std::vector<Element> elements;
  std::vector<std::vector<std::uint32_t>> alternatives;  // per rule: where each one starts
  std::vector<std::string> rule_names;                   // generated rules: "name-N"
  std::uint32_t root = 0;
  std::string source;  // the file it was read from, for errors found while matching
};

// ConfigError "source:line:column: ..." for a malformed grammar, a rule used but not defined,
// no `root`, or a left-recursive rule (which no stack-based matcher can expand).
Grammar parse_gbnf(std::string_view text, const std::string& source);

}  // namespace masque::grammar
