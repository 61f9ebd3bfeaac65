// GPT-2's pre-tokenizer: the text is cut into pieces by
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (leftmost alternative first at every position; \s is Unicode White_Space).
//
// Two implementations with identical results: `split_gpt2` is a hand-written scanner (the fast
// path used by the plugin) and `split_gpt2_regex` runs the pattern through ICU's regex engine
// (the reference the tests compare it with). Both take Unicode classes from ICU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace masque::bpe {

inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum CharClass : std::uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// \p{L} / \p{N} / White_Space / anything else, from ICU (a table for the BMP, built once).
CharClass char_class(char32_t c);

using Piece = std::pair<std::size_t, std::size_t>;  // [begin, end) in bytes

// Appends the pieces of `text` (valid UTF-8) to `out`.
void split_gpt2(std::string_view text, std::vector<Piece>& out);

// The same through ICU's regex engine (slow; for tests and checks).
std::vector<Piece> split_gpt2_regex(std::string_view text);

}  // namespace masque::bpe
