// Decoders of tokenizer.json ("decoder"): ByteLevel, Metaspace, ByteFallback, Fuse, Strip,
// Replace, WordPiece and Sequence, as Hugging Face tokenizers' decoders/*.rs: each rewrites the
// list of token strings, and decode() joins the result.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "json_node.hpp"

namespace masque::hfjson {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// nullptr for a JSON null (then tokens are joined with spaces, as Hugging Face does).
std::unique_ptr<Decoder> make_decoder(const Node& node);

// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);

}  // namespace masque::hfjson
