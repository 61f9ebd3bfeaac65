// The added tokens of tokenizer.json ("added_tokens"): tokens found in the text before the model
// runs, as Hugging Face's AddedVocabulary does. Tokens with normalized: false are found in the
// raw text first; the rest of the text is normalized, then tokens with normalized: true
// (their content normalized the same way) are found in it. Matching is leftmost-longest;
// single_word requires no word character on either side, lstrip / rstrip take the whitespace
// before / after the token with it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "json_node.hpp"
#include "literal_matcher.hpp"
#include "masque/tokenizer.hpp"
#include "normalized.hpp"

namespace masque::hfjson {

class Normalizer;

struct AddedToken {
  std::string content;
  TokenId id = -1;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};

// A stretch of the input after added-token extraction: an added token, or text for the
// pre-tokenizer and model (normalized).
struct Segment {
  Normalized text;
  TokenId added = -1;  // >= 0: this segment is that added token
};

class AddedVocabulary {
 public:
  AddedVocabulary(const Node& list, const Normalizer* normalizer);

  // Splits `text` (original bytes [base, base + size)) into segments.
  void extract(std::string_view text, std::vector<Segment>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* by_id(TokenId id) const;
  TokenId find(std::string_view content) const;
  bool is_special(TokenId id) const {
    const AddedToken* t = by_id(id);
    return t && t->special;
  }

 private:
  void split(const Normalized& n, const masque::tok::LiteralMatcher& matcher,
             std::vector<Segment>& out) const;
  const Normalizer* normalizer_;
  std::vector<AddedToken> tokens_;
  std::vector<std::int32_t> index_of_id_;  // id -> index in tokens_, or -1
  masque::tok::LiteralMatcher raw_, normalized_;
};

}  // namespace masque::hfjson
