// Regular expressions of tokenizer.json through ICU. Hugging Face compiles them with Oniguruma
// (Ruby syntax); translate_oniguruma() rewrites the constructs whose meaning differs in ICU:
// \s and \S (Oniguruma: the White_Space property; ICU: [\t\n\f\r\p{Z}], without VT and NEL),
// \h and \H (Oniguruma: hexadecimal digits; ICU: horizontal space) and \w / \W (Oniguruma:
// letters, marks, numbers and connector punctuation).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "json_node.hpp"

#include <unicode/regex.h>

namespace masque::hfjson {

std::string translate_oniguruma(std::string_view pattern);

using Span = std::pair<std::size_t, std::size_t>;  // [begin, end) in bytes

class Regex {
 public:
  // Compiles `pattern` (Oniguruma syntax); throws std::invalid_argument with ICU's reason.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(Regex&&) noexcept;
  // Appends every non-overlapping match in `text` (valid UTF-8), leftmost first.
  void find_all(std::string_view text, std::vector<Span>& out) const;

 private:
  std::unique_ptr<icu::RegexPattern> pattern_;
};

// A pattern of Replace and Split: {"String": literal} or {"Regex": oniguruma}. The Llama 3 and
// Qwen2 pre-tokenizer regexes run on a hand-written scanner with the same results
// (bpe/pretokenizer.hpp; the tests compare both), the rest through ICU.
class Pattern {
 public:
  explicit Pattern(const Node& node);
  // Appends every non-overlapping match, leftmost first.
  void find_all(std::string_view text, std::vector<Span>& out) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  int llama3_digits_ = 0;  // > 0: the Llama 3 / Qwen2 scanner with this many digits per piece
};

}  // namespace masque::hfjson
