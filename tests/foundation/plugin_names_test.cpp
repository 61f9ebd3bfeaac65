// Core and the CLI name no plugin (issue 46): they choose and configure plugins by what the
// plugins declare about themselves (masque/plugin.hpp's traits). This test reads every source
// file of core/ and cli/ and fails, naming file and line, on a string literal that is a plugin's
// name. The names come from the plugin folders (plugins/KIND/NAME/) and from what the built
// plugins' descriptors declare, so a new plugin is covered the day it lands.
//
// Not counted, because the literal names something else or the name is the point:
// - a literal that is also a task's or a model kind's name: the concept shares the name with a
//   plugin (the seq2seq task and the seq2seq mask; the encoder-decoder model kind and plugin);
// - a mask plugin's name in core/src/tasks/ and core/src/train/: the mask decides the task, so a
//   task (and an objective, a task run backwards) names the attention rule it computes
//   (docs/architecture.md, "Tasks, masks and the runner").
// kKnownExceptions lists what is still to be made a declaration, each with its reason.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "pipeline.hpp"
#include "registry.hpp"
#include "tasks/task.hpp"
#include "test_support.hpp"

using namespace masque;
namespace fs = std::filesystem;

namespace {

struct Literal {
  int line;
  std::string text;
};

// The string literals of C++ source outside comments, with the line each starts on: plain,
// prefixed (u8"", L"") and raw (R"d(...)d") ones; character literals and digit separators are
// skipped so a '"' among them starts nothing.
std::vector<Literal> string_literals(const std::string& src) {
  std::vector<Literal> out;
  int line = 1;
  std::size_t i = 0;
  const std::size_t n = src.size();
  auto advance = [&](std::size_t to) {
    for (; i < to && i < n; ++i)
      if (src[i] == '\n') ++line;
  };
  while (i < n) {
    const char c = src[i];
    if (c == '/' && i + 1 < n && src[i + 1] == '/') {
      advance(src.find('\n', i) == std::string::npos ? n : src.find('\n', i));
    } else if (c == '/' && i + 1 < n && src[i + 1] == '*') {
      const std::size_t end = src.find("*/", i + 2);
      advance(end == std::string::npos ? n : end + 2);
    } else if (c == '\'') {
      const bool separator = i > 0 && std::isalnum(static_cast<unsigned char>(src[i - 1]));
      if (separator) {
        ++i;
        continue;
      }
      std::size_t j = i + 1;
      while (j < n && src[j] != '\'' && src[j] != '\n') j += src[j] == '\\' ? 2 : 1;
      advance(j + 1);
    } else if (c == '"') {
      const bool raw = i > 0 && src[i - 1] == 'R';
      const int start = line;
      if (raw) {
        const std::size_t open = src.find('(', i);
        const std::string close = ")" + src.substr(i + 1, open - i - 1) + "\"";
        const std::size_t end = src.find(close, open);
        out.push_back({start, src.substr(open + 1, end - open - 1)});
        advance(end + close.size());
      } else {
        std::string text;
        std::size_t j = i + 1;
        for (; j < n && src[j] != '"' && src[j] != '\n'; ++j) {
          if (src[j] == '\\' && j + 1 < n) text += src[j++];
          text += src[j];
        }
        out.push_back({start, text});
        advance(j + 1);
      }
    } else {
      ++i;
      if (c == '\n') ++line;
    }
  }
  return out;
}

// Every plugin name: the plugin folders' names and what the built descriptors declare, by kind.
std::map<std::string, std::set<PluginKind>> plugin_names() {
  std::map<std::string, std::set<PluginKind>> names;
  const std::pair<const char*, PluginKind> kFolders[] = {{"tokenizers", PluginKind::tokenizer},
                                                         {"masks", PluginKind::mask},
                                                         {"models", PluginKind::model},
                                                         {"decoders", PluginKind::decoder},
                                                         {"constraints", PluginKind::constraint}};
  for (const auto& [folder, kind] : kFolders)
    for (const auto& e : fs::directory_iterator(test::source_dir() / "plugins" / folder))
      if (e.is_directory() && fs::exists(e.path() / "CMakeLists.txt"))
        names[e.path().filename().string()].insert(kind);
  for (const auto& p : test::build_registry().plugins())
    names[p.descriptor->name].insert(p.descriptor->kind);
  return names;
}

// Names core has for its own concepts, which some plugins share.
std::set<std::string> concept_names() {
  std::set<std::string> names;
  for (const auto& t : task_specs()) names.insert(t.name);
  for (ModelKind k : {ModelKind::decoder_only, ModelKind::encoder_only, ModelKind::encoder_decoder})
    names.insert(model_kind_name(k));
  return names;
}

// Still names, each to become a declaration (file relative to the project, literal, why).
struct KnownException {
  const char* file;
  const char* name;
};
constexpr KnownException kKnownExceptions[] = {
    // masque run's --json-schema and --grammar shorthands name the constraint plugins they
    // fill a `constraint:` section with; a constraint plugin should declare its shorthand.
    {"cli/cmd_run.cpp", "json-schema"},
    {"cli/cmd_run.cpp", "gbnf"},
};

bool is_source(const fs::path& p) {
  const std::string name = p.filename().string();
  for (const char* ext : {".cpp", ".hpp", ".h", ".hpp.in", ".cpp.in"})
    if (name.size() > std::string(ext).size() && name.ends_with(ext)) return true;
  return false;
}

}  // namespace

TEST_CASE("the literal scanner sees string literals outside comments only") {
  const auto found = string_literals(
      "// \"gpt2\" in a comment\n"
      "/* \"bert\"\n */ int x = 1'000; char q = '\"';\n"
      "auto a = \"greedy\"; auto b = R\"x(sample \"beam\")x\";\n"
      "auto c = \"esc\\\"aped\";\n");
  REQUIRE(found.size() == 3);
  CHECK(found[0].line == 4);
  CHECK(found[0].text == "greedy");
  CHECK(found[1].line == 4);
  CHECK(found[1].text == "sample \"beam\"");
  CHECK(found[2].line == 5);
  CHECK(found[2].text == "esc\\\"aped");
}

TEST_CASE("no plugin name in core/ or cli/ (string literals in code)") {
  const auto names = plugin_names();
  REQUIRE(names.count("wordpiece"));  // the folders were found
  REQUIRE(names.size() >= 30);
  const auto concepts = concept_names();
  std::vector<std::string> hits;
  for (const char* root : {"core", "cli"}) {
    for (const auto& e : fs::recursive_directory_iterator(test::source_dir() / root)) {
      if (!e.is_regular_file() || !is_source(e.path())) continue;
      const std::string rel = fs::relative(e.path(), test::source_dir()).generic_string();
      const bool task_layer =
          rel.starts_with("core/src/tasks/") || rel.starts_with("core/src/train/");
      std::ifstream in(e.path());
      std::stringstream text;
      text << in.rdbuf();
      for (const Literal& lit : string_literals(text.str())) {
        const auto it = names.find(lit.text);
        if (it == names.end() || concepts.count(lit.text)) continue;
        if (task_layer && it->second == std::set<PluginKind>{PluginKind::mask}) continue;
        const bool known = std::any_of(
            std::begin(kKnownExceptions), std::end(kKnownExceptions),
            [&](const KnownException& k) { return rel == k.file && lit.text == k.name; });
        if (!known) hits.push_back(rel + ":" + std::to_string(lit.line) + ": \"" + lit.text + "\"");
      }
    }
  }
  std::string report;
  for (const auto& h : hits) report += "\n  " + h;
  INFO("string literals naming a plugin (declare what the plugin is instead):" << report);
  CHECK(hits.empty());
}
