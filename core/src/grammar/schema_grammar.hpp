// A JSON schema (the subset docs/instruct.md lists) as a GBNF grammar of the compact JSON
// documents it allows: no whitespace between tokens, properties in the order the schema lists
// them, no properties beyond them.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace masque::grammar {

// GBNF with the start rule `root`. ConfigError "source: /json/pointer: what" for a keyword
// outside the subset (never ignored: an output would not be checked against it).
std::string schema_to_gbnf(const nlohmann::ordered_json& schema, const std::string& source);

}  // namespace masque::grammar
