#include "chat/jinja_scopes.hpp"

#include <functional>
#include <map>
#include <set>

namespace masque::chat::jinja {

namespace {

// One scope's names, as jinja2's idtracking.Symbols tracks them: `refs` are the names the
// scope knows (assigned or referred to), `undefined` those of them it starts undefined.
struct Symbols {
  const Symbols* parent = nullptr;
  std::set<std::string> refs, stores, undefined;

  bool find_ref(const std::string& name) const {
    for (const Symbols* s = this; s; s = s->parent)
      if (s->refs.count(name)) return true;
    return false;
  }
  void load(const std::string& name) {
    if (!find_ref(name)) refs.insert(name);  // read from the context
  }
  void store(const std::string& name) {
    stores.insert(name);
    if (refs.count(name)) return;  // referred to before: starts with the outer value
    refs.insert(name);
    if (!(parent && parent->find_ref(name))) undefined.insert(name);
  }
  void parameter(const std::string& name) {
    stores.insert(name);
    refs.insert(name);
    undefined.erase(name);
  }
  // After an if: a name assigned in some branches only starts with the outer value.
  void merge_branches(const std::vector<Symbols>& branches) {
    std::map<std::string, std::size_t> assigned_in;
    for (const Symbols& b : branches)
      for (const std::string& name : b.stores)
        if (!stores.count(name)) ++assigned_in[name];
    for (const Symbols& b : branches) {
      refs.insert(b.refs.begin(), b.refs.end());
      undefined.insert(b.undefined.begin(), b.undefined.end());
      stores.insert(b.stores.begin(), b.stores.end());
    }
    for (const auto& [name, count] : assigned_in)
      if (count != branches.size()) undefined.erase(name);
  }
};

void load_names(const Expr* e, Symbols& symbols) {
  if (!e) return;
  if (e->kind == Expr::Kind::name) symbols.load(e->name);
  for (const Expr* child :
       {e->object.get(), e->index.get(), e->start.get(), e->stop.get(), e->step.get(), e->lhs.get(),
        e->rhs.get(), e->test.get(), e->then.get(), e->otherwise.get()})
    load_names(child, symbols);
  for (const ExprPtr& item : e->items) load_names(item.get(), symbols);
  for (const auto& [key, value] : e->kwargs) load_names(value.get(), symbols);
  for (const auto& [key, value] : e->pairs) {
    load_names(key.get(), symbols);
    load_names(value.get(), symbols);
  }
  for (const auto& [op, operand] : e->operands) load_names(operand.get(), symbols);
}

// The scopes inside a scope, analysed once the scope itself is complete (as jinja2 does when
// it compiles them): each sees all of its parent's names.
using Deferred = std::vector<std::function<void(const Symbols&)>>;

void visit_body(Body& body, Symbols& symbols, Deferred& children);

// The names of a new scope over `parent`: `setup` declares its parameters and reads.
std::vector<std::string> analyse_scope(Body& body, const Symbols& parent,
                                       const std::function<void(Symbols&)>& setup) {
  Symbols symbols;
  symbols.parent = &parent;
  if (setup) setup(symbols);
  Deferred children;
  visit_body(body, symbols, children);
  for (auto& child : children) child(symbols);
  return {symbols.undefined.begin(), symbols.undefined.end()};
}

void visit_if(Stmt& s, std::size_t branch, Symbols& symbols, Deferred& children) {
  load_names(s.branches[branch].first.get(), symbols);
  std::vector<Symbols> branches(3, symbols);  // the body, the elifs, the else
  visit_body(s.branches[branch].second, branches[0], children);
  if (branch + 1 < s.branches.size())
    visit_if(s, branch + 1, branches[1], children);
  else
    visit_body(s.otherwise, branches[2], children);
  symbols.merge_branches(branches);
}

void visit_stmt(Stmt& s, Symbols& symbols, Deferred& children) {
  switch (s.kind) {
    case Stmt::Kind::text:
    case Stmt::Kind::break_:
    case Stmt::Kind::continue_:
      return;
    case Stmt::Kind::output:
      load_names(s.expr.get(), symbols);
      return;
    case Stmt::Kind::if_:
      visit_if(s, 0, symbols, children);
      return;
    case Stmt::Kind::set:
      load_names(s.expr.get(), symbols);
      if (!s.target.attribute.empty()) return symbols.load(s.target.names[0]);  // ns.attr
      for (const std::string& name : s.target.names) symbols.store(name);
      return;
    case Stmt::Kind::set_block:
      if (!s.target.attribute.empty())
        symbols.load(s.target.names[0]);
      else
        for (const std::string& name : s.target.names) symbols.store(name);
      children.push_back(
          [&s](const Symbols& parent) { s.body_locals = analyse_scope(s.body, parent, nullptr); });
      return;
    case Stmt::Kind::for_:
      load_names(s.expr.get(), symbols);
      children.push_back([&s](const Symbols& parent) {
        s.body_locals = analyse_scope(s.body, parent, [&s](Symbols& own) {
          for (const std::string& name : s.target.names) own.parameter(name);
        });
        s.otherwise_locals = analyse_scope(s.otherwise, parent, nullptr);
      });
      return;
    case Stmt::Kind::macro:
      symbols.store(s.text);
      children.push_back([&s](const Symbols& parent) {
        s.body_locals = analyse_scope(s.body, parent, [&s](Symbols& own) {
          for (const MacroParam& p : s.params) own.parameter(p.name);
          for (const MacroParam& p : s.params) load_names(p.default_value.get(), own);
        });
      });
      return;
    case Stmt::Kind::with:
      for (const auto& [target, value] : s.assignments) load_names(value.get(), symbols);
      children.push_back([&s](const Symbols& parent) {
        s.body_locals = analyse_scope(s.body, parent, [&s](Symbols& own) {
          for (const auto& [target, value] : s.assignments)
            for (const std::string& name : target.names) own.parameter(name);
        });
      });
      return;
    case Stmt::Kind::filter:
      load_names(s.expr.get(), symbols);
      children.push_back(
          [&s](const Symbols& parent) { s.body_locals = analyse_scope(s.body, parent, nullptr); });
      return;
  }
}

void visit_body(Body& body, Symbols& symbols, Deferred& children) {
  for (StmtPtr& s : body) visit_stmt(*s, symbols, children);
}

}  // namespace

std::vector<std::string> resolve_scopes(Body& root) {
  Symbols symbols;  // the template's scope has no parent: the context is not a scope
  Deferred children;
  visit_body(root, symbols, children);
  for (auto& child : children) child(symbols);
  return {symbols.undefined.begin(), symbols.undefined.end()};
}

}  // namespace masque::chat::jinja
