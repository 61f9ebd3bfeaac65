// Every match of an ICU regex over UTF-8 text, as byte spans (header only): one loop for the
// GPT-2 reference split (bpe) and tokenizer.json's Split pre-tokenizers.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unicode/regex.h>
#include <unicode/utext.h>

namespace masque::tok {

// Appends [begin, end) of each match of `pattern` in `text`, in order.
inline void icu_find_all(const icu::RegexPattern& pattern, std::string_view text,
                         std::vector<std::pair<std::size_t, std::size_t>>& out) {
  UErrorCode status = U_ZERO_ERROR;
  UText* ut = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  std::unique_ptr<icu::RegexMatcher> m(pattern.matcher(status));
  if (U_FAILURE(status)) {
    utext_close(ut);
    throw std::runtime_error(std::string("ICU regex: ") + u_errorName(status));
  }
  m->reset(ut);
  while (m->find(status) && U_SUCCESS(status)) {
    const auto b = static_cast<std::size_t>(m->start64(status));
    const auto e = static_cast<std::size_t>(m->end64(status));
    out.emplace_back(b, e);
  }
  utext_close(ut);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU regex: ") + u_errorName(status));
}

}  // namespace masque::tok
