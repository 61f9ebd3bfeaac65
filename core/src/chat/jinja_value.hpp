// The values a Jinja template computes with, modelled on the Python objects jinja2 renders:
// undefined (jinja2's default Undefined: prints as nothing, is false, fails in arithmetic),
// None, bool, int, float, str, list, tuple, dict (insertion-ordered, as Python's), namespace
// objects (the one mutable kind) and callables (macros, globals, bound methods).
// Lists, dicts and strings are shared immutably, so copying a Value is cheap.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace masque::chat::jinja {

class Value;
using List = std::vector<Value>;

// Defined after Value: a pair holding a Value needs it complete (clang with libstdc++ checks
// the pair's traits where the vector is declared).
class Dict;
struct Namespace;

// A `for` loop's `loop`: one object that moves on with the loop, as jinja2's LoopContext
// (so `{% set outer = loop %}` in a nested loop reads the outer loop's current index).
struct LoopState {
  std::shared_ptr<const List> items;
  std::size_t index = 0;
};

struct Arguments;
class Evaluator;

// Anything a template can call: a macro, a global function, a bound method.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual Value call(Evaluator& evaluator, Arguments& arguments) const = 0;
  virtual std::string name() const = 0;
};

class Value {
 public:
  enum class Kind {
    undefined,
    none,
    boolean,
    integer,
    floating,
    string,
    list,
    tuple,
    dict,
    ns,
    loop,
    callable
  };

  Value() = default;  // undefined
  // `why` is jinja2's message when the value is used: "'x' is undefined".
  static Value undefined(std::string why = {});
  static Value none();
  Value(bool b) : kind_(Kind::boolean), data_(b) {}
  Value(std::int64_t i) : kind_(Kind::integer), data_(i) {}
  Value(int i) : Value(static_cast<std::int64_t>(i)) {}
  Value(double d) : kind_(Kind::floating), data_(d) {}
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  Value(List items, bool tuple = false);
  Value(Dict dict);
  Value(std::shared_ptr<Namespace> ns) : kind_(Kind::ns), data_(std::move(ns)) {}
  Value(std::shared_ptr<LoopState> loop) : kind_(Kind::loop), data_(std::move(loop)) {}
  Value(std::shared_ptr<const Callable> f) : kind_(Kind::callable), data_(std::move(f)) {}

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_int() const { return kind_ == Kind::integer; }
  bool is_float() const { return kind_ == Kind::floating; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python: bool is an int
  bool is_string() const { return kind_ == Kind::string; }
  bool is_list() const { return kind_ == Kind::list || kind_ == Kind::tuple; }
  bool is_dict() const { return kind_ == Kind::dict; }
  bool is_namespace() const { return kind_ == Kind::ns; }
  bool is_loop() const { return kind_ == Kind::loop; }
  bool is_callable() const { return kind_ == Kind::callable; }

  bool as_bool() const { return std::get<bool>(data_); }
  std::int64_t as_int() const;  // bool and int
  double as_double() const;     // bool, int and float
  const std::string& as_string() const { return *std::get<StringPtr>(data_); }
  const List& as_list() const { return *std::get<ListPtr>(data_); }
  const Dict& as_dict() const { return *std::get<DictPtr>(data_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(data_); }
  const LoopState& as_loop() const { return *std::get<std::shared_ptr<LoopState>>(data_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  // What an undefined value failed to find, for the error when it is used.
  std::string undefined_message() const;

  // Python's bool(): empty containers, 0, "", None and undefined are false.
  bool truthy() const;
  // The Python type name, for error messages ("str", "list", "NoneType", "Undefined").
  std::string type_name() const;

  // From parsed JSON (a record's messages and tools): objects keep their key order.
  static Value from_json(const nlohmann::ordered_json& json);

 private:
  using StringPtr = std::shared_ptr<const std::string>;
  using ListPtr = std::shared_ptr<const List>;
  using DictPtr = std::shared_ptr<const Dict>;
  Kind kind_ = Kind::undefined;
  std::variant<std::monostate, bool, std::int64_t, double, StringPtr, ListPtr, DictPtr,
               std::shared_ptr<Namespace>, std::shared_ptr<LoopState>,
               std::shared_ptr<const Callable>>
      data_;
};

// A Python dict with string keys: insertion order, one entry per key.
class Dict {
 public:
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);  // replaces an existing key in its place
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  std::size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
};

// `namespace(...)`: the one object a template may change, with `{% set ns.attr = ... %}`.
struct Namespace {
  Dict attributes;
};

// The arguments of a call, as written: positional ones, then keyword ones.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Python's == (1 == 1.0 == True; lists element-wise; dicts by content; undefined equals only
// undefined, as jinja2's Undefined does).
bool equal(const Value& a, const Value& b);
// Python's < for numbers, strings and lists; a render error for anything else.
bool less(const Value& a, const Value& b);

}  // namespace masque::chat::jinja
