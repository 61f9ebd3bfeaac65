#include "vocabulary.hpp"

#include <algorithm>

namespace masque::hfjson {

Vocabulary Vocabulary::from_entries(
    const std::vector<std::pair<std::string, std::int64_t>>& entries, const Node& where) {
  Vocabulary v;
  const std::int64_t limit = 2 * static_cast<std::int64_t>(entries.size()) + 65536;
  for (const auto& [token, id] : entries) {
    if (id < 0 || id >= limit)
      where.fail("the id of " + masque::tok::quote_token(token) + " is not an integer in 0.." +
                 std::to_string(limit - 1) + " (ids number the entries)");
    if (token.size() > masque::tok::kMaxTokenBytes)
      where.fail("the token " + masque::tok::quote_token(token) + " is too long");
    v.add(token, static_cast<TokenId>(id));
  }
  return v;
}

bool Vocabulary::add(std::string piece, TokenId id) {
  if (ids_.insert(piece, id) >= 0) return false;
  if (static_cast<std::size_t>(id) >= pieces_.size())
    pieces_.resize(static_cast<std::size_t>(id) + 1);
  text_bytes_ += piece.size();
  if (pieces_[id].empty()) pieces_[id] = std::move(piece);
  return true;
}

std::size_t Vocabulary::memory_bytes() const {
  return pieces_.capacity() * sizeof(std::string) + 2 * text_bytes_ + ids_.size() * 32;
}

}  // namespace masque::hfjson
