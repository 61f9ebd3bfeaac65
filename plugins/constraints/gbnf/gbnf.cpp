// Constraint `gbnf`: every output matches a grammar in GBNF, llama.cpp's grammar format
// (docs/instruct.md), given inline or as a file.
#include "masque/constraint.hpp"
#include "masque/params.hpp"

namespace {

masque::Plugin* create(const masque::Params& params) {
  masque::ConstraintText grammar = masque::constraint_text(params, "grammar", "grammar");
  return masque::grammar_constraint_plugin(std::move(grammar.text), std::move(grammar.source),
                                           static_cast<std::size_t>(params.get_int("cache_mib")));
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
    masque::kConstraintCacheParam,
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
