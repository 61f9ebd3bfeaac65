#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

#include "io/records.hpp"
#include "masque/error.hpp"
#include "masque/train/dataset.hpp"
#include "test_support.hpp"

using namespace masque;
using namespace masque::train;
namespace fs = std::filesystem;

namespace {

// An objective's preparation in miniature: a JSON record with source and target, one id per
// character; an empty target cannot be trained on.
Example prepare(const Record& r) {
  if (!r.fields.contains("target") || !r.fields["target"].is_string())
    throw RecordError("no 'target' field");
  const std::string target = r.fields["target"];
  if (target.empty()) throw RecordError("empty target");
  Example e;
  for (char c : r.fields.value("source", std::string())) e.ids.push_back(c);
  for (char c : target) e.target.push_back(c);
  return e;
}

}  // namespace

TEST_CASE("training data: every unusable line is skipped, reported with its number and counted") {
  const fs::path dir = test::scratch_dir("dataset_skips");
  const fs::path file = dir / "train.jsonl";
  test::write_file(file,
                   "{\"source\": \"ab\", \"target\": \"xy\"}\n"   // 1 ok
                   "not json\n"                                   // 2
                   "{\"source\": \"ab\", \"target\": \"\"}\n"     // 3 empty target
                   "{\"source\": \"\xff\", \"target\": \"x\"}\n"  // 4 invalid UTF-8
                   "{\"source\": \"c\", \"target\": \"z\"}\n");   // 5 ok
  std::vector<std::string> reported;
  SkipLog skips(file.string(), 10, [&](const std::string& line) { reported.push_back(line); });
  InputOptions input;
  input.format = InputFormat::jsonl;
  input.field = "source";  // the reader's text; the objective reads both fields
  const std::vector<Example> examples = load_examples(file.string(), input, prepare, skips);

  REQUIRE(examples.size() == 2);
  CHECK(examples[0].line == 1);
  CHECK(examples[1].line == 5);
  REQUIRE(skips.count() == 3);
  CHECK(skips.skipped()[0].line == 2);
  CHECK(skips.skipped()[1].line == 3);
  CHECK(skips.skipped()[2].line == 4);
  REQUIRE(reported.size() == 3);
  CHECK_THAT(reported[1], Catch::Contains("train.jsonl:3: skipped: empty target"));
  CHECK_THAT(reported[2], Catch::Contains(":4: skipped: invalid UTF-8"));
  CHECK_THAT(skips.summary(5), Catch::Contains("3 of 5 records skipped"));
  CHECK_THAT(skips.summary(5), Catch::Contains("1 empty target"));

  // Past max_bad_records the run stops, naming the file and the limit.
  SkipLog strict(file.string(), 1, [](const std::string&) {});
  CHECK_THROWS_WITH(load_examples(file.string(), input, prepare, strict),
                    Catch::Contains("more than max_bad_records (1)") && Catch::Contains("line 3"));
  // A TSV with a header counts its header line.
  const fs::path tsv = dir / "train.tsv";
  test::write_file(tsv, "source\ttarget\nab\txy\nab\t\n");
  InputOptions tsv_input;
  tsv_input.format = InputFormat::tsv;
  tsv_input.field = "source";
  SkipLog tsv_skips(tsv.string(), -1, [](const std::string&) {});
  const auto tsv_examples = load_examples(tsv.string(), tsv_input, prepare, tsv_skips);
  REQUIRE(tsv_examples.size() == 1);
  CHECK(tsv_examples[0].line == 2);
  REQUIRE(tsv_skips.count() == 1);
  CHECK(tsv_skips.skipped()[0].line == 3);
  CHECK_THROWS_WITH(load_examples((dir / "missing.tsv").string(), tsv_input, prepare, tsv_skips),
                    Catch::Contains("missing.tsv: cannot open"));
}

TEST_CASE("epoch order: file order without shuffling, a seeded permutation with it") {
  const auto plain = epoch_order(7, 1, 0, false);
  CHECK(plain == std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5, 6});
  const auto a = epoch_order(1000, 42, 3, true);
  CHECK(a == epoch_order(1000, 42, 3, true));  // reproducible
  CHECK(a != epoch_order(1000, 42, 4, true));  // another epoch, another order
  CHECK(a != epoch_order(1000, 43, 3, true));  // another seed, another order
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::uint32_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0u);
  CHECK(sorted == identity);
  // Fixed numbers: the generator is splitmix64, the same everywhere.
  CHECK(masque::SplitMix64(0).next() == 0xE220A8397B1DCDAFull);
}

TEST_CASE("batches: batch k is examples kN..kN+N-1, and a token budget packs by padded size") {
  std::vector<Example> examples(10);
  for (std::size_t i = 0; i < examples.size(); ++i) examples[i].ids.assign(i + 1, 1);
  const auto order = epoch_order(10, 0, 0, false);
  const auto by_count = cut_batches(order, examples, 4, 0);
  REQUIRE(by_count.size() == 3);
  CHECK((by_count[0].begin == 0 && by_count[0].end == 4));
  CHECK((by_count[2].begin == 8 && by_count[2].end == 10));
  // Budget 12 padded tokens: [1,2,3] (3x3=9), [4,5] (2x5=10), [6], [7], [8], [9], [10].
  const auto by_tokens = cut_batches(order, examples, 0, 12);
  REQUIRE(by_tokens.size() == 7);
  CHECK((by_tokens[0].begin == 0 && by_tokens[0].end == 3));
  CHECK((by_tokens[1].begin == 3 && by_tokens[1].end == 5));
  CHECK((by_tokens[6].begin == 9 && by_tokens[6].end == 10));  // from 6 on, two are over 12
  // batch_size caps a token-budget batch too.
  CHECK(cut_batches(order, examples, 2, 1000).size() == 5);
  CHECK_THROWS_AS(cut_batches(order, examples, 0, 0), ConfigError);
}
