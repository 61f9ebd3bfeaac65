// Fuzz target: tokenizer.json. The input is written as a tokenizer.json file and loaded by the
// `tokenizer-json` plugin: anything but a ConfigError (or a working tokenizer) is a finding.
// A tokenizer that loads must encode a few texts into consistent encodings (ids inside the
// vocabulary, spans inside the text), decode what it encoded, and turn ids outside its
// vocabulary into RecordErrors.
#include <memory>
#include <vector>

#include "fuzz_support.hpp"
#include "masque/error.hpp"
#include "masque/tokenizer.hpp"
#include "pipeline.hpp"

namespace {

namespace fs = std::filesystem;

std::unique_ptr<masque::Tokenizer> load(const fs::path& file) {
  masque::Registry& registry = masque::fuzz::registry();
  const masque::PluginEntry& entry = registry.find(masque::PluginKind::tokenizer, "tokenizer-json");
  masque::Params params = masque::default_params(*entry.descriptor);
  params.set("path", file.string());
  std::unique_ptr<masque::Plugin> p = registry.create(entry, params);
  return std::unique_ptr<masque::Tokenizer>(static_cast<masque::Tokenizer*>(p.release()));
}

void check(const masque::Tokenizer& tok, std::string_view text) {
  for (bool add_special : {false, true}) {
    masque::Encoding e;
    try {
      e = tok.encode(text, add_special);
    } catch (const masque::RecordError&) {
      continue;  // e.g. a WordLevel model without unk_token meeting an unknown word
    }
    const std::size_t n = e.ids.size();
    MASQUE_FUZZ_CHECK(e.pieces.size() == n && e.offsets.size() == n && e.type_ids.size() == n);
    for (std::size_t k = 0; k < n; ++k) {
      MASQUE_FUZZ_CHECK(e.ids[k] >= 0 && e.ids[k] < tok.vocab_size());
      MASQUE_FUZZ_CHECK(e.offsets[k].begin <= e.offsets[k].end && e.offsets[k].end <= text.size());
    }
    try {
      (void)tok.decode(e.ids, false);
      (void)tok.decode(e.ids, true);
    } catch (const masque::RecordError&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path file = masque::fuzz::scratch_dir() / "tokenizer.json";
  masque::fuzz::write_bytes(file, masque::fuzz::as_text(data, size));
  std::unique_ptr<masque::Tokenizer> tok;
  try {
    tok = load(file);
  } catch (const masque::ConfigError&) {
    return 0;
  }
  static const char* const kTexts[] = {"",
                                       "Hello world",
                                       "  spaces  and\ttabs\n",
                                       "ABC abc 123 4567",
                                       "Führer Café naïve",
                                       "北京欢迎你 日本語",
                                       "I 😁 llamas",
                                       "<s>[CLS]<|endoftext|></s>",
                                       "\xE2\x96\x81x \xE2\x96\x81"};
  for (const char* t : kTexts) check(*tok, t);
  const std::vector<masque::TokenId> outside = {-1, tok->vocab_size()};
  for (masque::TokenId id : outside) {
    try {
      (void)tok->decode(std::vector<masque::TokenId>{id}, false);
      MASQUE_FUZZ_CHECK(false);
    } catch (const masque::RecordError&) {
    }
  }
  return 0;
}
