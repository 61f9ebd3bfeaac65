// Fuzz target: every tokenizer's encode (and decode) on arbitrary bytes, with the real
// vocabularies: wordpiece (bert-base-uncased, bert-base-chinese), bpe (gpt2), sentencepiece
// (stories260k) and vocab (the aren-transliteration source vocabulary), loaded once.
//
// Invalid UTF-8 must be a RecordError; valid text must encode into four vectors of one length,
// ids inside the vocabulary, pieces that are those ids' pieces and spans inside the text; the
// ids must decode. BPE must give the input back byte for byte. Arbitrary ids (the input read as
// 16-bit numbers) decode or fail as a RecordError.
#include <memory>
#include <vector>

#include "fuzz_support.hpp"
#include "io/records.hpp"
#include "masque/error.hpp"
#include "masque/tokenizer.hpp"
#include "pipeline.hpp"

namespace {

namespace fs = std::filesystem;

struct Loaded {
  std::string name;
  std::unique_ptr<masque::Tokenizer> tokenizer;
};

std::unique_ptr<masque::Tokenizer> load(const char* plugin, const char* key,
                                        const fs::path& value) {
  masque::Registry& registry = masque::fuzz::registry();
  const masque::PluginEntry& entry = registry.find(masque::PluginKind::tokenizer, plugin);
  masque::Params params = masque::default_params(*entry.descriptor);
  params.set(key, value.string());
  std::unique_ptr<masque::Plugin> p = registry.create(entry, params);
  return std::unique_ptr<masque::Tokenizer>(static_cast<masque::Tokenizer*>(p.release()));
}

std::vector<Loaded>& tokenizers() {
  static std::vector<Loaded> all = [] {
    const fs::path shared = masque::fuzz::shared_dir();
    std::vector<Loaded> v;
    v.push_back({"wordpiece", load("wordpiece", "path", shared / "tokenizers/bert-base-uncased")});
    v.push_back(
        {"wordpiece-zh", load("wordpiece", "path", shared / "tokenizers/bert-base-chinese")});
    v.push_back({"bpe", load("bpe", "path", shared / "tokenizers/gpt2")});
    v.push_back({"sentencepiece", load("sentencepiece", "path", shared / "models/stories260k")});
    v.push_back(
        {"vocab", load("vocab", "vocab", shared / "models/aren-transliteration/source_vocab.txt")});
    return v;
  }();
  return all;
}

void check_encoding(const masque::Tokenizer& tok, const masque::Encoding& e,
                    std::size_t text_size) {
  const std::size_t n = e.ids.size();
  MASQUE_FUZZ_CHECK(e.pieces.size() == n && e.offsets.size() == n && e.type_ids.size() == n);
  for (std::size_t k = 0; k < n; ++k) {
    MASQUE_FUZZ_CHECK(e.ids[k] >= 0 && e.ids[k] < tok.vocab_size());
    MASQUE_FUZZ_CHECK(e.pieces[k] == tok.id_to_piece(e.ids[k]));
    MASQUE_FUZZ_CHECK(e.offsets[k].begin <= e.offsets[k].end && e.offsets[k].end <= text_size);
  }
  (void)tok.decode(e.ids, false);
  (void)tok.decode(e.ids, true);
}

void encode_text(const Loaded& t, std::string_view text, bool valid) {
  for (bool add_special : {false, true}) {
    try {
      masque::Encoding e = t.tokenizer->encode(text, add_special);
      MASQUE_FUZZ_CHECK(valid);
      check_encoding(*t.tokenizer, e, text.size());
      if (t.name == "bpe" && !add_special)
        MASQUE_FUZZ_CHECK(t.tokenizer->decode(e.ids, false) == text);
    } catch (const masque::RecordError&) {
      MASQUE_FUZZ_CHECK(!valid);
    }
  }
}

void decode_ids(const masque::Tokenizer& tok, std::string_view bytes) {
  std::vector<masque::TokenId> ids;
  for (std::size_t i = 0; i + 1 < bytes.size(); i += 2)
    ids.push_back(static_cast<masque::TokenId>(static_cast<unsigned char>(bytes[i]) |
                                               static_cast<unsigned char>(bytes[i + 1]) << 8) -
                  16);  // a few negative ids too
  try {
    (void)tok.decode(ids, false);
    (void)tok.decode(ids, true);
  } catch (const masque::RecordError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = masque::fuzz::as_text(data, size);
  const bool valid = masque::is_valid_utf8(text);
  for (const Loaded& t : tokenizers()) {
    encode_text(t, text, valid);
    decode_ids(*t.tokenizer, text);
  }
  // Sentence pairs (wordpiece), split in the middle of the input.
  const std::string_view first = text.substr(0, size / 2), second = text.substr(size / 2);
  try {
    masque::Encoding e = tokenizers()[0].tokenizer->encode_pair(first, second, true);
    MASQUE_FUZZ_CHECK(masque::is_valid_utf8(first) && masque::is_valid_utf8(second));
    check_encoding(*tokenizers()[0].tokenizer, e, std::max(first.size(), second.size()));
  } catch (const masque::RecordError&) {
    MASQUE_FUZZ_CHECK(!masque::is_valid_utf8(first) || !masque::is_valid_utf8(second));
  }
  return 0;
}
