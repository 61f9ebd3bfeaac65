// Runs a parsed template over a context: the statements write text, the expressions compute
// Values. Scopes are jinja2's: a `for` iteration and a macro call each get their own (a `set`
// inside does not survive it, hence `namespace()`); `if` gets none. One Evaluator serves one
// render on one thread. It is bounded: at most kMaxSteps statements and loop iterations,
// macros nested at most kMaxMacroDepth deep, at most kMaxOutput bytes of text.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_ast.hpp"
#include "chat/jinja_value.hpp"

namespace masque::chat::jinja {

constexpr long kMaxSteps = 10'000'000;
constexpr int kMaxMacroDepth = 100;
constexpr std::size_t kMaxOutput = std::size_t{64} << 20;

class Evaluator {
 public:
  // `globals`: the global functions and the render's variables (those shadow the functions).
  Evaluator(const std::string& source_name, const Dict& globals);
  // `locals`: the names the template's scope starts undefined (resolve_scopes).
  std::string render(const Body& body, const std::vector<std::string>& locals);
  // A scope: its names, over the scope around it. Frames are shared so that a macro keeps
  // the scope it was defined in (a macro defined in a loop or a `with` sees its names).
  struct Frame {
    std::shared_ptr<Frame> parent;
    std::vector<std::pair<std::string, Value>> vars;
    Value* find(std::string_view name);
    void set(const std::string& name, Value value);
    void start_undefined(const std::vector<std::string>& names);
  };
  using FramePtr = std::shared_ptr<Frame>;

  // A macro's call: its parameters bound in a scope of its own over `closure`, the scope it
  // was defined in (null: the template's top level).
  Value call_macro(const Stmt& macro, const FramePtr& closure, const Arguments& arguments);

 private:
  enum class Flow { normal, break_loop, continue_loop };
  class Enter;  // makes a frame the current one for its lifetime

  Flow exec(const Body& body);
  Flow exec(const Stmt& stmt);
  Flow exec_for(const Stmt& stmt);
  void exec_set(const Stmt& stmt);
  void assign(const Target& target, const Value& value, int line);
  // Renders `body` into a string of its own, in a scope of its own (a set block's, a filter
  // block's).
  std::string capture(const Body& body, const std::vector<std::string>& locals);

  Value eval(const Expr& e);
  Value eval_node(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_filter(const Expr& e, const Value* input);
  Value eval_compare(const Expr& e);
  Arguments eval_arguments(const Expr& e);
  Value lookup(const std::string& name);

  void step(int line);
  void write(const std::string& text, int line);
  [[noreturn]] void fail_at(const std::string& message, int line) const;

  const std::string& source_;
  FramePtr globals_ = std::make_shared<Frame>();
  FramePtr root_ = std::make_shared<Frame>();  // the template's top level: its sets and macros
  FramePtr current_ = root_;
  std::string* out_ = nullptr;
  long steps_ = 0;
  int macro_depth_ = 0;
};

}  // namespace masque::chat::jinja
