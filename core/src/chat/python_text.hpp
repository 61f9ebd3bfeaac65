// How Python writes values as text, which is what a Jinja template prints: str() and repr()
// (what `{{ x }}` and `~` give), float.__repr__, and json.dumps (what transformers' `tojson`
// filter gives). Byte-identical output to python3-jinja2 depends on these details.
#pragma once

#include <optional>
#include <string>

#include "chat/jinja_value.hpp"

namespace masque::chat::jinja {

std::string python_str(const Value& value);         // str(x); undefined is ""
std::string python_repr(const Value& value);        // repr(x), as inside a printed list
std::string python_float(double value);             // float.__repr__: 1.0, 1e-05, 1e+16, inf
std::string python_quote(const std::string& text);  // repr(str): 'it' or "it's"

// json.dumps(x, ensure_ascii, indent, separators, sort_keys) with Python's defaults for the
// separators: ", " and ": " without an indent, "," and ": " with one.
struct JsonStyle {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // the text of one level; nullopt: all on one line
  std::optional<std::string> item_separator, key_separator;
  bool sort_keys = false;
};
std::string python_json(const Value& value, const JsonStyle& style);

}  // namespace masque::chat::jinja
