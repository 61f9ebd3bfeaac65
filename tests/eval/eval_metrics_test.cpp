// masque eval's metrics: edit distance against a second, independent implementation, the
// closest-reference rule, WER/TER sums, source lengths and buckets, and the two reports.
#include <functional>
#include <random>

#include <catch2/catch.hpp>

#include "eval_metrics.hpp"
#include "masque/error.hpp"

using namespace masque::eval;
using Catch::Matchers::Contains;

namespace {

Tokens chars(const std::string& s) {
  Tokens t;
  for (char c : s) t.emplace_back(1, c);
  return t;
}

// The textbook recursion with memoisation over the full table: a different algorithm from the
// one-row version under test.
std::size_t reference_distance(const Tokens& a, const Tokens& b) {
  std::vector<std::vector<long>> memo(a.size() + 1, std::vector<long>(b.size() + 1, -1));
  std::function<long(std::size_t, std::size_t)> d = [&](std::size_t i, std::size_t j) -> long {
    if (i == 0) return static_cast<long>(j);
    if (j == 0) return static_cast<long>(i);
    long& m = memo[i][j];
    if (m >= 0) return m;
    m = std::min({d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1])});
    return m;
  };
  return static_cast<std::size_t>(d(a.size(), b.size()));
}

}  // namespace

TEST_CASE("eval metrics: edit distance, known cases", "[eval]") {
  CHECK(edit_distance({}, {}) == 0);
  CHECK(edit_distance(chars("abc"), {}) == 3);
  CHECK(edit_distance({}, chars("abcd")) == 4);
  CHECK(edit_distance(chars("kitten"), chars("sitting")) == 3);
  CHECK(edit_distance(chars("ab"), chars("ba")) == 2);  // no transpositions
  CHECK(edit_distance({"AH", "B"}, {"AH", "P"}) == 1);  // tokens, not characters
  CHECK(edit_distance({"AH"}, {"A", "H"}) == 2);
}

TEST_CASE("eval metrics: edit distance equals the full-table recursion", "[eval]") {
  std::mt19937 rng(19);
  std::uniform_int_distribution<int> length(0, 9), symbol(0, 3);
  for (int trial = 0; trial < 2000; ++trial) {
    Tokens a, b;
    for (int n = length(rng); n > 0; --n) a.push_back(std::string(1, 'a' + symbol(rng)));
    for (int n = length(rng); n > 0; --n) b.push_back(std::string(1, 'a' + symbol(rng)));
    INFO(trial);
    REQUIRE(edit_distance(a, b) == reference_distance(a, b));
    REQUIRE(edit_distance(a, b) == edit_distance(b, a));
  }
}

TEST_CASE("eval metrics: a word is scored against its closest reference", "[eval]") {
  const std::vector<Tokens> refs = {{"R", "IY", "D"}, {"R", "EH", "D"}};
  WordScore s = score_word({"R", "EH", "D"}, refs);
  CHECK(s.correct);
  CHECK(s.edits == 0);
  CHECK(s.ref_length == 3);
  s = score_word({"R", "EH"}, refs);  // 1 edit from the second, 2 from the first
  CHECK_FALSE(s.correct);
  CHECK(s.edits == 1);
  // A tie: 1 edit from both; the first listed is the closest, so its length counts.
  s = score_word({"K", "AE"}, {{"K", "AE", "T"}, {"K", "AE", "T", "S"}, {"K"}});
  CHECK(s.edits == 1);
  CHECK(s.ref_length == 3);
  s = score_word({}, {{"AH", "B"}});  // an empty hypothesis: every token deleted
  CHECK(s.edits == 2);
  CHECK(s.ref_length == 2);
}

TEST_CASE("eval metrics: source length and buckets", "[eval]") {
  CHECK(source_length("masque", LengthUnit::automatic) == 6);
  CHECK(source_length("m a s q u e", LengthUnit::automatic) == 6);
  CHECK(source_length("北京", LengthUnit::automatic) == 2);  // code points, not bytes
  CHECK(source_length("a b", LengthUnit::chars) == 3);
  CHECK(source_length("ab cd", LengthUnit::tokens) == 2);
  CHECK(source_length("abc", LengthUnit::tokens) == 1);
  CHECK_THROWS_WITH(parse_length_unit("bytes"), Contains("'bytes' is not one of"));

  const std::vector<Bucket> b = make_buckets({4, 6, 7});
  REQUIRE(b.size() == 4);
  CHECK(b[0].label() == "1-4");
  CHECK(b[1].label() == "5-6");
  CHECK(b[2].label() == "7");
  CHECK(b[3].label() == "8+");
  CHECK(make_buckets({}).front().label() == "1+");
  CHECK(parse_bounds("4,6,8") == std::vector<std::size_t>{4, 6, 8});
  CHECK(parse_bounds("").empty());
  for (const char* bad : {"4,4", "6,4", "a", "-1", "0", "4,,6", "4,", "4.5"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_bounds(bad), Contains("increasing positive integers"));
  }
}

TEST_CASE("eval metrics: WER and TER summed over words, overall and by length", "[eval]") {
  const References refs = parse_references(
      "a\tEY\tAH\n"             // length 1: right (second reference)
      "read\tR IY D\tR EH D\n"  // length 4: R EH -> 1 edit of 3
      "cat\tK AE T\n"           // length 3: empty -> 3 edits of 3
      "masque\tM AE S K\n",     // length 6: right
      "refs.tsv");
  Hypotheses hyps;
  hyps.tokens = {{"AH"}, {"R", "EH"}, {}, {"M", "AE", "S", "K"}};
  hyps.error_records = 1;
  const Report r = evaluate(refs, hyps, {3, 5}, LengthUnit::automatic);
  CHECK(r.overall.words == 4);
  CHECK(r.overall.correct == 2);
  CHECK(r.overall.wer() == Approx(0.5));
  CHECK(r.overall.edits == 4);
  CHECK(r.overall.ref_tokens == 1 + 3 + 3 + 4);
  CHECK(r.overall.ter() == Approx(4.0 / 11.0));
  REQUIRE(r.buckets.size() == 3);
  CHECK(r.buckets[0].tally.words == 2);  // a, cat
  CHECK(r.buckets[0].tally.correct == 1);
  CHECK(r.buckets[0].tally.edits == 3);
  CHECK(r.buckets[0].tally.ref_tokens == 4);
  CHECK(r.buckets[1].tally.words == 1);  // read
  CHECK(r.buckets[1].tally.wer() == Approx(1.0));
  CHECK(r.buckets[2].tally.words == 1);  // masque
  CHECK(r.buckets[2].tally.wer() == Approx(0.0));

  const nlohmann::ordered_json j = to_json(r);
  CHECK(j["words"] == 4);
  CHECK(j["correct"] == 2);
  CHECK(j["wer"].get<double>() == Approx(0.5));
  CHECK(j["ter"].get<double>() == Approx(4.0 / 11.0));
  CHECK(j["error_records"] == 1);
  REQUIRE(j["by_length"].size() == 3);
  CHECK(j["by_length"][0]["length"] == "1-3");
  CHECK(j["by_length"][2]["max"].is_null());
  CHECK(j["by_length"][1]["edits"] == 1);
  // An empty bucket has no rate rather than a perfect one.
  const nlohmann::ordered_json none = to_json(evaluate(refs, hyps, {1, 2}, LengthUnit::chars));
  CHECK(none["by_length"][1]["words"] == 0);
  CHECK(none["by_length"][1]["wer"].is_null());
  CHECK(none["by_length"][1]["ter"].is_null());

  const std::string text = format_text(r, "phone");
  CHECK_THAT(text, Contains("ref phones") && Contains("PER %"));
  CHECK_THAT(text,
             Contains("all                   4        2    50.00         4          11    36.36"));
  CHECK_THAT(text, Contains("length 6+"));
  CHECK_THAT(text, Contains("1 hypotheses were error records"));
}

TEST_CASE("eval metrics: empty buckets print dashes, a key without tokens is an error", "[eval]") {
  const References refs = parse_references("ab\tA B\n", "r.tsv");
  Hypotheses hyps;
  hyps.tokens = {{"A", "B"}};
  const std::string text = format_text(evaluate(refs, hyps, {1}, LengthUnit::chars), "token");
  CHECK_THAT(text, Contains("length 1              0        -"));
  CHECK_THAT(text, Contains("TER %"));
  const References blank = parse_references("   \tA\n", "r.tsv");
  CHECK_THROWS_WITH(evaluate(blank, hyps, {}, LengthUnit::tokens),
                    Contains("r.tsv:1: the key has no source tokens"));
}
