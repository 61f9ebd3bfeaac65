// What a template can name without defining it: jinja2's filters and tests (the subset chat
// templates use), attribute and item lookup as jinja2's sandbox does it (a dict key, or a
// Python method of str, dict and list), those methods, and the global functions of
// transformers' environment: range, dict, namespace, raise_exception, strftime_now.
// Errors are ValueErrors; the evaluator adds the template's line.
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja_value.hpp"

namespace masque::chat::jinja {

bool is_filter(std::string_view name);        // implemented here
bool is_jinja_filter(std::string_view name);  // a jinja2 builtin filter, implemented or not
bool is_test(std::string_view name);
bool is_jinja_test(std::string_view name);

Value apply_filter(const std::string& name, const Value& input, const Arguments& args);
bool apply_test(const std::string& name, const Value& input, const Arguments& args);

// `object.name`: a Python attribute (a method) first, then a dict key; undefined when neither.
Value get_attribute(const Value& object, const std::string& name);
// `object[index]`: an item first, then (for a string index) an attribute; undefined when
// neither. Indexing an undefined value is an error, as in jinja2.
Value get_item(const Value& object, const Value& index);
// `object[start:stop:step]` on a list, tuple or string (null bounds are omitted ones).
Value get_slice(const Value& object, const Value* start, const Value* stop, const Value* step);

// `item in container` (the `in` operator and test).
bool contains(const Value& container, const Value& item);

// The global names of the environment, before the render's context.
Dict global_functions();

// Python arithmetic (+ - * / // % **) and unary minus / plus on Values.
Value arithmetic(const std::string& op, const Value& a, const Value& b);
Value negate(const Value& a, bool minus);

// The items a `for` loop visits: a list's items, a dict's keys, a string's characters;
// nothing for undefined. A render error for anything else.
List iterate(const Value& value);

}  // namespace masque::chat::jinja
