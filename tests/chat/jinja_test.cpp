// masque's Jinja interpreter: the small templates of jinja_cases.txt against python3-jinja2's
// renders (written by chat_template_reference.py), then its errors, bounds and threads.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/jinja_template.hpp"

using masque::chat::jinja::Dict;
using masque::chat::jinja::Template;
using masque::chat::jinja::TemplateError;
using masque::chat::jinja::Value;
using Kind = TemplateError::Kind;

namespace {

struct Case {
  std::string name, context, source;
};

// jinja_cases.txt: `=== NAME`, `--- context`, `--- template` (text to the next `===`, its
// final newline included), as chat_template_reference.py reads it.
std::vector<Case> read_cases() {
  std::ifstream in(std::string(MASQUE_CHAT_TEST_DIR) + "/jinja_cases.txt", std::ios::binary);
  REQUIRE(in);
  std::vector<Case> cases;
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.rfind("=== ", 0) == 0) {
      cases.push_back({line.substr(4), "", ""});
      section.clear();
    } else if ((line == "--- context" || line == "--- template") && !cases.empty()) {
      section = line.substr(4);
    } else if (!cases.empty() && !section.empty()) {
      (section == "context" ? cases.back().context : cases.back().source) += line + "\n";
    }
  }
  return cases;
}

std::vector<nlohmann::ordered_json> read_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  INFO(path << " (written by the chat_fixture test: run ctest -R chat)");
  REQUIRE(in);
  std::vector<nlohmann::ordered_json> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::ordered_json::parse(line));
  return rows;
}

Dict context_of(const std::string& json) {
  if (json.find_first_not_of(" \n") == std::string::npos) return {};
  return Value::from_json(nlohmann::ordered_json::parse(json)).as_dict();
}

std::string render(const std::string& source, const Dict& context = {}) {
  return Template::parse(source, "test.jinja").render(context);
}

// The error a template gives (parse or render), or fails the test when there is none.
TemplateError error_of(const std::string& source, const Dict& context = {}) {
  try {
    render(source, context);
  } catch (const TemplateError& e) {
    return e;
  }
  FAIL("no error from: " << source);
  throw;  // unreachable
}

}  // namespace

TEST_CASE("small templates render byte-identical to python3-jinja2") {
  const std::vector<Case> cases = read_cases();
  const auto expected = read_jsonl(std::string(MASQUE_CHAT_FIXTURE_DIR) + "/jinja_expected.jsonl");
  REQUIRE(cases.size() == expected.size());
  int identical = 0, both_failed = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const auto& want = expected[i];
    REQUIRE(want["name"] == c.name);
    INFO("case " << c.name);
    std::string got, error;
    try {
      got = render(c.source, context_of(c.context));
    } catch (const TemplateError& e) {
      error = e.what();
      CHECK(e.kind() == Kind::render);
    }
    if (want.contains("text")) {
      INFO("masque's error: " << error);
      CHECK(error.empty());
      CHECK(got == want["text"].get<std::string>());
      identical += error.empty() && got == want["text"].get<std::string>();
    } else {
      INFO("jinja2: " << want["error"] << ": " << want["message"]);
      CHECK(!error.empty());
      CHECK(c.name.rfind("error_", 0) == 0);
      // raise_exception's message reaches the user as the template wrote it.
      if (want["error"] == "TemplateError")
        CHECK(error.find(want["message"].get<std::string>()) != std::string::npos);
      both_failed += !error.empty();
    }
  }
  WARN(identical << " templates byte-identical, " << both_failed << " failing in both, of "
                 << cases.size());
}

TEST_CASE("random templates render byte-identical to python3-jinja2") {
  // Whitespace control in every combination around nested blocks, loops, assignments, macros,
  // with and set blocks, raw blocks (chat_template_reference.py's RandomTemplate).
  const auto cases = read_jsonl(std::string(MASQUE_CHAT_FIXTURE_DIR) + "/jinja_random.jsonl");
  REQUIRE(cases.size() >= 1000);
  int identical = 0, both_failed = 0;
  for (const auto& c : cases) {
    const std::string source = c["template"];
    INFO("template " << nlohmann::json(source).dump());
    std::string got, error;
    try {
      got = render(source, Value::from_json(c["context"]).as_dict());
    } catch (const TemplateError& e) {
      error = e.what();
    }
    if (c.contains("text")) {
      INFO("masque's error: " << error);
      CHECK(got == c["text"].get<std::string>());
      identical += error.empty() && got == c["text"].get<std::string>();
    } else {
      INFO("jinja2: " << c["error"] << ": " << c["message"]);
      CHECK(!error.empty());
      both_failed += !error.empty();
    }
  }
  WARN(identical << " random templates byte-identical, " << both_failed << " failing in both, of "
                 << cases.size());
}

TEST_CASE("syntax errors name the template and the line") {
  TemplateError e = error_of("line one\nline two {% if %}\n");
  CHECK(e.kind() == Kind::syntax);
  CHECK(e.line() == 2);
  CHECK(std::string(e.what()).rfind("test.jinja line 2: syntax error:", 0) == 0);

  e = error_of("a\nb\n{% frobnicate x %}");
  CHECK(e.kind() == Kind::syntax);
  CHECK(e.line() == 3);
  CHECK(e.message() == "Encountered unknown tag 'frobnicate'");

  e = error_of("{% for x in y %}\n{{ x }}\n");  // never closed: the line that opened it
  CHECK(e.kind() == Kind::syntax);
  CHECK(e.line() == 1);
  CHECK(e.message().find("'endfor'") != std::string::npos);

  CHECK(error_of("{{ 'unterminated }}").kind() == Kind::syntax);
  CHECK(error_of("{{ (1 }}").kind() == Kind::syntax);
  CHECK(error_of("{# never closed").message() == "Missing end of comment tag");
  CHECK(error_of("{% break %}").message() == "'break' outside of a loop");
  CHECK(error_of("\n\n{{ x|nosuchfilter }}").message() == "No filter named 'nosuchfilter'");
  CHECK(error_of("\n\n{{ x|nosuchfilter }}").line() == 3);
  CHECK(error_of("{{ x is nosuchtest }}").message() == "No test named 'nosuchtest'");
}

TEST_CASE("constructs outside the subset are named with their line") {
  struct Sample {
    const char* source;
    const char* names;
    int line;
  };
  const Sample samples[] = {
      {"ok\n\n{% include 'other.jinja' %}", "include", 3},
      {"{% extends 'base' %}", "extends", 1},
      {"x\n{% block body %}{% endblock %}", "block", 2},
      {"{% import 'm' as m %}", "import", 1},
      {"{% call m() %}x{% endcall %}", "call", 1},
      {"{% for x in y recursive %}{% endfor %}", "recursive", 1},
      {"\n{{ items|groupby('a') }}", "groupby", 2},
      {"{{ x|truncate(3) }}", "truncate", 1},
      {"{{ f(*args) }}", "*args", 1},
      {"{% do x %}", "do", 1},
  };
  for (const Sample& s : samples) {
    INFO(s.source);
    const TemplateError e = error_of(s.source);
    CHECK(e.kind() == Kind::unsupported);
    CHECK(e.line() == s.line);
    CHECK(e.message().find(s.names) != std::string::npos);
  }
  // Found while rendering: a method masque does not have.
  const TemplateError e = error_of("\n{{ '{}'.format(1) }}");
  CHECK(e.kind() == Kind::unsupported);
  CHECK(e.line() == 2);
  CHECK(e.message().find("format") != std::string::npos);
}

TEST_CASE("raise_exception stops the render with the template's message") {
  const TemplateError e = error_of(
      "{% for m in messages %}\n"
      "{% if m.role not in ['user', 'assistant'] %}\n"
      "{{ raise_exception('Unknown role: ' + m.role) }}\n"
      "{% endif %}\n"
      "{% endfor %}",
      context_of(R"({"messages": [{"role": "user"}, {"role": "robot"}]})"));
  CHECK(e.kind() == Kind::render);
  CHECK(e.message() == "Unknown role: robot");
  CHECK(e.line() == 3);
}

TEST_CASE("undefined values fail where they are used, naming what was missing") {
  TemplateError e = error_of("{{ message.content.strip() }}");
  CHECK(e.message() == "'message' is undefined");
  e = error_of("{{ m.nokey.more }}", context_of(R"({"m": {}})"));
  CHECK(e.message() == "'dict object' has no attribute 'nokey'");
  CHECK(render("{{ m.nokey }}|{{ m.nokey is defined }}", context_of(R"({"m": {}})")) == "|False");
}

TEST_CASE("a template cannot run unbounded") {
  // Macros recurse at most kMaxMacroDepth deep.
  TemplateError e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  CHECK(e.kind() == Kind::render);
  CHECK(e.message().find("macros nested more than") != std::string::npos);
  // Loops (Jinja has no while) end after at most kMaxSteps statements and iterations.
  e = error_of("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}");
  CHECK(e.message().find("statements and loop iterations") != std::string::npos);
  // And the text is bounded.
  e = error_of("{{ 'x' * 100000000 }}");
  CHECK(e.kind() == Kind::render);
  e = error_of("{% for a in range(100000) %}{{ 'y' * 1000 }}{% endfor %}");
  CHECK(e.message().find("wrote more than") != std::string::npos);
  // Deeply nested expressions are refused, not a stack overflow.
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  CHECK(error_of(deep).kind() == Kind::unsupported);
}

TEST_CASE("one template renders on several threads at once") {
  const Template t = Template::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m|length %}"
      "{{ m|upper }}{% endfor %}={{ ns.n }}",
      "threads.jinja");
  std::vector<std::string> results(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      Dict context;
      context.set("messages",
                  Value(masque::chat::jinja::List{Value(std::string(i + 1, 'a')), Value("b")}));
      std::string last;
      for (int k = 0; k < 2000; ++k) last = t.render(context);
      results[static_cast<std::size_t>(i)] = last;
    });
  for (auto& th : threads) th.join();
  for (int i = 0; i < 4; ++i)
    CHECK(results[static_cast<std::size_t>(i)] ==
          std::string(static_cast<std::size_t>(i + 1), 'A') + "B=" + std::to_string(i + 2));
}
