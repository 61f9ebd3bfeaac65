#include "chat/jinja_eval.hpp"

#include "chat/jinja_builtins.hpp"
#include "chat/jinja_error.hpp"
#include "chat/python_str.hpp"
#include "chat/python_text.hpp"

namespace masque::chat::jinja {

namespace {

// A `{% macro %}` as a value: calling it renders its body. It holds the scope it was
// defined in weakly (that scope holds the macro); once the scope has gone it sees the
// template's top level.
class Macro : public Callable {
 public:
  Macro(const Stmt& definition, const Evaluator::FramePtr& closure)
      : definition_(definition), closure_(closure) {}
  Value call(Evaluator& evaluator, Arguments& arguments) const override {
    return evaluator.call_macro(definition_, closure_.lock(), arguments);
  }
  std::string name() const override { return definition_.text; }

 private:
  const Stmt& definition_;
  std::weak_ptr<Evaluator::Frame> closure_;
};

}  // namespace

Value* Evaluator::Frame::find(std::string_view name) {
  for (auto& [key, value] : vars)
    if (key == name) return &value;
  return nullptr;
}

void Evaluator::Frame::set(const std::string& name, Value value) {
  if (Value* v = find(name))
    *v = std::move(value);
  else
    vars.emplace_back(name, std::move(value));
}

void Evaluator::Frame::start_undefined(const std::vector<std::string>& names) {
  for (const std::string& name : names) set(name, Value::undefined("'" + name + "' is undefined"));
}

// Makes `frame` the evaluator's current scope (and `out` its output, when given) until it
// goes out of scope, whichever way that happens.
class Evaluator::Enter {
 public:
  Enter(Evaluator& e, FramePtr frame, std::string* out = nullptr)
      : e_(e), frame_(std::move(frame)), outer_(e.current_), outer_out_(e.out_) {
    e_.current_ = frame_;
    if (out) e_.out_ = out;
  }
  ~Enter() {
    e_.current_ = outer_;
    e_.out_ = outer_out_;
  }
  Enter(const Enter&) = delete;
  Enter& operator=(const Enter&) = delete;
  Frame& frame() { return *frame_; }

 private:
  Evaluator& e_;
  FramePtr frame_, outer_;
  std::string* outer_out_;
};

namespace {

Evaluator::FramePtr new_frame(const Evaluator::FramePtr& parent,
                              const std::vector<std::string>& locals) {
  auto frame = std::make_shared<Evaluator::Frame>();
  frame->parent = parent;
  frame->start_undefined(locals);
  return frame;
}

}  // namespace

Evaluator::Evaluator(const std::string& source_name, const Dict& globals) : source_(source_name) {
  for (const auto& [name, value] : globals.entries()) globals_->set(name, value);
  root_->parent = globals_;
}

std::string Evaluator::render(const Body& body, const std::vector<std::string>& locals) {
  std::string out;
  root_->start_undefined(locals);
  Enter top(*this, root_, &out);
  exec(body);
  return out;
}

void Evaluator::fail_at(const std::string& message, int line) const {
  throw TemplateError(TemplateError::Kind::render, message, source_, line);
}

void Evaluator::step(int line) {
  if (++steps_ > kMaxSteps)
    fail_at("the template ran more than " + std::to_string(kMaxSteps) +
                " statements and loop iterations (a bound of masque's)",
            line);
}

void Evaluator::write(const std::string& text, int line) {
  out_->append(text);
  if (out_->size() > kMaxOutput)
    fail_at("the template wrote more than " + std::to_string(kMaxOutput) + " bytes", line);
}

std::string Evaluator::capture(const Body& body, const std::vector<std::string>& locals) {
  std::string buffer;
  Enter scope(*this, new_frame(current_, locals), &buffer);
  exec(body);
  return buffer;
}

// --- statements ---

Evaluator::Flow Evaluator::exec(const Body& body) {
  for (const StmtPtr& s : body) {
    const Flow flow = exec(*s);
    if (flow != Flow::normal) return flow;
  }
  return Flow::normal;
}

Evaluator::Flow Evaluator::exec(const Stmt& s) {
  step(s.line);
  try {
    switch (s.kind) {
      case Stmt::Kind::text:
        write(s.text, s.line);
        return Flow::normal;
      case Stmt::Kind::output:
        write(python_str(eval(*s.expr)), s.line);
        return Flow::normal;
      case Stmt::Kind::if_:
        for (const auto& [test, body] : s.branches)
          if (eval(*test).truthy()) return exec(body);
        return exec(s.otherwise);
      case Stmt::Kind::for_:
        return exec_for(s);
      case Stmt::Kind::set:
      case Stmt::Kind::set_block:
        exec_set(s);
        return Flow::normal;
      case Stmt::Kind::macro:
        current_->set(s.text, Value(std::make_shared<const Macro>(s, current_)));
        return Flow::normal;
      case Stmt::Kind::break_:
        return Flow::break_loop;
      case Stmt::Kind::continue_:
        return Flow::continue_loop;
      case Stmt::Kind::with: {
        std::vector<std::pair<const Target*, Value>> values;  // evaluated outside the new scope
        for (const auto& [target, expr] : s.assignments) values.emplace_back(&target, eval(*expr));
        Enter scope(*this, new_frame(current_, s.body_locals));
        for (const auto& [target, value] : values) assign(*target, value, s.line);
        return exec(s.body);
      }
      case Stmt::Kind::filter: {
        const Value text(capture(s.body, s.body_locals));
        write(python_str(eval_filter(*s.expr, &text)), s.line);
        return Flow::normal;
      }
    }
  } catch (const ValueError& e) {
    throw TemplateError(e.kind(), e.what(), source_, s.line);
  }
  return Flow::normal;
}

Evaluator::Flow Evaluator::exec_for(const Stmt& s) {
  const List all = iterate(eval(*s.expr));
  const FramePtr outer = current_;
  // A loop's `if` filters the items first: loop.index and loop.length count what is left.
  List items;
  if (s.test) {
    for (const Value& item : all) {
      Enter scope(*this, new_frame(outer, {}));
      assign(s.target, item, s.line);
      if (eval(*s.test).truthy()) items.push_back(item);
    }
  } else {
    items = all;
  }
  if (items.empty()) {
    write(capture(s.otherwise, s.otherwise_locals), s.line);  // in a scope of its own
    return Flow::normal;
  }
  auto loop = std::make_shared<LoopState>();
  loop->items = std::make_shared<const List>(std::move(items));
  for (std::size_t i = 0; i < loop->items->size(); ++i) {
    step(s.line);
    loop->index = i;
    // Each iteration starts from the enclosing scope's values, as in jinja2.
    Enter scope(*this, new_frame(outer, s.body_locals));
    assign(s.target, (*loop->items)[i], s.line);
    scope.frame().set("loop", Value(loop));
    if (exec(s.body) == Flow::break_loop) break;
  }
  return Flow::normal;
}

void Evaluator::exec_set(const Stmt& s) {
  Value value;
  if (s.kind == Stmt::Kind::set) {
    value = eval(*s.expr);
  } else {
    value = Value(capture(s.body, s.body_locals));
    if (s.expr) value = eval_filter(*s.expr, &value);
  }
  if (s.target.attribute.empty()) return assign(s.target, value, s.line);
  Value* ns = nullptr;
  for (Frame* f = current_.get(); f && !ns; f = f->parent.get()) ns = f->find(s.target.names[0]);
  if (!ns || !ns->is_namespace())
    fail_at("Cannot assign attribute on non-namespace object", s.line);
  ns->as_namespace().attributes.set(s.target.attribute, value);
}

void Evaluator::assign(const Target& target, const Value& value, int line) {
  if (!target.unpack) return current_->set(target.names[0], value);
  const List items =
      value.is_list() || value.is_string()
          ? iterate(value)
          : (fail_at("TypeError: cannot unpack non-iterable " + value.type_name() + " object",
                     line),
             List{});
  if (items.size() != target.names.size())
    fail_at(items.size() > target.names.size()
                ? "ValueError: too many values to unpack (expected " +
                      std::to_string(target.names.size()) + ")"
                : "ValueError: not enough values to unpack (expected " +
                      std::to_string(target.names.size()) + ", got " +
                      std::to_string(items.size()) + ")",
            line);
  for (std::size_t i = 0; i < items.size(); ++i) current_->set(target.names[i], items[i]);
}

Value Evaluator::call_macro(const Stmt& macro, const FramePtr& closure,
                            const Arguments& arguments) {
  if (macro_depth_ >= kMaxMacroDepth)
    fail("macros nested more than " + std::to_string(kMaxMacroDepth) +
         " deep (a bound of masque's)");
  const std::size_t n = macro.params.size();
  if (arguments.positional.size() > n)
    fail("TypeError: macro '" + macro.text + "' takes not more than " + std::to_string(n) +
         " argument(s)");
  std::vector<const Value*> given(n, nullptr);
  for (std::size_t i = 0; i < arguments.positional.size(); ++i) given[i] = &arguments.positional[i];
  for (const auto& [key, value] : arguments.keyword) {
    std::size_t i = 0;
    while (i < n && macro.params[i].name != key) ++i;
    if (i == n)
      fail("TypeError: macro '" + macro.text + "' takes no keyword argument '" + key + "'");
    if (given[i])
      fail("TypeError: macro '" + macro.text + "' got multiple values for argument '" + key + "'");
    given[i] = &value;
  }
  // The macro's scope is over the one it was defined in, not its caller's.
  Enter scope(*this, new_frame(closure ? closure : root_, macro.body_locals));
  struct Depth {
    int& depth;
    ~Depth() { --depth; }
  } depth{++macro_depth_};
  for (std::size_t i = 0; i < n; ++i) {
    const MacroParam& p = macro.params[i];
    if (given[i])
      scope.frame().set(p.name, *given[i]);
    else if (p.default_value)
      scope.frame().set(p.name, eval(*p.default_value));
    else
      scope.frame().set(p.name, Value::undefined("parameter '" + p.name + "' was not provided"));
  }
  std::string text;
  {
    Enter output(*this, current_, &text);
    exec(macro.body);
  }
  return Value(std::move(text));
}

// --- expressions ---

Value Evaluator::lookup(const std::string& name) {
  for (Frame* f = current_.get(); f; f = f->parent.get())
    if (Value* v = f->find(name)) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

Value Evaluator::eval(const Expr& e) {
  try {
    return eval_node(e);
  } catch (const ValueError& err) {
    throw TemplateError(err.kind(), err.what(), source_, e.line);
  }
}

Arguments Evaluator::eval_arguments(const Expr& e) {
  Arguments args;
  for (const ExprPtr& item : e.items) args.positional.push_back(eval(*item));
  for (const auto& [key, expr] : e.kwargs) args.keyword.emplace_back(key, eval(*expr));
  return args;
}

Value Evaluator::eval_call(const Expr& e) {
  const Value callee = eval(*e.object);
  if (callee.is_undefined()) fail(callee.undefined_message());
  if (!callee.is_callable()) fail("TypeError: '" + callee.type_name() + "' object is not callable");
  Arguments args = eval_arguments(e);
  return callee.as_callable().call(*this, args);
}

Value Evaluator::eval_filter(const Expr& e, const Value* input) {
  // In a filter block or `set x | f` the innermost filter has no object: it gets the text.
  const Value value = !e.object ? *input
                      : input && e.object->kind == Expr::Kind::filter
                          ? eval_filter(*e.object, input)
                          : eval(*e.object);
  return apply_filter(e.name, value, eval_arguments(e));
}

Value Evaluator::eval_compare(const Expr& e) {
  Value left = eval(*e.object);
  for (const auto& [op, operand] : e.operands) {
    Value right = eval(*operand);
    bool holds;
    if (op == "==")
      holds = equal(left, right);
    else if (op == "!=")
      holds = !equal(left, right);
    else if (op == "<")
      holds = less(left, right);
    else if (op == ">")
      holds = less(right, left);
    else if (op == "<=")
      holds = !less(right, left);
    else if (op == ">=")
      holds = !less(left, right);
    else if (op == "in")
      holds = contains(right, left);
    else
      holds = !contains(right, left);  // notin
    if (!holds) return Value(false);
    left = std::move(right);  // a < b < c is a < b and b < c
  }
  return Value(true);
}

Value Evaluator::eval_node(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::literal:
      return e.value;
    case Expr::Kind::name:
      return lookup(e.name);
    case Expr::Kind::list: {
      List items;
      items.reserve(e.items.size());
      for (const ExprPtr& item : e.items) items.push_back(eval(*item));
      return Value(std::move(items), e.tuple);
    }
    case Expr::Kind::dict: {
      Dict dict;
      for (const auto& [key, value] : e.pairs) {
        const Value k = eval(*key);
        if (!k.is_string()) unsupported("dict literals with keys that are not strings");
        dict.set(k.as_string(), eval(*value));
      }
      return Value(std::move(dict));
    }
    case Expr::Kind::attribute:
      return get_attribute(eval(*e.object), e.name);
    case Expr::Kind::item:
      return get_item(eval(*e.object), eval(*e.index));
    case Expr::Kind::slice: {
      const Value object = eval(*e.object);
      const Value start = e.start ? eval(*e.start) : Value::none();
      const Value stop = e.stop ? eval(*e.stop) : Value::none();
      const Value step = e.step ? eval(*e.step) : Value::none();
      return get_slice(object, &start, &stop, &step);
    }
    case Expr::Kind::call:
      return eval_call(e);
    case Expr::Kind::filter:
      return eval_filter(e, nullptr);
    case Expr::Kind::test: {
      const Value value = eval(*e.object);
      return Value(apply_test(e.name, value, eval_arguments(e)));
    }
    case Expr::Kind::unary: {
      const Value value = eval(*e.object);
      if (e.name == "not") return Value(!value.truthy());
      return negate(value, e.name == "-");
    }
    case Expr::Kind::binary: {
      if (e.name == "and" || e.name == "or") {
        Value left = eval(*e.lhs);
        if (left.truthy() == (e.name == "or")) return left;  // Python returns an operand
        return eval(*e.rhs);
      }
      const Value left = eval(*e.lhs);
      return arithmetic(e.name, left, eval(*e.rhs));
    }
    case Expr::Kind::compare:
      return eval_compare(e);
    case Expr::Kind::concat: {
      std::string text;
      for (const ExprPtr& item : e.items) {
        text += python_str(eval(*item));
        if (text.size() > kMaxOutput)
          fail("a string of more than " + std::to_string(kMaxOutput) + " bytes");
      }
      return Value(std::move(text));
    }
    case Expr::Kind::conditional:
      if (eval(*e.test).truthy()) return eval(*e.then);
      if (e.otherwise) return eval(*e.otherwise);
      return Value::undefined("the conditional expression's test was false and it has no else");
  }
  return Value();
}

}  // namespace masque::chat::jinja
