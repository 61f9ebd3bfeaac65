#include "regex.hpp"

#include <stdexcept>

#include <unicode/regex.h>
#include <unicode/utext.h>

#include "icu_find_all.hpp"
#include "pretokenizer.hpp"

namespace masque::hfjson {

namespace {
constexpr const char* kWord = R"(\p{L}\p{M}\p{N}\p{Pc})";
}

std::string translate_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  int class_depth = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      const bool in_class = class_depth > 0;
      switch (e) {
        case 's':
          out += R"(\p{White_Space})";
          break;
        case 'S':
          out += R"(\P{White_Space})";
          break;
        case 'h':
          out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
          break;
        case 'H':
          out += "[^0-9a-fA-F]";
          break;
        case 'w':
          out += in_class ? std::string(kWord) : "[" + std::string(kWord) + "]";
          break;
        case 'W':
          out += "[^" + std::string(kWord) + "]";
          break;
        default:
          out += '\\';
          out += e;
      }
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal in Oniguruma.
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out += '^';
        ++i;
      }
      if (i + 1 < p.size() && p[i + 1] == ']') {
        out += "\\]";
        ++i;
      }
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out += c;
  }
  return out;
}

Regex::Regex(std::string_view pattern) {
  const std::string icu_pattern = translate_oniguruma(pattern);
  UErrorCode status = U_ZERO_ERROR;
  UParseError pe{};
  pattern_.reset(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(icu_pattern), 0, pe, status));
  if (U_FAILURE(status))
    throw std::invalid_argument(std::string("the regex does not compile (ICU: ") +
                                u_errorName(status) + " at offset " + std::to_string(pe.offset) +
                                ")");
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  if (text.empty()) return;
  tok::icu_find_all(*pattern_, text, out);
}

Pattern::Pattern(const Node& node) {
  if (node.has("String")) {
    literal_ = node.str("String");
  } else if (node.has("Regex")) {
    const Node r = node.at("Regex");
    const std::string text = r.str();
    if (text == masque::bpe::kLlama3Pattern) llama3_digits_ = 3;
    if (text == masque::bpe::kQwen2Pattern) llama3_digits_ = 1;
    try {
      regex_ = std::make_unique<Regex>(r.str());
    } catch (const std::invalid_argument& e) {
      r.fail(e.what());
    }
  } else {
    node.fail("expected {\"String\": ...} or {\"Regex\": ...}");
  }
}

void Pattern::find_all(std::string_view text, std::vector<Span>& out) const {
  if (llama3_digits_ > 0) {
    masque::bpe::split_llama3(text, llama3_digits_, out);
    return;
  }
  if (regex_) {
    regex_->find_all(text, out);
    return;
  }
  if (literal_.empty()) return;
  for (std::size_t p = text.find(literal_); p != std::string_view::npos;
       p = text.find(literal_, p + literal_.size()))
    out.emplace_back(p, p + literal_.size());
}

}  // namespace masque::hfjson
