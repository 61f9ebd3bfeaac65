#include "chat/jinja_template.hpp"

#include "chat/jinja_builtins.hpp"
#include "chat/jinja_eval.hpp"
#include "chat/jinja_parser.hpp"
#include "chat/jinja_scopes.hpp"

namespace masque::chat::jinja {

Template Template::parse(std::string_view source, std::string source_name,
                         const LexerOptions& options) {
  Template t;
  t.name_ = std::make_shared<const std::string>(std::move(source_name));
  Body body = jinja::parse(tokenize(source, *t.name_, options), *t.name_);
  t.locals_ = resolve_scopes(body);
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

std::string Template::render(const Dict& variables) const {
  Dict globals = global_functions();
  for (const auto& [name, value] : variables.entries()) globals.set(name, value);
  Evaluator evaluator(*name_, globals);
  try {
    return evaluator.render(*body_, locals_);
  } catch (const ValueError& e) {  // raised outside any statement (cannot happen; kept safe)
    throw TemplateError(e.kind(), e.what(), *name_, 0);
  }
}

}  // namespace masque::chat::jinja
