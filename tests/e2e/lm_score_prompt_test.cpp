// lm-score's conditional form on the stories260k Llama model: with a prompt, only the text's
// tokens are scored, and each equals the same token's log-prob in the unconditional score of
// prompt + text (batched with records of other lengths, and one at a time).
#include <catch2/catch.hpp>

#include <cmath>

#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;

TEST_CASE("lm-score: a prompt conditions the text, only the text is scored", "[e2e][lm]") {
  const std::string pipeline = (source_dir() / "pipelines/lm-score.yaml").string();
  const std::vector<std::string> texts = {"Once upon a time, there was a little girl named Lily.",
                                          "The cat sat on the mat.",
                                          "Tom and Sue went to the park to play."};
  std::string plain;
  for (const auto& t : texts) plain += json({{"text", t}}).dump() + "\n";
  auto full = run_masque(
      {"run", pipeline, "-q", "--input-format", "jsonl", "--set", "task.token_logprobs=true"},
      plain);
  REQUIRE(full.exit_code == 0);
  const auto whole = parse_jsonl(full.out);
  // Split each record's ids after k tokens: prompt = ids[:k], text = ids[k:].
  std::string conditional;
  std::vector<std::size_t> splits;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    const auto ids = whole[i]["ids"].get<std::vector<int>>();
    const std::size_t k = 2 + i * 3;
    REQUIRE(k < ids.size());
    splits.push_back(k);
    conditional += json({{"prompt", std::vector<int>(ids.begin(), ids.begin() + k)},
                         {"ids", std::vector<int>(ids.begin() + k, ids.end())}})
                       .dump() +
                   "\n";
  }
  for (const char* batch : {"32", "1"}) {
    INFO("max_batch_size " << batch);
    auto r = run_masque(
        {"run", pipeline, "-q", "--input-format", "jsonl", "--set", "task.token_logprobs=true",
         "--set", std::string("task.max_batch_size=") + batch},
        conditional);
    REQUIRE(r.exit_code == 0);
    const auto out = parse_jsonl(r.out);
    REQUIRE(out.size() == whole.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      const auto& want = whole[i]["token_logprobs"];  // predicts ids[1..]
      const auto& got = out[i]["token_logprobs"];     // predicts ids[k..]
      const std::size_t k = splits[i];
      REQUIRE(got.size() == want.size() - (k - 1));
      double nll = 0;
      for (std::size_t t = 0; t < got.size(); ++t) {
        CHECK(std::abs(got[t].get<double>() - want[t + k - 1].get<double>()) < 1e-5);
        nll -= got[t].get<double>();
      }
      CHECK(out[i]["prompt_tokens"] == k);
      CHECK(std::abs(out[i]["nll"].get<double>() - nll) < 1e-9);
      CHECK(std::abs(out[i]["ppl"].get<double>() - std::exp(nll / got.size())) < 1e-9);
    }
  }
  // Text prompts too; an empty text after a prompt is an error record.
  auto text =
      run_masque({"run", pipeline, "-q", "--input-format", "tsv", "--columns", "prompt,text"},
                 "Once upon a time\tthere was a dog.\nOnce upon a time\t\n");
  CHECK(text.exit_code == 1);
  const auto lines = parse_jsonl(text.out);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["prompt_tokens"].get<int>() > 1);
  CHECK(lines[0]["nll"].get<double>() > 0);
  CHECK(lines[1]["error"] == "nothing to score: the text after the prompt has no tokens");
}

TEST_CASE("lm-score: a mask that shows a position the token it predicts is flagged", "[e2e][lm]") {
  const std::string pipeline = (source_dir() / "pipelines/lm-score.yaml").string();
  const auto dir = scratch_dir("lm_score_leak");
  const auto summary_file = dir / "summary.json";
  const std::string input = "Once upon a time\nThe cat sat on the mat.\n";
  auto score = [&](const std::string& mask) {
    auto r = run_masque(
        {"run", pipeline, "--set", "mask.plugin=" + mask, "--summary", summary_file.string()},
        input);
    REQUIRE(r.exit_code == 0);
    return std::pair{r.err, json::parse(read_file(summary_file))["task"]};
  };
  const auto [causal_err, causal] = score("causal");
  CHECK(causal_err.find("warning") == std::string::npos);
  CHECK(causal.count("positions_seeing_target") == 0);
  // Bidirectional: every scored position sees the next token.
  const auto [open_err, open] = score("bidirectional");
  CHECK(open["positions_seeing_target"] == open["scored_tokens"]);
  CHECK_THAT(open_err,
             Catch::Contains("warning: under mask 'bidirectional', " +
                             open["scored_tokens"].dump() + " of " + open["scored_tokens"].dump() +
                             " scored positions could attend to the token they predict"));
}
