// Normalizers of tokenizer.json ("normalizer"): NFC, NFD, NFKC, NFKD, Lowercase, Strip,
// StripAccents, Replace, Prepend, Precompiled (SentencePiece's charsmap) and Sequence, as
// Hugging Face tokenizers (normalizers/*.rs) applies them, alignment kept.
#pragma once

#include <memory>

#include "json_node.hpp"
#include "normalized.hpp"

namespace masque::hfjson {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(Normalized& n) const = 0;
};

// nullptr for a JSON null.
std::unique_ptr<Normalizer> make_normalizer(const Node& node);

}  // namespace masque::hfjson
