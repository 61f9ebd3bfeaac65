// Tokens to statements, with jinja2's grammar and operator precedence (parser.py): `|`
// filters and `is` tests bind tighter than arithmetic, `not x is defined` is `not (x is
// defined)`, `a if c` without else is undefined when c is false. Filter and test names are
// checked here, as jinja2 checks them when it compiles; an unknown tag or a construct outside
// masque's subset (include, extends, block, call, recursive loops, ...) is a TemplateError
// naming it and its line.
#pragma once

#include <string>
#include <vector>

#include "chat/jinja_ast.hpp"
#include "chat/jinja_lexer.hpp"

namespace masque::chat::jinja {

Body parse(const std::vector<Token>& tokens, const std::string& source_name);

}  // namespace masque::chat::jinja
