// Python's str methods over UTF-8 text, by code point as Python counts: strip, split,
// startswith, lower, ..., and the indexing and slicing of `text[1:]` and `text[::-1]`.
// Templates call them on message contents (`message.content.split('</think>')[-1]`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace masque::chat::jinja::pystr {

std::u32string decode(std::string_view text);  // UTF-8 to code points (invalid bytes: U+FFFD)
std::string encode(std::u32string_view text);
std::int64_t length(std::string_view text);  // in code points

bool is_space(char32_t c);  // str.isspace(): Unicode whitespace, as Python defines it

// strip / lstrip / rstrip: `chars` absent means whitespace.
std::string strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                  bool right);
// split / rsplit: without `sep`, runs of whitespace and no empty items; maxsplit < 0 = all.
std::vector<std::string> split(std::string_view text, const std::optional<std::string>& sep,
                               std::int64_t maxsplit, bool from_right = false);
std::vector<std::string> splitlines(std::string_view text, bool keep_ends = false);
std::string replace(std::string_view text, std::string_view old, std::string_view with,
                    std::int64_t count = -1);
std::int64_t find(std::string_view text, std::string_view sub, bool from_right = false);
std::int64_t count(std::string_view text, std::string_view sub);

std::string lower(std::string_view text);
std::string upper(std::string_view text);
std::string capitalize(std::string_view text);  // str.capitalize()
std::string title(std::string_view text);       // str.title()
bool is_lower(std::string_view text);           // str.islower()
bool is_upper(std::string_view text);           // str.isupper()
// str.isdigit / isalpha / isalnum / isspace: true when every code point is one (and some is).
enum class CharClass { digit, alpha, alnum, space };
bool all_of(std::string_view text, CharClass cls);
bool is_printable(char32_t c);  // str.isprintable() for one code point (what repr() escapes)

}  // namespace masque::chat::jinja::pystr
