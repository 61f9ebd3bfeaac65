#include "masque/tokenizer.hpp"

#include "masque/error.hpp"

namespace masque {

Encoding Tokenizer::encode_pair(std::string_view, std::string_view, bool) const {
  throw ConfigError("this tokenizer does not encode sentence pairs");
}

bool Tokenizer::is_special(TokenId id) const {
  const SpecialTokens& s = special_tokens();
  return id >= 0 && (id == s.bos || id == s.eos || id == s.pad || id == s.unk || id == s.mask ||
                     id == s.cls || id == s.sep);
}

}  // namespace masque
