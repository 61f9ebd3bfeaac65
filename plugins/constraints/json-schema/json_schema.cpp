// Constraint `json-schema`: every output is a compact JSON document valid under a schema (the
// subset docs/instruct.md lists), compiled to a GBNF grammar once.
#include "masque/constraint.hpp"
#include "masque/params.hpp"

namespace {

masque::Plugin* create(const masque::Params& params) {
  const masque::ConstraintText schema = masque::constraint_text(params, "schema", "schema");
  return masque::grammar_constraint_plugin(masque::json_schema_grammar(schema.text, schema.source),
                                           schema.source + " (as GBNF)",
                                           static_cast<std::size_t>(params.get_int("cache_mib")));
}

const masque::ParamSpec kParams[] = {
    {.name = "schema",
     .type = masque::ParamType::string,
     .default_value = "",
     .help = "the JSON schema, inline (e.g. '{\"type\":\"object\",...}'); or use file"},
    {.name = "file",
     .type = masque::ParamType::path,
     .default_value = "",
     .help = "a file holding the JSON schema"},
    masque::kConstraintCacheParam,
};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::constraint,
      .name = "json-schema",
      .version = "1.0.0",
      .license = "MIT",
      .description = "outputs are compact JSON valid under a JSON schema (compiled to GBNF)",
      .params = kParams,
      .num_params = static_cast<std::uint32_t>(std::size(kParams)),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)
