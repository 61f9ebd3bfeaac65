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

// Llama 3's pattern (also Qwen2/3's with max_digits 1), in Oniguruma's reading (\s = White_Space):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// a hand-written scanner with the regex's results (tests compare it with ICU on the pattern).
inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
void split_llama3(std::string_view text, int max_digits, std::vector<Piece>& out);

}  // namespace masque::bpe
