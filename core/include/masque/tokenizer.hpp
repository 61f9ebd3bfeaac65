// Plugin kind `tokenizer`: text <-> token ids.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "masque/plugin.hpp"

namespace masque {

using TokenId = std::int32_t;

// One token's byte span [begin, end) in the input text. Special tokens that the tokenizer
// added (and that have no text) get an empty span at the position where they were inserted.
struct ByteSpan {
  std::uint32_t begin = 0;
  std::uint32_t end = 0;
  bool operator==(const ByteSpan&) const = default;
};

struct Encoding {
  std::vector<TokenId> ids;
  std::vector<std::string> pieces;     // the vocabulary entry of each id
  std::vector<ByteSpan> offsets;       // into the text given to encode()
  std::vector<std::int32_t> type_ids;  // segment of each token (0, or 1 for a pair's second)
};

// Ids of the special tokens a tokenizer knows; -1 when it has none of that kind.
struct SpecialTokens {
  TokenId bos = -1, eos = -1, pad = -1, unk = -1, mask = -1, cls = -1, sep = -1;
};

// Contract:
// - `text` is valid UTF-8: the host checks (or repairs) records before calling encode().
//   A tokenizer must still never crash on invalid bytes; it throws RecordError instead.
// - `add_special` adds what the model expects around one text: [CLS] .. [SEP] for BERT, BOS
//   (and EOS if configured) for SentencePiece models, nothing for GPT-2 BPE or `vocab`.
// - All methods are const and may be called concurrently from several threads.
class BOOST_SYMBOL_VISIBLE Tokenizer : public Plugin {
 public:
  virtual Encoding encode(std::string_view text, bool add_special) const = 0;
  // A sentence pair (`[CLS] a [SEP] b [SEP]` with type ids 0/1 for BERT). The default throws
  // ConfigError: the tokenizer does not support pairs.
  virtual Encoding encode_pair(std::string_view first, std::string_view second,
                               bool add_special) const;
  // Text of `ids`; special tokens are left out when `skip_special`.
  virtual std::string decode(std::span<const TokenId> ids, bool skip_special) const = 0;

  virtual std::int32_t vocab_size() const = 0;
  virtual std::string id_to_piece(TokenId id) const = 0;  // "" when out of range
  virtual std::optional<TokenId> piece_to_id(std::string_view piece) const = 0;
  virtual const SpecialTokens& special_tokens() const = 0;
  // True for ids that are special (control) tokens.
  virtual bool is_special(TokenId id) const;
};

}  // namespace masque
