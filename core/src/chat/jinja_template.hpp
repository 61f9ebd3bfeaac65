// A Jinja template parsed once and rendered many times: masque's interpreter of the subset
// of Jinja that chat templates use, rendering as transformers' sandboxed jinja2 environment
// does (trim_blocks, lstrip_blocks, loop controls, its tojson). render() is const and safe
// to call from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_ast.hpp"
#include "chat/jinja_error.hpp"
#include "chat/jinja_lexer.hpp"
#include "chat/jinja_value.hpp"

namespace masque::chat::jinja {

class Template {
 public:
  // `source_name` names the template in errors (a file, "tokenizer_config.json
  // chat_template"). Throws TemplateError (syntax or unsupported) with the line.
  static Template parse(std::string_view source, std::string source_name,
                        const LexerOptions& options = {});

  // The text for `variables` (global functions such as range and namespace are there
  // already; a variable of the same name shadows them). Throws TemplateError.
  std::string render(const Dict& variables) const;

  const std::string& source_name() const { return *name_; }

 private:
  std::shared_ptr<const std::string> name_;
  std::shared_ptr<const Body> body_;
  std::vector<std::string> locals_;  // the names the template's scope starts undefined
};

}  // namespace masque::chat::jinja
