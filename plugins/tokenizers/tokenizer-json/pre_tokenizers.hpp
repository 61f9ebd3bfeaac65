// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): ByteLevel (with and without its regex),
// Split (string or regex, five behaviours, invert), Metaspace (prepend schemes always / first /
// never, split), Whitespace, WhitespaceSplit, Digits, Punctuation, BertPreTokenizer and
// Sequence, as Hugging Face tokenizers (pre_tokenizers/*.rs) applies them.
//
// ByteLevel does not rewrite the text into GPT-2's byte alphabet here: the pieces stay raw bytes
// and the model reads its vocabulary in raw bytes instead (byte_level() tells it so), which gives
// the same tokens without a per-byte rewrite.
#pragma once

#include <memory>
#include <vector>

#include "json_node.hpp"
#include "normalized.hpp"

namespace masque::hfjson {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their pieces; empty pieces are dropped.
  virtual void split(std::vector<Normalized>& pieces) const = 0;
  // True when the pieces end up in GPT-2's byte alphabet (a ByteLevel pre-tokenizer).
  virtual bool byte_level() const { return false; }
};

// nullptr for a JSON null.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Node& node);

}  // namespace masque::hfjson
