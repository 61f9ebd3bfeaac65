// Fuzz target: grammars. The input is a GBNF grammar, or (first byte odd) a JSON schema compiled
// to one, then a text after a NUL byte: the grammar is parsed, and the text run through its
// matcher byte by byte. Anything but a ConfigError is a finding; so is a matcher whose answer
// for the whole text differs from its answer byte by byte.
#include "fuzz_support.hpp"
#include "grammar/gbnf.hpp"
#include "grammar/grammar_matcher.hpp"
#include "masque/constraint.hpp"
#include "masque/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input = masque::fuzz::as_text(data + 1, size - 1);
  const std::size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  try {
    const std::string gbnf =
        data[0] % 2 ? masque::json_schema_grammar(source, "schema.json") : std::string(source);
    masque::grammar::GrammarMatcher m(masque::grammar::parse_gbnf(gbnf, "fuzz.gbnf"));
    auto whole = m.step(m.start(), text);
    auto state = m.start();
    for (char c : text) state = m.step(state, static_cast<std::uint8_t>(c));
    MASQUE_FUZZ_CHECK(state == whole);
    MASQUE_FUZZ_CHECK(!m.complete(state) || m.accepts(state));
  } catch (const masque::ConfigError&) {
  }
  return 0;
}
