// The GBNF parser and matcher (core/src/grammar) and the token constraint built on them: what
// a grammar accepts and rejects, byte by byte and token by token, and the errors a malformed
// grammar gets.
#include <catch2/catch.hpp>

#include <limits>
#include <string>
#include <vector>

#include "grammar/gbnf.hpp"
#include "grammar/grammar_matcher.hpp"
#include "masque/constraint.hpp"
#include "masque/error.hpp"

using masque::grammar::GrammarMatcher;

namespace {

bool accepts(const std::string& gbnf, const std::string& text) {
  GrammarMatcher m(masque::grammar::parse_gbnf(gbnf, "test.gbnf"));
  return m.accepts(m.step(m.start(), text));
}

// True when `text` can still be continued into a sentence (or is one).
bool viable(const std::string& gbnf, const std::string& text) {
  GrammarMatcher m(masque::grammar::parse_gbnf(gbnf, "test.gbnf"));
  return m.step(m.start(), text) != GrammarMatcher::kDead;
}

std::string parse_error(const std::string& gbnf) {
  try {
    (void)masque::grammar::parse_gbnf(gbnf, "g.gbnf");
  } catch (const masque::ConfigError& e) {
    return e.what();
  }
  return "";
}

// A JSON grammar in the style of llama.cpp's grammars/json.gbnf (written here, compact).
const std::string kJson = R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::=
  "{" ws (
    string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws ::= | " " | "\n" [ \t]{0,20}   # bounded whitespace
)";

}  // namespace

TEST_CASE("gbnf: literals and classes and groups and repetition", "[grammar]") {
  CHECK(accepts(R"(root ::= "ab" | "cd")", "ab"));
  CHECK(accepts(R"(root ::= "ab" | "cd")", "cd"));
  CHECK_FALSE(accepts(R"(root ::= "ab" | "cd")", "ac"));
  CHECK_FALSE(accepts(R"(root ::= "ab" | "cd")", "a"));
  CHECK(viable(R"(root ::= "ab" | "cd")", "a"));
  CHECK(accepts("root ::= [a-c]+ [^a-c]", "abcx"));
  CHECK_FALSE(accepts("root ::= [a-c]+ [^a-c]", "abca"));
  CHECK(accepts("root ::= .*", "anything at all ✓"));
  CHECK(accepts(R"(root ::= ("x" "y")* "z")", "xyxyz"));
  CHECK_FALSE(accepts(R"(root ::= ("x" "y")* "z")", "xyxz"));
  CHECK(accepts(R"(root ::= "a"? "b")", "b"));
  CHECK(accepts(R"(root ::= "a"? "b")", "ab"));
  // {m,n}: exactly the counts in range.
  const std::string counted = "root ::= [0-9]{2,4}";
  CHECK_FALSE(accepts(counted, "1"));
  CHECK(accepts(counted, "12"));
  CHECK(accepts(counted, "1234"));
  CHECK_FALSE(viable(counted, "12345"));
  CHECK(accepts("root ::= \"a\"{3}", "aaa"));
  CHECK_FALSE(accepts("root ::= \"a\"{3}", "aa"));
  CHECK(accepts("root ::= \"a\"{2,} \"b\"", "aaaaab"));
  CHECK_FALSE(accepts("root ::= \"a\"{2,} \"b\"", "ab"));
  // Escapes and comments.
  CHECK(accepts(R"(root ::= "\x41\u00e9\n\"" # a comment)", "Aé\n\""));
  // Rules referring to later rules, and recursion that consumes a character first.
  CHECK(accepts("root ::= paren\nparen ::= \"(\" paren? \")\"", "((()))"));
  CHECK_FALSE(accepts("root ::= paren\nparen ::= \"(\" paren? \")\"", "(()"));
}

TEST_CASE("gbnf: UTF-8 code points also arriving a byte at a time", "[grammar]") {
  const std::string g = "root ::= [α-ω]+";
  CHECK(accepts(g, "αβγ"));
  CHECK_FALSE(accepts(g, "αbγ"));
  // The first byte of 'β' (0xCE 0xB2) is viable, a lone continuation byte is not.
  CHECK(viable(g, "\xCE"));
  CHECK_FALSE(accepts(g, "\xCE"));
  CHECK_FALSE(viable(g, "\xB2"));
  // 'ж' (0xD0 0xB6) cannot become a Greek letter: rejected at its first byte.
  CHECK_FALSE(viable(g, "\xD0"));
  // Only UTF-8: an overlong form of '{' (F0 80 81 BB), a surrogate (ED A0 80) and a code
  // point past U+10FFFF (F4 90 ...) are rejected as soon as they cannot be anything else.
  CHECK_FALSE(viable("root ::= .*", "\xF0\x80"));
  CHECK_FALSE(viable("root ::= .*", "\xC1\xBB"));
  CHECK_FALSE(viable("root ::= .*", "\xED\xA0"));
  CHECK_FALSE(viable("root ::= .*", "\xF4\x90"));
  CHECK(accepts("root ::= .*", "\xF0\x9F\x98\x80"));  // U+1F600
  // A negated class takes any other code point, multi-byte ones included.
  CHECK(accepts("root ::= [^a]", "ж"));
  CHECK(viable("root ::= [^a]", "\xD0"));
}

TEST_CASE("gbnf: a JSON grammar", "[grammar]") {
  CHECK(accepts(kJson, R"({"a": 1, "b": [true, null, "x\"y"], "c": {"d": -2.5e3}})"));
  CHECK(accepts(kJson, "{}"));
  CHECK_FALSE(accepts(kJson, R"({"a": 1,})"));
  CHECK_FALSE(accepts(kJson, R"({"a": 01})"));
  CHECK_FALSE(accepts(kJson, R"({"a" 1})"));
  CHECK(viable(kJson, R"({"a": [1, 2)"));
  CHECK_FALSE(accepts(kJson, R"({"a": [1, 2)"));
  // Right recursion runs flat: a long string's states repeat instead of growing.
  GrammarMatcher m(masque::grammar::parse_gbnf(kJson, "json.gbnf"));
  auto s = m.step(m.start(), "{\"k\": \"");
  const auto after_one = m.step(s, "x");
  auto t = after_one;
  for (int i = 0; i < 1000; ++i) t = m.step(t, "x");
  CHECK(t == after_one);
  CHECK(m.num_states() < 200);
}

TEST_CASE("gbnf: errors name the file and line and column", "[grammar]") {
  CHECK(parse_error("root ::= foo") == "g.gbnf:1:10: rule 'foo' is used but not defined");
  CHECK(parse_error("main ::= \"a\"") == "g.gbnf:1:1: no rule 'root' (the start rule)");
  CHECK(parse_error("root ::= \"a\"\nroot ::= \"b\"") ==
        "g.gbnf:2:1: rule 'root' is defined twice");
  CHECK(parse_error("root ::= \"abc") == "g.gbnf:1:14: unterminated string literal");
  CHECK(parse_error("root ::= \"\\q\"") == "g.gbnf:1:11: unknown escape '\\q'");
  CHECK(parse_error("root ::= [z-a]") ==
        "g.gbnf:1:14: a character range whose end comes before its start");
  CHECK(parse_error("root ::= \"a\"{3,2}") == "g.gbnf:1:18: a repetition {m,n} with n < m");
  CHECK(parse_error("root ::= * \"a\"") == "g.gbnf:1:10: '*' repeats nothing");
  CHECK(parse_error("root = \"a\"") == "g.gbnf:1:6: expected '::=' after the rule name 'root'");
  CHECK(parse_error("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"")
            .find("rule 'expr' is left-recursive (expr -> expr)") != std::string::npos);
}

TEST_CASE("gbnf: long chains of optional items and deep nesting stay bounded", "[grammar]") {
  // 223 x 223 optional items in a row: expanded without recursion (this overflowed the stack).
  CHECK(accepts("root ::= \"a\" [bd]*? {223} {223}", "abdb"));
  CHECK_FALSE(accepts("root ::= \"a\" [bd]*? {223} {223}", "abc"));
  // Optional items repeated inside a repetition multiply parse-stack frames: refused by name.
  try {
    GrammarMatcher m(masque::grammar::parse_gbnf("root ::= (\"a\"?{3000}){3000}", "q.gbnf"));
    FAIL("a grammar needing 9 million frames in one step was accepted");
  } catch (const masque::ConfigError& e) {
    CHECK(std::string(e.what()).starts_with(
        "q.gbnf: one step of the grammar needs more than 262144"));
  }
  const std::string deep = "root ::= " + std::string(1001, '(') + "\"a\"" + std::string(1001, ')');
  CHECK(parse_error(deep) == "g.gbnf:1:1010: groups nested more than 1000 deep");
  CHECK(accepts("root ::= " + std::string(1000, '(') + "\"a\"" + std::string(1000, ')'), "a"));
}

namespace {

// A tokenizer over a fixed list of pieces (decode concatenates them; id 0 is the end token).
class ListTokenizer final : public masque::Tokenizer {
 public:
  explicit ListTokenizer(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {
    special_.eos = 0;
  }
  masque::Encoding encode(std::string_view, bool) const override { return {}; }
  std::string decode(std::span<const masque::TokenId> ids, bool skip_special) const override {
    std::string out;
    for (masque::TokenId id : ids)
      if (!(skip_special && id == 0)) out += pieces_.at(static_cast<std::size_t>(id));
    return out;
  }
  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(pieces_.size()); }
  std::string id_to_piece(masque::TokenId id) const override { return pieces_.at(id); }
  std::optional<masque::TokenId> piece_to_id(std::string_view) const override { return {}; }
  const masque::SpecialTokens& special_tokens() const override { return special_; }
  bool is_special(masque::TokenId id) const override { return id == 0; }

 private:
  std::vector<std::string> pieces_;
  masque::SpecialTokens special_;
};

std::vector<bool> allowed(const masque::TokenConstraint& c, masque::TokenConstraint::State s,
                          std::size_t vocab) {
  std::vector<float> logits(vocab, 0.0f);
  c.mask(s, logits);
  std::vector<bool> out;
  for (float x : logits) out.push_back(x != std::numeric_limits<float>::lowest());
  return out;
}

}  // namespace

TEST_CASE("grammar constraint: token masks follow the grammar across token boundaries",
          "[grammar]") {
  //                       0       1     2      3     4    5       6     7
  const std::vector<std::string> pieces = {"</s>", "{", "\"a\"", "\":", "1", "}", "{\"", "a"};
  ListTokenizer tokenizer(pieces);
  const masque::TokenId ends[] = {0};
  const auto c =
      masque::grammar_constraint(R"(root ::= "{\"a\":" [0-9]+ "}")", "g", tokenizer, ends);
  auto s = c->start();
  // Only '{' and '{"' start it; no end yet.
  CHECK(allowed(*c, s, pieces.size()) ==
        std::vector<bool>{false, true, false, false, false, false, true, false});
  s = c->advance(s, 6);  // {"
  CHECK(allowed(*c, s, pieces.size()) ==
        std::vector<bool>{false, false, false, false, false, false, false, true});
  s = c->advance(s, 7);  // a
  s = c->advance(s, 3);  // ":
  s = c->advance(s, 4);  // 1
  // More digits or the closing brace.
  CHECK(allowed(*c, s, pieces.size()) ==
        std::vector<bool>{false, false, false, false, true, true, false, false});
  s = c->advance(s, 5);  // }
  // Complete: only the end token.
  CHECK(allowed(*c, s, pieces.size()) ==
        std::vector<bool>{true, false, false, false, false, false, false, false});
  CHECK(c->check("{\"a\":1}").empty());
  CHECK(c->check("{\"a\":}").find("does not match the grammar from byte 5") != std::string::npos);
  CHECK(c->check("{\"a\":1").find("ended before its grammar was complete") != std::string::npos);
  // A token the mask did not allow: a dead end, where only the end token is left.
  const auto dead = c->advance(c->start(), 5);
  CHECK(allowed(*c, dead, pieces.size()) ==
        std::vector<bool>{true, false, false, false, false, false, false, false});
}

TEST_CASE("grammar constraint: a grammar no token can start is refused", "[grammar]") {
  ListTokenizer tokenizer({"</s>", "a", "b"});
  const masque::TokenId ends[] = {0};
  CHECK_THROWS_WITH(masque::grammar_constraint(R"(root ::= "x")", "g.gbnf", tokenizer, ends),
                    Catch::Contains("g.gbnf: no token of the tokenizer's vocabulary can start"));
}

namespace {

// Whether a schema's grammar takes `document`.
bool schema_accepts(const std::string& schema, const std::string& document) {
  const std::string gbnf = masque::json_schema_grammar(schema, "schema.json");
  INFO(gbnf);
  return accepts(gbnf, document);
}

std::string schema_error(const std::string& schema) {
  try {
    (void)masque::json_schema_grammar(schema, "s.json");
  } catch (const masque::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("json schema: the documents its grammar takes", "[grammar]") {
  const std::string person = R"({"type": "object", "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 4},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
      "ok": {"type": "boolean"}},
    "required": ["name", "age"]})";
  CHECK(schema_accepts(person, R"({"name":"Ann","age":3})"));
  CHECK(schema_accepts(person, R"({"name":"Ann","age":-30,"tags":["a","b"],"ok":true})"));
  CHECK(schema_accepts(person, R"({"name":"Ann","age":0,"ok":false})"));
  CHECK(schema_accepts(person, R"({"name":"\"\u00e9","age":1,"tags":[]})"));
  CHECK_FALSE(schema_accepts(person, R"({"age":3,"name":"Ann"})"));    // order
  CHECK_FALSE(schema_accepts(person, R"({"name":"Ann"})"));            // required
  CHECK_FALSE(schema_accepts(person, R"({"name":"","age":3})"));       // minLength
  CHECK_FALSE(schema_accepts(person, R"({"name":"Annie","age":3})"));  // maxLength
  CHECK_FALSE(schema_accepts(person, R"({"name":"Ann","age":3.5})"));  // integer
  CHECK_FALSE(schema_accepts(person, R"({"name":"Ann","age":03})"));
  CHECK_FALSE(schema_accepts(person, R"({"name":"Ann","age":3,"tags":["c"]})"));
  CHECK_FALSE(schema_accepts(person, R"({"name":"Ann","age":3,"tags":["a","a","a"]})"));
  CHECK_FALSE(schema_accepts(person, R"({"name":"Ann","age":3,"x":1})"));  // no extras
  CHECK_FALSE(schema_accepts(person, R"({"name": "Ann","age":3})"));       // compact
  // Every property optional: any ordered subset, commas right.
  const std::string optional = R"({"properties": {"a": {"type": "null"}, "b": {"const": 7},
                                                 "c": {"type": ["number", "string"]}}})";
  for (const char* doc :
       {"{}", R"({"a":null})", R"({"b":7})", R"({"c":"x"})", R"({"a":null,"c":-1.5e3})",
        R"({"b":7,"c":2})", R"({"a":null,"b":7,"c":0})"})
    CHECK(schema_accepts(optional, doc));
  for (const char* doc : {R"({,"b":7})", R"({"a":null,})", R"({"b":8})", R"({"c":true})"})
    CHECK_FALSE(schema_accepts(optional, doc));
  // Arrays with bounds, patterns, any value.
  const std::string codes = R"({"type": "array", "minItems": 2, "maxItems": 3,
                               "items": {"type": "string", "pattern": "^[A-Z]{2}$"}})";
  CHECK(schema_accepts(codes, R"(["DE","FR"])"));
  CHECK(schema_accepts(codes, R"(["DE","FR","IT"])"));
  CHECK_FALSE(schema_accepts(codes, R"(["DE"])"));
  CHECK_FALSE(schema_accepts(codes, R"(["DE","fr"])"));
  CHECK_FALSE(schema_accepts(codes, R"(["DE","FR","IT","ES"])"));
  CHECK(schema_accepts("{}", R"({"any":[1,{"deep":[true,null,"s"]}],"x":-0.5})"));
  CHECK(schema_accepts("true", "[]"));
}

TEST_CASE("json schema: keywords outside the subset are refused by their JSON pointer",
          "[grammar]") {
  CHECK(schema_error(R"({"properties": {"n": {"type": "number", "minimum": 0}}})") ==
        "s.json: /properties/n/minimum: the keyword 'minimum' is not in masque's JSON-schema "
        "subset (docs/instruct.md)");
  CHECK(schema_error(R"({"oneOf": [{"type": "string"}]})").find("s.json: /oneOf: ") == 0);
  CHECK(schema_error(R"({"type": "strng"})").find("s.json: /type: unsupported type \"strng\"") ==
        0);
  CHECK(schema_error(R"({"type": "integer", "maxLength": 3})") ==
        "s.json: /maxLength: 'maxLength' does not apply to this schema's type");
  CHECK(schema_error(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})")
            .find("s.json: /required: names \"b\"") == 0);
  CHECK(schema_error(R"({"type": "string", "pattern": "^a+b$"})").find("s.json: /pattern:") == 0);
  CHECK(schema_error(R"({"type": "object", "additionalProperties": true})")
            .find("/additionalProperties: only false") != std::string::npos);
  CHECK(schema_error("{not json").find("s.json: not JSON:") == 0);
}
