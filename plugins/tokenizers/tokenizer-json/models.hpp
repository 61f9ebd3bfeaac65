// Models of tokenizer.json ("model"): BPE (merges as "a b" strings or [a, b] pairs,
// ignore_merges, byte_fallback, fuse_unk, continuing_subword_prefix, end_of_word_suffix;
// dropout is ignored: it only applies when training), Unigram (Viterbi over scored pieces, unknown
// runs fused, byte_fallback), WordPiece and WordLevel, as Hugging Face tokenizers (models/*)
// computes them. A model without "type" (older files) is recognised by its fields.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "json_node.hpp"
#include "masque/tokenizer.hpp"

namespace masque::hfjson {

// A token of one piece: its id and its byte range in the piece.
struct PieceToken {
  TokenId id;
  std::uint32_t begin, end;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the tokens of `piece` (not empty). With `byte_level`, the piece holds raw bytes and
  // the vocabulary is read in GPT-2's byte alphabet.
  virtual void tokenize(std::string_view piece, std::vector<PieceToken>& out) const = 0;
  // One past the largest id.
  virtual std::int32_t size() const = 0;
  // The vocabulary entry of `id` ("" for a gap), and the id of an entry.
  virtual const std::string& piece(TokenId id) const = 0;
  virtual TokenId find(std::string_view piece) const = 0;
  virtual TokenId unk() const = 0;
  // Bytes the model keeps (tables, strings), for `memory_bytes` reports.
  virtual std::size_t memory_bytes() const = 0;
  // True when tokenize() reads raw bytes under a ByteLevel pre-tokenizer (BPE); other models
  // get the piece spelled in the byte alphabet.
  virtual bool reads_raw_bytes() const { return false; }
};

// `tables` holds the vocabulary and merges read with the file (json_node.hpp).
std::unique_ptr<Model> make_model(const Node& node, const ModelTables& tables, bool byte_level);

}  // namespace masque::hfjson
