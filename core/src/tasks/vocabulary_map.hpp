// CTranslate2's vocabulary map (use_vmap): a text file restricting the output vocabulary to the
// target tokens that the source calls for. Each line is
//     <source n-gram> TAB <target token> <target token> ...
// with the n-gram's tokens separated by spaces; a line with an empty n-gram lists tokens that
// are always allowed. A record may produce: the always-allowed tokens, the special tokens of
// the target vocabulary and the model (start, end, pad, unk), its forced prefix, and the
// targets of every source n-gram found in the map. masque restricts per record (CTranslate2
// per batch, padded to a multiple of 8 or 16 ids), so a record's output does not depend on its
// batch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "masque/model.hpp"
#include "masque/tokenizer.hpp"

namespace masque {

class VocabularyMap {
 public:
  // ConfigError naming the file and line for an unreadable file, a line without a tab or a
  // target token the target tokenizer does not know.
  VocabularyMap(const std::filesystem::path& file, const Tokenizer& target, const ModelInfo& model);

  // allowed[id] != 0 for the ids the record may produce (size = the target vocabulary).
  std::vector<std::uint8_t> allowed(std::span<const std::string> source_pieces,
                                    std::span<const TokenId> prefix) const;

 private:
  std::int32_t vocab_size_;
  std::vector<TokenId> always_;
  std::unordered_map<std::string, std::vector<TokenId>> rules_;  // n-gram -> targets
  std::size_t longest_ = 0;                                      // tokens in the longest n-gram
};

}  // namespace masque
