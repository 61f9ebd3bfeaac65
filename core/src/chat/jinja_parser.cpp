#include "chat/jinja_parser.hpp"

#include <algorithm>
#include <initializer_list>

#include "chat/jinja_builtins.hpp"
#include "chat/jinja_error.hpp"

namespace masque::chat::jinja {

namespace {

constexpr int kMaxNesting = 200;  // expressions and blocks; deeper is refused, not a stack overflow

std::string describe(const Token& t) {
  switch (t.type) {
    case Token::Type::data:
      return "template data";
    case Token::Type::variable_begin:
      return "'{{'";
    case Token::Type::variable_end:
      return "'}}'";
    case Token::Type::block_begin:
      return "'{%'";
    case Token::Type::block_end:
      return "'%}'";
    case Token::Type::name:
      return "'" + t.text + "'";
    case Token::Type::string:
      return "a string";
    case Token::Type::integer:
    case Token::Type::floating:
      return "a number";
    case Token::Type::op:
      return "'" + t.text + "'";
    case Token::Type::eof:
      return "end of template";
  }
  return "a token";
}

std::unique_ptr<Expr> make(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name) : t_(tokens), name_(name) {}

  Body run() {
    Body body = subparse({});
    if (cur().type != Token::Type::eof) fail_here("unexpected " + describe(cur()));
    return body;
  }

 private:
  // --- the token stream ---
  const Token& cur() const { return t_[pos_]; }
  const Token& look() const { return t_[std::min(pos_ + 1, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[pos_];
    if (pos_ + 1 < t_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == Token::Type::op && cur().text == op; }
  bool is_name(const char* name) const {
    return cur().type == Token::Type::name && cur().text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail_at(const std::string& message, int line) const {
    throw TemplateError(TemplateError::Kind::syntax, message, name_, line);
  }
  [[noreturn]] void fail_here(const std::string& message) const { fail_at(message, cur().line); }
  [[noreturn]] void unsupported_at(const std::string& what, int line) const {
    throw TemplateError(TemplateError::Kind::unsupported, what, name_, line);
  }
  const Token& expect(Token::Type type, const char* what) {
    if (cur().type != type) fail_here(std::string("expected ") + what + ", got " + describe(cur()));
    return next();
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail_here(std::string("expected '") + op + "', got " + describe(cur()));
    next();
  }
  void expect_block_end() { expect(Token::Type::block_end, "'%}'"); }

  struct Depth {  // guards the recursion of one nested construct
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting)
        p_.unsupported_at("nesting deeper than " + std::to_string(kMaxNesting) + " levels",
                          p_.cur().line);
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  // --- statements ---
  // Parses until a block whose tag is one of `ends` (left as the current token) or the end.
  Body subparse(std::initializer_list<const char*> ends) {
    Depth depth(*this);
    Body body;
    while (cur().type != Token::Type::eof) {
      const Token& t = cur();
      if (t.type == Token::Type::data) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::text;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Token::Type::variable_begin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::output;
        s->line = t.line;
        s->expr = parse_tuple(true, {});
        expect(Token::Type::variable_end, "'}}'");
        body.push_back(std::move(s));
      } else if (t.type == Token::Type::block_begin) {
        next();
        for (const char* end : ends)
          if (is_name(end)) return body;
        parse_statement(body);
        expect_block_end();
      } else {
        fail_here("unexpected " + describe(t));
      }
    }
    return body;
  }

  // The body up to one of `ends`; the end tag is the current token afterwards.
  Body statements(std::initializer_list<const char*> ends, int opened_at, const char* what) {
    skip_op(":");
    expect_block_end();
    Body body = subparse(ends);
    if (cur().type == Token::Type::eof) {
      std::string names;
      for (const char* e : ends) names += std::string(names.empty() ? "'" : " or '") + e + "'";
      fail_at(std::string("unexpected end of template: the '") + what + "' block opened here " +
                  "needs " + names,
              opened_at);
    }
    return body;
  }

  void parse_statement(Body& body) {
    const Token& tag = cur();
    if (tag.type != Token::Type::name) fail_here("tag name expected");
    const std::string name = tag.text;
    const int line = tag.line;
    if (name == "if") return body.push_back(parse_if());
    if (name == "for") return body.push_back(parse_for());
    if (name == "set") return body.push_back(parse_set());
    if (name == "macro") return body.push_back(parse_macro());
    if (name == "with") return body.push_back(parse_with());
    if (name == "filter") return body.push_back(parse_filter_block());
    if (name == "print") return parse_print(body);
    if (name == "break" || name == "continue") {
      next();
      if (loops_ == 0) fail_at("'" + name + "' outside of a loop", line);
      auto s = std::make_unique<Stmt>();
      s->kind = name == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_;
      s->line = line;
      return body.push_back(std::move(s));
    }
    if (name == "generation") {
      // transformers' assistant-mask tag: its body renders as it is.
      next();
      Body inner = statements({"endgeneration"}, line, "generation");
      next();
      for (auto& s : inner) body.push_back(std::move(s));
      return;
    }
    static const char* const outside[] = {"block", "extends",    "include", "import", "from",
                                          "call",  "autoescape", "trans",   "do"};
    for (const char* o : outside)
      if (name == o)
        unsupported_at("the '{% " + name + " %}' tag (not in masque's Jinja subset" +
                           (name == "do" ? "; transformers does not enable it either)" : ")"),
                       line);
    fail_at("Encountered unknown tag '" + name + "'", line);
  }

  StmtPtr parse_if() {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::if_;
    s->line = next().line;
    while (true) {
      ExprPtr test = parse_tuple(false, {});
      Body body = statements({"elif", "else", "endif"}, s->line, "if");
      s->branches.emplace_back(std::move(test), std::move(body));
      const std::string tag = next().text;
      if (tag == "elif") continue;
      if (tag == "else") {
        s->otherwise = statements({"endif"}, s->line, "if");
        next();
      }
      break;
    }
    return s;
  }

  StmtPtr parse_for() {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::for_;
    s->line = next().line;
    s->target = parse_target(false, "in");
    if (!skip_name("in")) fail_here("expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false, {"recursive"});
    if (skip_name("if")) s->test = parse_expression(true);
    if (is_name("recursive")) unsupported_at("recursive loops ('for ... recursive')", cur().line);
    ++loops_;
    s->body = statements({"endfor", "else"}, s->line, "for");
    --loops_;
    if (next().text == "else") {
      s->otherwise = statements({"endfor"}, s->line, "for");
      next();
    }
    return s;
  }

  StmtPtr parse_set() {
    auto s = std::make_unique<Stmt>();
    s->line = next().line;
    s->target = parse_target(true, nullptr);
    if (skip_op("=")) {
      s->kind = Stmt::Kind::set;
      s->expr = parse_tuple(true, {});
      return s;
    }
    s->kind = Stmt::Kind::set_block;
    if (is_op("|")) s->expr = parse_filters(nullptr, false);
    s->body = statements({"endset"}, s->line, "set");
    next();
    return s;
  }

  StmtPtr parse_macro() {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::macro;
    s->line = next().line;
    s->text = expect(Token::Type::name, "a macro name").text;
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      MacroParam p;
      p.name = expect(Token::Type::name, "a parameter name").text;
      if (skip_op("="))
        p.default_value = parse_expression(true);
      else if (!s->params.empty() && s->params.back().default_value)
        fail_here("non-default argument follows default argument");
      s->params.push_back(std::move(p));
    }
    expect_op(")");
    const int loops = loops_;
    loops_ = 0;  // a loop around the macro's definition is not around its body
    s->body = statements({"endmacro"}, s->line, "macro");
    loops_ = loops;
    next();
    return s;
  }

  StmtPtr parse_with() {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::with;
    s->line = next().line;
    while (cur().type != Token::Type::block_end) {
      if (!s->assignments.empty()) expect_op(",");
      Target target = parse_target(false, nullptr);
      expect_op("=");
      s->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    s->body = statements({"endwith"}, s->line, "with");
    next();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::filter;
    s->line = next().line;
    s->expr = parse_filters(nullptr, true);
    s->body = statements({"endfilter"}, s->line, "filter");
    next();
    return s;
  }

  // `{% print a, b %}` writes each expression, as `{{ a }}{{ b }}` would.
  void parse_print(Body& body) {
    const int line = next().line;
    while (cur().type != Token::Type::block_end) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::output;
      s->line = line;
      s->expr = parse_expression(true);
      body.push_back(std::move(s));
      if (!skip_op(",")) break;
    }
  }

  // A `set` / `for` / `with` target: a name, names separated by commas, or (set) ns.attr.
  Target parse_target(bool with_namespace, const char* end_name) {
    Target target;
    if (with_namespace && cur().type == Token::Type::name && look().type == Token::Type::op &&
        look().text == ".") {
      target.names.push_back(next().text);
      next();
      target.attribute = expect(Token::Type::name, "an attribute name").text;
      return target;
    }
    const bool parenthesized = skip_op("(");
    while (true) {
      const Token& t = expect(Token::Type::name, "a variable name");
      if (t.text == "true" || t.text == "false" || t.text == "none" || t.text == "True" ||
          t.text == "False" || t.text == "None")
        fail_at("can't assign to '" + t.text + "'", t.line);
      target.names.push_back(t.text);
      if (!skip_op(",")) break;
      target.unpack = true;
      if ((end_name && is_name(end_name)) || is_op("=") || is_op(")")) break;
    }
    if (parenthesized) {
      expect_op(")");
      target.unpack = true;
    }
    return target;
  }

  // --- expressions ---
  bool at_tuple_end(std::initializer_list<const char*> extra) const {
    if (cur().type == Token::Type::variable_end || cur().type == Token::Type::block_end ||
        is_op(")"))
      return true;
    for (const char* e : extra)
      if (is_name(e)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra,
                      bool explicit_parens = false) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (at_tuple_end(extra)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_here("Expected an expression, got " + describe(cur()));
    }
    auto e = make(Expr::Kind::list, line);
    e->tuple = true;
    e->items = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Depth depth(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      auto e = make(Expr::Kind::conditional, line);
      e->test = parse_or();
      if (skip_name("else")) e->otherwise = parse_condexpr();
      e->then = std::move(expr);
      expr = std::move(e);
      line = cur().line;
    }
    return expr;
  }

  ExprPtr binary(const std::string& op, ExprPtr lhs, ExprPtr rhs, int line) {
    auto e = make(Expr::Kind::binary, line);
    e->name = op;
    e->lhs = std::move(lhs);
    e->rhs = std::move(rhs);
    return e;
  }

  ExprPtr parse_or() {
    const int line = cur().line;
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary("or", std::move(left), parse_and(), line);
    return left;
  }

  ExprPtr parse_and() {
    const int line = cur().line;
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary("and", std::move(left), parse_not(), line);
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth depth(*this);
      auto e = make(Expr::Kind::unary, next().line);
      e->name = "not";
      e->object = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr expr = parse_math1();
    std::vector<std::pair<std::string, ExprPtr>> ops;
    while (true) {
      if (cur().type == Token::Type::op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        const std::string op = next().text;
        ops.emplace_back(op, parse_math1());
      } else if (skip_name("in")) {
        ops.emplace_back("in", parse_math1());
      } else if (is_name("not") && look().type == Token::Type::name && look().text == "in") {
        next();
        next();
        ops.emplace_back("notin", parse_math1());
      } else {
        break;
      }
    }
    if (ops.empty()) return expr;
    auto e = make(Expr::Kind::compare, line);
    e->object = std::move(expr);
    e->operands = std::move(ops);
    return e;
  }

  ExprPtr parse_math1() {
    const int line = cur().line;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = next().text;
      left = binary(op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(Expr::Kind::concat, line);
    e->items.push_back(std::move(first));
    while (skip_op("~")) e->items.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    const int line = cur().line;
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = next().text;
      left = binary(op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    const int line = cur().line;
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) left = binary("**", std::move(left), parse_unary(true), line);
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    Depth depth(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = make(Expr::Kind::unary, cur().line);
      e->name = next().text;
      e->object = parse_unary(false);
      node = std::move(e);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case Token::Type::name: {
        next();
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          auto e = make(Expr::Kind::literal, t.line);
          e->value = Value(t.text == "true" || t.text == "True");
          return e;
        }
        if (t.text == "none" || t.text == "None") {
          auto e = make(Expr::Kind::literal, t.line);
          e->value = Value::none();
          return e;
        }
        auto e = make(Expr::Kind::name, t.line);
        e->name = t.text;
        return e;
      }
      case Token::Type::string: {
        auto e = make(Expr::Kind::literal, t.line);
        std::string text;
        while (cur().type == Token::Type::string) text += next().text;  // 'a' 'b' is 'ab'
        e->value = Value(std::move(text));
        return e;
      }
      case Token::Type::integer: {
        auto e = make(Expr::Kind::literal, t.line);
        e->value = Value(next().integer);
        return e;
      }
      case Token::Type::floating: {
        auto e = make(Expr::Kind::literal, t.line);
        e->value = Value(next().floating);
        return e;
      }
      case Token::Type::op:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail_here("unexpected " + describe(t));
  }

  ExprPtr parse_list() {
    auto e = make(Expr::Kind::list, next().line);
    while (!is_op("]")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("]")) break;
      e->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    auto e = make(Expr::Kind::dict, next().line);
    while (!is_op("}")) {
      if (!e->pairs.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      e->pairs.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("["))
        node = parse_subscript(std::move(node));
      else if (is_op("("))
        node = parse_call(std::move(node));
      else
        return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|"))
        node = parse_filters(std::move(node), false);
      else if (is_name("is"))
        node = parse_test(std::move(node));
      else if (is_op("("))
        node = parse_call(std::move(node));
      else
        return node;
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    if (t.text == ".") {
      const Token& a = cur();
      if (a.type == Token::Type::name) {
        auto e = make(Expr::Kind::attribute, t.line);
        e->object = std::move(node);
        e->name = next().text;
        return e;
      }
      if (a.type != Token::Type::integer) fail_here("expected name or number");
      auto e = make(Expr::Kind::item, t.line);
      e->object = std::move(node);
      auto index = make(Expr::Kind::literal, a.line);
      index->value = Value(next().integer);
      e->index = std::move(index);
      return e;
    }
    // [index] or [start:stop:step]
    ExprPtr start, stop, step;
    bool is_slice = false;
    if (!is_op(":")) start = parse_expression(true);
    if (skip_op(":")) {
      is_slice = true;
      if (!is_op("]") && !is_op(":")) stop = parse_expression(true);
      if (skip_op(":") && !is_op("]")) step = parse_expression(true);
    }
    if (is_op(",")) unsupported_at("subscripts with several indices (x[a, b])", cur().line);
    expect_op("]");
    if (!is_slice) {
      auto e = make(Expr::Kind::item, t.line);
      e->object = std::move(node);
      e->index = std::move(start);
      return e;
    }
    auto e = make(Expr::Kind::slice, t.line);
    e->object = std::move(node);
    e->start = std::move(start);
    e->stop = std::move(stop);
    e->step = std::move(step);
    return e;
  }

  // (args, name=kwargs) into e->items and e->kwargs.
  void parse_call_args(Expr& e) {
    const int line = cur().line;
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;  // a trailing comma
      }
      if (is_op("*") || is_op("**")) unsupported_at("calls with *args or **kwargs", cur().line);
      if (cur().type == Token::Type::name && look().type == Token::Type::op && look().text == "=") {
        const std::string key = next().text;
        next();
        e.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail_at("invalid syntax for function call expression", line);
        e.items.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(Expr::Kind::call, cur().line);
    e->object = std::move(node);
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string name = expect(Token::Type::name, "a name").text;
    while (skip_op(".")) name += "." + expect(Token::Type::name, "a name").text;
    return name;
  }

  // `| name(args)` filters, one or more; `inline_first` for a filter block's first filter.
  ExprPtr parse_filters(ExprPtr node, bool inline_first) {
    while (is_op("|") || inline_first) {
      if (!inline_first) next();
      inline_first = false;
      const int line = cur().line;
      auto e = make(Expr::Kind::filter, line);
      e->name = dotted_name();
      check_known(e->name, true, line);
      if (is_op("(")) parse_call_args(*e);
      e->object = std::move(node);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = next().line;
    const bool negated = skip_name("not");
    auto e = make(Expr::Kind::test, line);
    e->name = dotted_name();
    check_known(e->name, false, line);
    e->object = std::move(node);
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((t.type == Token::Type::name || t.type == Token::Type::string ||
                t.type == Token::Type::integer || t.type == Token::Type::floating || is_op("[") ||
                is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_here("You cannot chain multiple tests with is");
      e->items.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
    }
    if (!negated) return e;
    auto n = make(Expr::Kind::unary, line);
    n->name = "not";
    n->object = std::move(e);
    return n;
  }

  void check_known(const std::string& name, bool filter, int line) const {
    if (filter ? is_filter(name) : is_test(name)) return;
    if (filter ? is_jinja_filter(name) : is_jinja_test(name))
      unsupported_at(std::string("the '") + name + "' " + (filter ? "filter" : "test") +
                         " (a jinja2 builtin outside masque's subset)",
                     line);
    fail_at(std::string("No ") + (filter ? "filter" : "test") + " named '" + name + "'", line);
  }

  const std::vector<Token>& t_;
  const std::string& name_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int loops_ = 0;  // for loops around the current statement (for break / continue)
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& source_name) {
  return Parser(tokens, source_name).run();
}

}  // namespace masque::chat::jinja
