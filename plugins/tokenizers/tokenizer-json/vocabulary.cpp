#include "vocabulary.hpp"

#include <algorithm>

namespace masque::hfjson {

Vocabulary Vocabulary::from_object(const Node& node) {
  if (!node.value().is_object()) node.fail("expected an object {\"token\": id, ...}");
  Vocabulary v;
  const std::int64_t limit = 2 * static_cast<std::int64_t>(node.value().size()) + 65536;
  for (const auto& [token, value] : node.value().items()) {
    if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
        value.get<std::int64_t>() >= limit)
      node.fail("the id of " + masque::tok::quote_token(token) +
                " is not an integer in 0.." + std::to_string(limit - 1) +
                " (ids number the entries)");
    if (token.size() > masque::tok::kMaxTokenBytes)
      node.fail("the token " + masque::tok::quote_token(token) + " is too long");
    v.add(token, value.get<TokenId>());
  }
  return v;
}

bool Vocabulary::add(std::string piece, TokenId id) {
  if (ids_.insert(piece, id) >= 0) return false;
  if (static_cast<std::size_t>(id) >= pieces_.size()) pieces_.resize(static_cast<std::size_t>(id) + 1);
  text_bytes_ += piece.size();
  if (pieces_[id].empty()) pieces_[id] = std::move(piece);
  return true;
}

std::size_t Vocabulary::memory_bytes() const {
  return pieces_.capacity() * sizeof(std::string) + 2 * text_bytes_ + ids_.size() * 32;
}

}  // namespace masque::hfjson
