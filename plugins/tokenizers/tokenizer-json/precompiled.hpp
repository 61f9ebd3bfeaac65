// SentencePiece's precompiled character map (the "precompiled_charsmap" of a Precompiled
// normalizer, base64 in tokenizer.json): a little-endian u32 with the size in bytes of a
// darts-clone double-array trie, the trie's 32-bit units, then a pool of NUL-terminated
// replacement strings. A trie value is an offset into the pool.
//
// libsentencepiece's own normalizer (which reads the same blob) is not part of its installed API,
// so the lookup is done here; every read is bounds-checked, so a corrupt blob cannot crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace masque::hfjson {

class Precompiled {
 public:
  // Throws std::invalid_argument for bad base64 or a blob whose parts do not fit.
  static Precompiled from_base64(std::string_view text);
  static Precompiled from_blob(std::string_view blob);

  // The replacement of the shortest prefix of `chunk` the trie knows (Hugging Face uses the
  // first common-prefix result), or false.
  bool transform(std::string_view chunk, std::string_view& replacement) const;

 private:
  std::vector<std::uint32_t> units_;
  std::string pool_;
};

}  // namespace masque::hfjson
