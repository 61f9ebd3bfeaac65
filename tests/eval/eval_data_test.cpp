// masque eval's readers: references with merged alternatives, hypotheses as text, JSON lines
// and keyed TSV, and every bad input as an error naming the file and line.
#include <catch2/catch.hpp>

#include "eval_data.hpp"
#include "masque/error.hpp"

using namespace masque::eval;
using Catch::Matchers::Contains;
using masque::ConfigError;

namespace {

References refs_abc() {
  return parse_references("a\tEY\tAH\nb\tB IY\nc\tS IY\n", "refs.tsv");
}

Hypotheses hyps(const std::string& text, HypFormat format = HypFormat::automatic,
                const std::string& field = "text") {
  return parse_hypotheses(text, "hyp", format, field, refs_abc());
}

}  // namespace

TEST_CASE("eval data: tokens are split on spaces, empty fields skipped", "[eval]") {
  CHECK(split_tokens("AH  B ") == Tokens{"AH", "B"});
  CHECK(split_tokens("") == Tokens{});
  CHECK(split_tokens("   ") == Tokens{});
  CHECK(split_tokens("ك ت") == Tokens{"ك", "ت"});
}

TEST_CASE("eval data: references merge a repeated key and drop repeated alternatives", "[eval]") {
  // The g2p-data.sh pairs file: one line per pronunciation, the key repeats; CRLF tolerated.
  const References r = parse_references(
      "r e a d\tR IY D\r\nr e d\tR EH D\nr e a d\tR EH D\tR IY D\nx\tK S", "pairs.tsv");
  REQUIRE(r.words.size() == 3);
  CHECK(r.words[0].key == "r e a d");
  CHECK(r.words[0].line == 1);
  CHECK(r.words[0].alternatives == std::vector<Tokens>{{"R", "IY", "D"}, {"R", "EH", "D"}});
  CHECK(r.words[1].key == "r e d");
  CHECK(r.words[1].line == 2);
  CHECK(r.words[2].alternatives == std::vector<Tokens>{{"K", "S"}});
  CHECK(r.index.at("x") == 2);
}

TEST_CASE("eval data: bad references name the file and line", "[eval]") {
  CHECK_THROWS_WITH(parse_references("", "r.tsv"), Contains("r.tsv: no references"));
  CHECK_THROWS_WITH(parse_references("a\tEY\n\nb\tB\n", "r.tsv"), Contains("r.tsv:2: empty line"));
  CHECK_THROWS_WITH(parse_references("a\tEY\nb\n", "r.tsv"),
                    Contains("r.tsv:2: no reference after the key 'b'"));
  CHECK_THROWS_WITH(parse_references("a\tEY\t \n", "r.tsv"),
                    Contains("r.tsv:1: reference 2 of 'a' is empty"));
  CHECK_THROWS_WITH(parse_references("\tEY\n", "r.tsv"), Contains("r.tsv:1: empty key"));
  CHECK_THROWS_AS(parse_references("a\t\n", "r.tsv"), ConfigError);
}

TEST_CASE("eval data: text hypotheses are matched by line", "[eval]") {
  const Hypotheses h = hyps("EY\n\nS IY\n");
  CHECK(h.tokens == std::vector<Tokens>{{"EY"}, {}, {"S", "IY"}});
  CHECK(h.error_records == 0);
  // No final newline is the same.
  CHECK(hyps("EY\nB\nS").tokens.size() == 3);
  CHECK_THROWS_WITH(hyps("EY\nB IY\n"), Contains("hyp: 2 hypotheses for 3 words of refs.tsv") &&
                                            Contains("no hypothesis for 'c' (refs.tsv:3)"));
  CHECK_THROWS_WITH(hyps("EY\nB\nC\nD\n"),
                    Contains("hyp:4: more hypotheses than the 3 words of refs.tsv"));
  CHECK_THROWS_WITH(hyps("", HypFormat::text), Contains("hyp: no hypotheses (the file is empty)"));
  CHECK_THROWS_WITH(hyps("EY\na\tB\nC\n", HypFormat::text), Contains("hyp:2: a tab"));
}

TEST_CASE("eval data: masque run's JSON lines, error records scored empty", "[eval]") {
  const std::string out = R"({"id":0,"text":"EY","tokens":[7],"score":-0.1})"
                          "\n"
                          R"({"id":1,"error":"vocab: the token '1' is not in the vocabulary"})"
                          "\n"
                          R"({"id":2,"text":"S  IY","tokens":[9,10],"score":-0.2})"
                          "\n";
  const Hypotheses h = hyps(out);  // auto-detected
  CHECK(h.tokens == std::vector<Tokens>{{"EY"}, {}, {"S", "IY"}});
  CHECK(h.error_records == 1);

  SECTION("another field, an array of tokens, a JSON pointer") {
    CHECK(hyps(R"({"p":["EY"]})"
               "\n"
               R"({"p":["B","IY"]})"
               "\n"
               R"({"p":"S IY"})",
               HypFormat::jsonl, "p")
              .tokens[1] == Tokens{"B", "IY"});
    const std::string nbest = R"({"hypotheses":[{"text":"X"},{"text":"EY"}]})"
                              "\n"
                              R"({"hypotheses":[{"text":"X"},{"text":"B"}]})"
                              "\n"
                              R"({"hypotheses":[{"text":"X"},{"text":"S"}]})"
                              "\n";
    CHECK(hyps(nbest, HypFormat::jsonl, "/hypotheses/1/text").tokens ==
          std::vector<Tokens>{{"EY"}, {"B"}, {"S"}});
    CHECK_THROWS_WITH(hyps(nbest, HypFormat::jsonl, "/hypotheses/2/text"),
                      Contains("hyp:1: no field '/hypotheses/2/text'"));
    CHECK_THROWS_WITH(hyps(nbest, HypFormat::jsonl, "/hypotheses/x/text"),
                      Contains("hyp:1: no field '/hypotheses/x/text'"));
    CHECK_THROWS_WITH(hyps(nbest, HypFormat::jsonl, "/hypotheses/~9"),
                      Contains("--field '/hypotheses/~9': not a JSON pointer"));
  }
  SECTION("bad records") {
    CHECK_THROWS_WITH(hyps("{\"text\":\"EY\"}\nnot json\n{}\n", HypFormat::jsonl),
                      Contains("hyp:2: not a JSON object: not json"));
    CHECK_THROWS_WITH(hyps("{\"text\":\"EY\"}\n{\"txt\":\"B\"}\n{}\n"),
                      Contains("hyp:2: no field 'text' (choose one with --field)"));
    CHECK_THROWS_WITH(hyps("{\"text\":1}\n{}\n{}\n"),
                      Contains("hyp:1: field 'text' is neither a string nor an array"));
    CHECK_THROWS_WITH(hyps("{\"text\":[\"A\",2]}\n{}\n{}\n"),
                      Contains("hyp:1: field 'text' is an array with a non-string"));
    // A lost record shows in the ids even when the count happens to match.
    CHECK_THROWS_WITH(hyps("{\"id\":0,\"text\":\"A\"}\n{\"id\":2,\"text\":\"B\"}\n{\"id\":3}\n"),
                      Contains("hyp:2: record id 2 where 1 was expected"));
    CHECK_THROWS_WITH(hyps("{\"id\":0,\"text\":\"A\"}\n"),
                      Contains("hyp: 1 hypotheses for 3 words") && Contains("'b'"));
  }
}

TEST_CASE("eval data: keyed TSV hypotheses in any order", "[eval]") {
  const Hypotheses h = hyps("c\tS IY\na\tEY\nb\n", HypFormat::tsv);
  CHECK(h.tokens == std::vector<Tokens>{{"EY"}, {}, {"S", "IY"}});
  CHECK_THROWS_WITH(hyps("c\tS\nz\tZ\n", HypFormat::tsv),
                    Contains("hyp:2: the key 'z' is not in refs.tsv"));
  CHECK_THROWS_WITH(hyps("c\tS\na\tEY\nc\tS\n", HypFormat::tsv),
                    Contains("hyp:3: a second hypothesis for 'c' (the first is on line 1)"));
  CHECK_THROWS_WITH(hyps("c\tS\na\tEY\n", HypFormat::tsv),
                    Contains("hyp: no hypothesis for 'b' (refs.tsv:2)"));
  CHECK_THROWS_WITH(hyps("c\tS\tX\n", HypFormat::tsv), Contains("hyp:1: more than two columns"));
}

TEST_CASE("eval data: format names", "[eval]") {
  CHECK(parse_hyp_format("auto") == HypFormat::automatic);
  CHECK(parse_hyp_format("tsv") == HypFormat::tsv);
  CHECK_THROWS_WITH(parse_hyp_format("csv"), Contains("'csv' is not one of auto, text"));
  CHECK_THROWS_WITH(read_whole_file("/nonexistent/refs.tsv"),
                    Contains("/nonexistent/refs.tsv: cannot open"));
}
