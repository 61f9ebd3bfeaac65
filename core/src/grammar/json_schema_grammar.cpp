// masque::json_schema_grammar: a schema's text to GBNF (grammar/schema_grammar.hpp does the work).
#include <nlohmann/json.hpp>

#include "grammar/schema_grammar.hpp"
#include "masque/constraint.hpp"
#include "masque/error.hpp"

namespace masque {

std::string json_schema_grammar(std::string_view schema_json, const std::string& source) {
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(schema_json);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or a number out of range
    throw ConfigError(source + ": not JSON: " + e.what());
  }
  try {
    return grammar::schema_to_gbnf(schema, source);
  } catch (const nlohmann::json::exception& e) {  // a value of a type the compiler did not check
    throw ConfigError(source + ": " + e.what());
  }
}

}  // namespace masque
