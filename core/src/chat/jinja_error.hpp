// The errors of masque's Jinja interpreter. Each names the template (its file or a label) and
// the line of the construct, as jinja2's TemplateSyntaxError does, so a message points into
// the tokenizer_config.json's template.
#pragma once

#include <stdexcept>
#include <string>

namespace masque::chat::jinja {

class TemplateError : public std::runtime_error {
 public:
  enum class Kind {
    syntax,       // the template is not valid Jinja: jinja2 rejects it as well
    unsupported,  // valid Jinja that masque's subset does not implement
    render,       // rendering failed for this input: raise_exception, undefined, type errors
  };

  TemplateError(Kind kind, std::string message, std::string source, int line)
      : std::runtime_error(compose(kind, message, source, line)),
        kind_(kind),
        message_(std::move(message)),
        source_(std::move(source)),
        line_(line) {}

  Kind kind() const { return kind_; }
  const std::string& message() const { return message_; }  // without the place
  const std::string& source() const { return source_; }
  int line() const { return line_; }  // 1-based; 0 when unknown

 private:
  static std::string compose(Kind kind, const std::string& message, const std::string& source,
                             int line) {
    std::string where = source.empty() ? "template" : source;
    if (line > 0) where += " line " + std::to_string(line);
    const char* what = kind == Kind::syntax        ? "syntax error"
                       : kind == Kind::unsupported ? "unsupported"
                                                   : "error";
    return where + ": " + what + ": " + message;
  }

  Kind kind_;
  std::string message_;
  std::string source_;
  int line_;
};

// Thrown without a place by the value and builtin layers; the evaluator adds the template and
// the line of the expression it was evaluating.
class ValueError : public std::runtime_error {
 public:
  ValueError(TemplateError::Kind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  TemplateError::Kind kind() const { return kind_; }

 private:
  TemplateError::Kind kind_;
};

[[noreturn]] inline void fail(const std::string& message) {
  throw ValueError(TemplateError::Kind::render, message);
}
[[noreturn]] inline void unsupported(const std::string& message) {
  throw ValueError(TemplateError::Kind::unsupported, message);
}

}  // namespace masque::chat::jinja
