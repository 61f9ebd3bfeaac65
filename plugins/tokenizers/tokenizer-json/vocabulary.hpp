// The string <-> id table of a model (tokenizer.json "vocab"), with ids that may have gaps.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "json_node.hpp"
#include "token_files.hpp"

namespace masque::hfjson {

class Vocabulary {
 public:
  // From the entries of {"token": id, ...} (ModelTables::vocab); `where` names it in errors.
  static Vocabulary from_entries(const std::vector<std::pair<std::string, std::int64_t>>& entries,
                                 const Node& where);
  // Adds an entry; returns false when `piece` is already there (the first id stays).
  bool add(std::string piece, TokenId id);

  TokenId find(std::string_view piece) const { return ids_.find(piece); }
  TokenId find(std::string_view piece, std::uint64_t hash) const { return ids_.find(piece, hash); }
  const std::string& piece(TokenId id) const {
    static const std::string none;
    return id >= 0 && static_cast<std::size_t>(id) < pieces_.size() ? pieces_[id] : none;
  }
  std::int32_t size() const { return static_cast<std::int32_t>(pieces_.size()); }
  std::size_t count() const { return ids_.size(); }
  std::size_t memory_bytes() const;

 private:
  std::vector<std::string> pieces_;
  masque::tok::TokenMap ids_;
  std::size_t text_bytes_ = 0;
};

}  // namespace masque::hfjson
