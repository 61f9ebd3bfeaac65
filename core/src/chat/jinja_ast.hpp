// The parsed form of a template: expressions and statements, each with its source line.
// Built once by the parser, read-only afterwards (renders on several threads share it).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.hpp"

namespace masque::chat::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<const Expr>;
using StmtPtr = std::unique_ptr<Stmt>;  // not const: the scope pass fills in the *_locals
using Body = std::vector<StmtPtr>;

struct Expr {
  enum class Kind {
    literal,      // value
    name,         // name
    list,         // items (tuple: a tuple literal)
    dict,         // pairs
    attribute,    // object.name
    item,         // object[index]
    slice,        // object[start:stop:step], each optional
    call,         // object(args, kwargs)
    filter,       // object | name(args, kwargs); object is null in a filter block
    test,         // object is name(args, kwargs)
    unary,        // op object: "not", "-", "+"
    binary,       // lhs op rhs: + - * / // % ** and or
    compare,      // object (op operand)...: == != < <= > >= in notin
    concat,       // items joined by ~
    conditional,  // then if test else otherwise (otherwise may be null)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // name, attribute, filter, test; the operator of unary and binary
  bool tuple = false;
  ExprPtr object, index, start, stop, step, lhs, rhs, test, then, otherwise;
  std::vector<ExprPtr> items;                             // list, concat, call/filter/test args
  std::vector<std::pair<std::string, ExprPtr>> kwargs;    // call, filter and test keywords
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;         // dict
  std::vector<std::pair<std::string, ExprPtr>> operands;  // compare: (op, operand)
};

// Where a `set` or `for` stores: names (several unpack a sequence) or `ns.attribute`.
struct Target {
  std::vector<std::string> names;
  bool unpack = false;    // `a, b` rather than `a`
  std::string attribute;  // set: names[0].attribute when not empty
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required (undefined when not passed, as in jinja2)
};

struct Stmt {
  enum class Kind {
    text,       // text
    output,     // {{ expr }}
    if_,        // branches (test, body)..., otherwise
    for_,       // for target in expr [if test] body [else otherwise]
    set,        // set target = expr
    set_block,  // set target [| filters] body endset; expr is the filter chain over null
    macro,      // name(params) body
    break_,
    continue_,
    with,    // with assignments body
    filter,  // filter block: expr (over null) applied to the rendered body
  };
  Kind kind;
  int line = 0;
  std::string text;  // text; macro name
  ExprPtr expr, test;
  Target target;
  Body body, otherwise;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<MacroParam> params;
  std::vector<std::pair<Target, ExprPtr>> assignments;  // with
  // The names the scope of body / otherwise starts with undefined (jinja_scopes.hpp).
  std::vector<std::string> body_locals, otherwise_locals;
};

}  // namespace masque::chat::jinja
