// `masque eval` through the binary: text and JSON reports, stdin, keyed TSV, the real output of
// `masque run` (aren-transliteration, greedy), and bad input as exit code 2 naming file and line.
#include <catch2/catch.hpp>

#include "test_support.hpp"

using namespace masque::test;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// Three words: one right (its second reference), one 1 edit from a 3-token reference, one
// empty hypothesis against a 2-token reference: WER 2/3, TER (0 + 1 + 2) / (1 + 3 + 2) = 1/2.
const char* kRefs = "a\tEY\tAH\nread\tR IY D\tR EH D\nbe\tB IY\n";
const char* kHyps = "AH\nR EH\n\n";

std::filesystem::path write(const std::filesystem::path& dir, const char* name,
                            const std::string& text) {
  write_file(dir / name, text);
  return dir / name;
}

}  // namespace

TEST_CASE("eval cli: text and JSON reports of the same scores", "[e2e][eval]") {
  const auto dir = scratch_dir("eval_cli_reports");
  const auto refs = write(dir, "refs.tsv", kRefs).string();
  const auto hyp = write(dir, "hyp.txt", kHyps).string();

  auto r = run_masque({"eval", "--ref", refs, hyp, "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  CHECK(j["words"] == 3);
  CHECK(j["correct"] == 1);
  CHECK(j["wer"].get<double>() == Approx(2.0 / 3.0));
  CHECK(j["edits"] == 3);
  CHECK(j["ref_tokens"] == 6);
  CHECK(j["ter"].get<double>() == Approx(0.5));
  CHECK(j["error_records"] == 0);
  REQUIRE(j["by_length"].size() == 6);  // default buckets 4,6,8,10,12: 1-4 ... 13+
  CHECK(j["by_length"][0]["length"] == "1-4");
  CHECK(j["by_length"][0]["words"] == 3);

  // The same through stdin, as a table with phones.
  r = run_masque({"eval", "--ref", refs, "--token-name", "phone", "--buckets", "1,2"}, kHyps);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("PER %") && Contains("ref phones"));
  CHECK_THAT(r.out,
             Contains("all                   3        1    66.67         3           6    50.00"));
  CHECK_THAT(r.out, Contains("length 1              1        1     0.00         0           1"));
  CHECK_THAT(r.out, Contains("length 3+             1        0   100.00         1           3"));

  // Keyed TSV in another order gives the same numbers.
  const auto keyed = write(dir, "keyed.tsv", "be\t\nread\tR EH\na\tAH\n").string();
  r = run_masque({"eval", "--ref", refs, "--hyp-format", "tsv", keyed, "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(r.out)["ter"].get<double>() == Approx(0.5));
}

TEST_CASE("eval cli: scores the JSON lines of a real masque run", "[e2e][eval]") {
  // aren-transliteration greedy: samir, nadia, rami (examples.jsonl in the model folder).
  const std::string sources = "س م ي ر\nن ا د ي ة\nر ا م ي\n";
  auto run = run_masque({"run", (source_dir() / "pipelines/translate.yaml").string(), "--set",
                         "decoder.beam_size=1", "-q"},
                        sources);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const auto dir = scratch_dir("eval_cli_run");
  const auto hyp = write(dir, "hyp.jsonl", run.out).string();
  // samir is right (second reference), nadia misses a y (1 of 6), rami has y for i (1 of 4).
  const auto refs = write(dir, "refs.tsv",
                          "س م ي ر\ts a m e e r\ts a m i r\n"
                          "ن ا د ي ة\tn a d i y a\n"
                          "ر ا م ي\tr a m y\n")
                        .string();
  auto r = run_masque({"eval", "--ref", refs, hyp, "--json", "--buckets", "4"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  CHECK(j["words"] == 3);
  CHECK(j["correct"] == 1);
  CHECK(j["edits"] == 2);
  CHECK(j["ref_tokens"] == 5 + 6 + 4);
  CHECK(j["by_length"][0]["words"] == 2);  // 4 source tokens: samir, rami
  CHECK(j["by_length"][1]["words"] == 1);  // 5: nadia
  CHECK(j["by_length"][1]["edits"] == 1);
}

TEST_CASE("eval cli: bad input is exit code 2 naming the file and line", "[e2e][eval]") {
  const auto dir = scratch_dir("eval_cli_errors");
  const auto refs = write(dir, "refs.tsv", kRefs).string();
  struct Case {
    std::vector<std::string> args;
    std::string input;
    std::string message;
  };
  const auto empty = write(dir, "empty.txt", "").string();
  const auto short_hyp = write(dir, "short.txt", "AH\nR EH\n").string();
  const auto long_hyp = write(dir, "long.txt", "AH\nR EH\nB IY\nX\n").string();
  const auto bad_json = write(dir, "bad.jsonl", "{\"text\":\"AH\"}\n{oops\n{}\n").string();
  const auto bad_refs = write(dir, "bad_refs.tsv", "a\tEY\nread\n").string();
  const std::vector<Case> cases = {
      {{"eval", empty}, "", "missing --ref"},
      {{"eval", "--ref", refs, empty}, "", empty + ": no hypotheses (the file is empty)"},
      {{"eval", "--ref", refs}, "", "<stdin>: no hypotheses"},
      {{"eval", "--ref", refs, short_hyp}, "", "no hypothesis for 'be' (" + refs + ":3)"},
      {{"eval", "--ref", refs, long_hyp}, "", long_hyp + ":4: more hypotheses than the 3 words"},
      {{"eval", "--ref", refs, bad_json}, "", bad_json + ":2: not a JSON object"},
      {{"eval", "--ref", bad_refs, short_hyp}, "", bad_refs + ":2: no reference after the key"},
      {{"eval", "--ref", empty, short_hyp}, "", empty + ": no references"},
      {{"eval", "--ref", (dir / "missing.tsv").string()}, "", "missing.tsv: cannot open"},
      {{"eval", "--ref", refs, dir.string()}, "", dir.string() + ": is a directory"},
      {{"eval", "--ref", dir.string(), short_hyp}, "", dir.string() + ": is a directory"},
      {{"eval", "--ref", refs, "--buckets", "6,4"}, kHyps, "--buckets: '6,4'"},
      {{"eval", "--ref", refs, "--hyp-format", "xml"}, kHyps, "'xml' is not one of"},
      {{"eval", "--ref", refs, "--bogus"}, kHyps, "unrecognised option"},
  };
  for (const auto& c : cases) {
    INFO(c.message);
    const auto r = run_masque(c.args, c.input);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(c.message));
    CHECK(r.out.empty());
  }
}

TEST_CASE("eval cli: --help documents the formats and the masque usage lists eval", "[e2e][eval]") {
  auto r = run_masque({"eval", "--help"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("--hyp-format") && Contains("key<TAB>ref 1<TAB>ref 2") &&
                        Contains("--field") && Contains("--buckets") && Contains("--json"));
  r = run_masque({"--help"});
  CHECK_THAT(r.out, Contains("eval "));
}
