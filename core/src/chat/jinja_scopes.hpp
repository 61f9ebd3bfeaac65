// jinja2's compile-time scoping, which a template can observe. jinja2 decides per scope (the
// template, a loop body, a macro, ...) where each name it assigns starts: with the value of
// the enclosing scope or the context when the scope (or one around it) refers to the name
// before, else undefined. So in
//   {% for m in messages %}{{ x }}{% endfor %}{% set x = 1 %}
// the loop prints nothing even when the context has an x: the template's own x shadows it
// from the start. This pass works that out once per template, following idtracking.py's
// Symbols, and records in each statement the names its body starts undefined; the evaluator
// binds them when it enters the scope.
#pragma once

#include <string>
#include <vector>

#include "chat/jinja_ast.hpp"

namespace masque::chat::jinja {

// Fills in body_locals / otherwise_locals of every statement; returns the template's own.
std::vector<std::string> resolve_scopes(Body& root);

}  // namespace masque::chat::jinja
