// The bart, mbart and m2m_100 plugins through the CLI: the seq2seq task (encoder-decoder route,
// ids in, ids out) with greedy and beam search, the forced first token (config.json's,
// generation_config.json's, or a record's own prefix instead), a folder run with no pipeline
// (--task seq2seq --model DIR, the plugin picked by model_type), `masque inspect`, and a
// headless BartModel folder, on the folders bart_reference.py generates.
#include <catch2/catch.hpp>

#include "seq2seq_reference.hpp"

using namespace masque::test;
using nlohmann::json;

namespace {

const std::filesystem::path kFixture = MASQUE_BART_FIXTURE;
constexpr const char* kVariants[] = {"bart-tied", "bart-untied", "mbart", "m2m_100", "nllb"};

const json& reference() {
  static const json ref = read_json(kFixture / "reference.json");
  return ref;
}

std::string source_lines(const json& variant) {
  std::string input;
  for (const auto& p : seq2seq::pairs(variant)) input += seq2seq::ids_line(p.source);
  return input;
}

}  // namespace

TEST_CASE("bart families CLI: seq2seq greedy and beam give the reference tokens",
          "[bart][m2m_100][e2e]") {
  for (const char* name : kVariants) {
    DYNAMIC_SECTION(name) {
      const json& variant = reference()[name];
      seq2seq::check_cli_decoding(variant["plugin"], kFixture / name, variant);
    }
  }
}

TEST_CASE("bart families CLI: --task seq2seq --model DIR picks the plugin by model_type",
          "[bart][m2m_100][e2e]") {
  for (const char* name : {"bart-tied", "mbart", "nllb"}) {
    DYNAMIC_SECTION(name) {
      const json& variant = reference()[name];
      const RunResult r =
          run_masque({"run", "--task", "seq2seq", "--model", (kFixture / name).string(),
                      "--input-format", "ids", "--set", "decoder.max_new_tokens=8", "-q"},
                     source_lines(variant));
      INFO(r.err);
      REQUIRE(r.exit_code == 0);
      const auto out = parse_jsonl(r.out);
      REQUIRE(out.size() == variant["pairs"].size());
      for (std::size_t i = 0; i < out.size(); ++i)
        CHECK(out[i]["tokens"] == variant["pairs"][i]["greedy_ids"]);
    }
  }
}

TEST_CASE("bart families CLI: a record's target prefix replaces the forced first token",
          "[bart][e2e]") {
  // mbart forces 87 first; a prefix [87] gives the same output, [5] starts elsewhere.
  const json& variant = reference()["mbart"];
  const auto source = variant["pairs"][1]["source"].get<std::vector<masque::TokenId>>();
  std::string ids;
  for (const auto id : source) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const std::string input = R"({"ids": [)" + ids + R"(], "prefix": [87]})" + "\n" + R"({"ids": [)" +
                            ids + R"(], "prefix": [5]})" + "\n";
  const RunResult r =
      run_masque({"run", "--task", "seq2seq", "--model", (kFixture / "mbart").string(),
                  "--input-format", "jsonl", "--set", "decoder.max_new_tokens=8", "-q"},
                 input);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 2);
  CHECK(out[0]["tokens"] == variant["pairs"][1]["greedy_ids"]);
  CHECK(out[1]["tokens"][0] == 5);
}

TEST_CASE("bart families CLI: masque inspect describes the folders", "[bart][m2m_100][e2e]") {
  for (const char* name : {"bart-tied", "mbart", "m2m_100", "nllb"}) {
    DYNAMIC_SECTION(name) {
      const RunResult r = run_masque({"inspect", (kFixture / name).string(), "--json"});
      INFO(r.err);
      REQUIRE(r.exit_code == 0);
      const json j = json::parse(r.out);
      INFO(j.dump(2));
      CHECK(j["model_type"] == reference()[name]["plugin"]);
      CHECK(j["head"]["kind"] == "vocabulary");
      CHECK(j["head"]["outputs"] == 90);
      CHECK(r.out.find("forced_bos") != std::string::npos);
    }
  }
  const RunResult headless = run_masque({"inspect", (kFixture / "bart-model").string(), "--json"});
  INFO(headless.err);
  REQUIRE(headless.exit_code == 0);
  CHECK(json::parse(headless.out)["head"]["kind"] == "none");
}

// The folder loads (a task that needs no logits could use it); each record of seq2seq fails.
TEST_CASE("bart CLI: seq2seq on a BartModel folder names the missing head tensor",
          "[bart][e2e][errors]") {
  const RunResult r =
      run_masque({"run", "--task", "seq2seq", "--model", (kFixture / "bart-model").string(),
                  "--input-format", "ids", "-q"},
                 "5 6 2\n7 2\n");
  INFO(r.err);
  CHECK(r.exit_code == 1);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 2);
  for (const auto& line : out)
    CHECK_THAT(line["error"].get<std::string>(),
               Catch::Contains("no tensor 'model.shared.weight'"));
}
