// Plugin kind `constraint`: what a generated output must match (a grammar, a JSON schema). A
// generating task binds it to its tokenizer once; the task's stepper then masks each row's
// logits to the tokens the constraint allows there, so every decoder (greedy, sampling, beam,
// with any batching) only ever chooses tokens that keep the output completable, and the task
// checks each finished output's text against it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "masque/params.hpp"
#include "masque/plugin.hpp"
#include "masque/tokenizer.hpp"

namespace masque {

// A constraint over one vocabulary. States are small values a stepper keeps per row (copied
// when rows are replicated). Contract: every method is const and may run concurrently.
class BOOST_SYMBOL_VISIBLE TokenConstraint {
 public:
  using State = std::uint32_t;
  virtual ~TokenConstraint();
  virtual State start() const = 0;
  // Sets the logits of the tokens `state` does not allow to the lowest float. End tokens are
  // allowed where the output may end; where nothing can continue, only end tokens.
  virtual void mask(State state, std::span<float> logits) const = 0;
  // The state after `token` (a token mask() did not allow leads to a state that allows only
  // end tokens, and whose output check() rejects).
  virtual State advance(State state, TokenId token) const = 0;
  // "" when `text`, a whole output as the task writes it, satisfies the constraint; else why
  // not, for the record's error.
  virtual std::string check(std::string_view text) const = 0;
};

class BOOST_SYMBOL_VISIBLE Constraint : public Plugin {
 public:
  // Binds the constraint to `tokenizer`'s vocabulary, whose `end_tokens` end an output. Called
  // once per task; ConfigError when it cannot (e.g. no token can start the output).
  virtual std::shared_ptr<const TokenConstraint> bind(
      const Tokenizer& tokenizer, std::span<const TokenId> end_tokens) const = 0;
};

// libmasque's grammar constraint, which the `gbnf` and `json-schema` plugins bind to: a GBNF
// grammar (llama.cpp's format; docs/instruct.md) over the text the tokenizer decodes, with token
// masks computed per grammar state from a byte trie of the vocabulary and cached (up to
// `cache_mib` MiB of masks, then recomputed). ConfigError "source:line:column: ..." for a
// malformed grammar.
BOOST_SYMBOL_VISIBLE std::shared_ptr<const TokenConstraint> grammar_constraint(
    std::string_view gbnf, const std::string& source, const Tokenizer& tokenizer,
    std::span<const TokenId> end_tokens, std::size_t cache_mib = 256);
// Parses and checks a GBNF grammar without binding it (a plugin validates its parameters).
BOOST_SYMBOL_VISIBLE void check_grammar(std::string_view gbnf, const std::string& source);

// A Constraint whose bind() is grammar_constraint(gbnf, source, ...): what a grammar plugin
// returns from its factory, once it has its GBNF (checked here: ConfigError when it is bad).
BOOST_SYMBOL_VISIBLE Constraint* grammar_constraint_plugin(std::string gbnf, std::string source,
                                                           std::size_t cache_mib);

// The grammar plugins' `cache_mib` parameter.
inline constexpr ParamSpec kConstraintCacheParam{
    .name = "cache_mib",
    .type = ParamType::integer,
    .default_value = "256",
    .help = "MiB of token masks kept (one per grammar state met); past it they are recomputed",
    .min = 1,
    .max = 65536};

// A constraint plugin's text, given inline in parameter `inline_key` or as the file of the
// parameter `file`, and the name its errors give (the file, or "constraint.KEY"). ConfigError
// naming `what` when both or neither are given, or the file cannot be read.
struct ConstraintText {
  std::string text, source;
};
BOOST_SYMBOL_VISIBLE ConstraintText constraint_text(const Params& params,
                                                    const std::string& inline_key,
                                                    const std::string& what);
// GBNF for the compact JSON documents a schema (the subset of docs/instruct.md) allows;
// ConfigError naming `source` and the keyword's JSON pointer for what the subset lacks.
BOOST_SYMBOL_VISIBLE std::string json_schema_grammar(std::string_view schema_json,
                                                     const std::string& source);

}  // namespace masque
