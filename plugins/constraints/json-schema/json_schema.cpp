// Constraint `json-schema`: every output is a compact JSON document valid under a schema (the
// subset docs/instruct.md lists), compiled to a GBNF grammar once.
#include <fstream>
#include <sstream>

#include "masque/constraint.hpp"
#include "masque/error.hpp"
#include "masque/params.hpp"

namespace {

// The schema's text and the name its errors give: the file, or the parameter.
std::pair<std::string, std::string> schema_text(const masque::Params& params) {
  const std::string& inline_text = params.get_string("schema");
  const std::string& file = params.get_string("file");
  if (inline_text.empty() == file.empty())
    throw masque::ConfigError(
        "constraint json-schema: give the schema either inline (schema) or as a file (file)");
  if (!inline_text.empty()) return {inline_text, "constraint.schema"};
  std::ifstream in(file, std::ios::binary);
  if (!in) throw masque::ConfigError(file + ": cannot read the schema file");
  std::ostringstream text;
  text << in.rdbuf();
  return {text.str(), file};
}

class JsonSchemaConstraint final : public masque::Constraint {
 public:
  explicit JsonSchemaConstraint(const masque::Params& params)
      : cache_mib_(static_cast<std::size_t>(params.get_int("cache_mib"))) {
    auto [schema, source] = schema_text(params);
    source_ = source;
    grammar_ = masque::json_schema_grammar(schema, source_);
    masque::check_grammar(grammar_, source_ + " (as GBNF)");
  }

  std::shared_ptr<const masque::TokenConstraint> bind(
      const masque::Tokenizer& tokenizer,
      std::span<const masque::TokenId> end_tokens) const override {
    return masque::grammar_constraint(grammar_, source_ + " (as GBNF)", tokenizer, end_tokens,
                                      cache_mib_);
  }

 private:
  std::string grammar_, source_;
  std::size_t cache_mib_;
};

masque::Plugin* create(const masque::Params& params) {
  return new JsonSchemaConstraint(params);
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
