// Template text to tokens, as jinja2's lexer cuts it: data between tags, `{{ }}`, `{% %}`
// and `{# #}` with their whitespace control (`-` strips all whitespace on that side, `+`
// keeps it), trim_blocks (the newline after a block tag goes) and lstrip_blocks (spaces and
// tabs before a block tag on its own line go), raw blocks, and one trailing newline dropped
// (keep_trailing_newline is off). transformers renders chat templates with both trims on.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace masque::chat::jinja {

struct Token {
  enum class Type {
    data,            // text outside tags, whitespace control applied
    variable_begin,  // {{
    variable_end,    // }}
    block_begin,     // {%
    block_end,       // %}
    name,
    string,  // text is the decoded value
    integer,
    floating,
    op,  // text is the operator: + - * / // % ** ~ [ ] ( ) { } == != < <= > >= = . : | , ;
    eof,
  };
  Type type;
  std::string text;
  std::int64_t integer = 0;
  double floating = 0;
  int line = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws TemplateError (syntax) naming `source_name` and the line.
std::vector<Token> tokenize(std::string_view source, const std::string& source_name,
                            const LexerOptions& options = {});

}  // namespace masque::chat::jinja
