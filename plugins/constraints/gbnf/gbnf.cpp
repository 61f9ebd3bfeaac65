// Constraint `gbnf`: every output matches a grammar in GBNF, llama.cpp's grammar format
// (docs/instruct.md), given inline or as a file.
#include <fstream>
#include <sstream>

#include "masque/constraint.hpp"
#include "masque/error.hpp"
#include "masque/params.hpp"

namespace {

// The grammar's text and the name its errors give: the file, or the parameter.
std::pair<std::string, std::string> grammar_text(const masque::Params& params) {
  const std::string& inline_text = params.get_string("grammar");
  const std::string& file = params.get_string("file");
  if (inline_text.empty() == file.empty())
    throw masque::ConfigError(
        "constraint gbnf: give the grammar either inline (grammar) or as a file (file)");
  if (!inline_text.empty()) return {inline_text, "constraint.grammar"};
  std::ifstream in(file, std::ios::binary);
  if (!in) throw masque::ConfigError(file + ": cannot read the grammar file");
  std::ostringstream text;
  text << in.rdbuf();
  return {text.str(), file};
}

class GbnfConstraint final : public masque::Constraint {
 public:
  explicit GbnfConstraint(const masque::Params& params)
      : cache_mib_(static_cast<std::size_t>(params.get_int("cache_mib"))) {
    std::tie(grammar_, source_) = grammar_text(params);
    masque::check_grammar(grammar_, source_);
  }

  std::shared_ptr<const masque::TokenConstraint> bind(
      const masque::Tokenizer& tokenizer,
      std::span<const masque::TokenId> end_tokens) const override {
    return masque::grammar_constraint(grammar_, source_, tokenizer, end_tokens, cache_mib_);
  }

 private:
  std::string grammar_, source_;
  std::size_t cache_mib_;
};

masque::Plugin* create(const masque::Params& params) {
  return new GbnfConstraint(params);
}

const masque::ParamSpec kParams[] = {
    {.name = "grammar",
     .type = masque::ParamType::string,
     .default_value = "",
     .help = "the grammar in GBNF (rules `name ::= ...`, start rule `root`); or use file"},
    {.name = "file",
     .type = masque::ParamType::path,
     .default_value = "",
     .help = "a file holding the grammar in GBNF (e.g. llama.cpp's grammars/*.gbnf)"},
    {.name = "cache_mib",
     .type = masque::ParamType::integer,
     .default_value = "256",
     .help = "MiB of token masks kept (one per grammar state met); past it they are recomputed",
     .min = 1,
     .max = 65536},
};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::constraint,
      .name = "gbnf",
      .version = "1.0.0",
      .license = "MIT",
      .description = "outputs match a GBNF grammar (llama.cpp's format); tokens masked per step",
      .params = kParams,
      .num_params = static_cast<std::uint32_t>(std::size(kParams)),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)
