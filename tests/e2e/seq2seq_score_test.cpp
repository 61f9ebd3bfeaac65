// seq2seq-score end to end: the teacher-forced log-probs of the transliteration model's examples
// (examples.jsonl) and of CTranslate2's own score_batch test (python/tests/test_translator.py,
// test_score_api), in one batch of different lengths and one record at a time, and the corpus
// totals of the summary.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;

namespace {

std::string score_pipeline() {
  return (source_dir() / "pipelines/seq2seq-score.yaml").string();
}

std::string join(const json& tokens) {
  std::string s;
  for (const auto& t : tokens) {
    if (!s.empty()) s += ' ';
    s += t.get<std::string>();
  }
  return s;
}

struct Case {
  std::string source, target;
  std::vector<double> expected;  // per target token, then </s>
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& e : read_jsonl(shared_dir() / "models/aren-transliteration/examples.jsonl"))
    out.push_back({join(e["source_tokens"]), join(e["expected"]),
                   e["expected_token_log_probs"].get<std::vector<double>>()});
  // CTranslate2 test_score_api (values printed to 6 decimals).
  out.push_back({"آ ت ز م و ن",
                 "a t z m o n",
                 {-0.106023, -0.065410, -0.056002, -0.447953, -0.230714, -0.092184, -0.063463}});
  out.push_back(
      {"آ ت ش ي س و ن",
       "a c h i s o n",
       {-0.072660, -0.300309, -0.181187, -0.395671, -0.025631, -0.123466, -0.002034, -0.012639}});
  return out;
}

}  // namespace

TEST_CASE("seq2seq-score: token log-probs equal the references, batched and one at a time",
          "[e2e][seq2seq-score]") {
  const auto all = cases();
  std::string input;
  for (const auto& c : all) input += c.source + "\t" + c.target + "\n";
  const auto dir = scratch_dir("seq2seq_score");
  for (const char* batch : {"32", "1"}) {
    INFO("max_batch_size " << batch);
    const auto summary = dir / (std::string("summary_") + batch + ".json");
    auto r = run_masque(
        {"run", score_pipeline(), "-q", "--input-format", "tsv", "--columns", "text,target",
         "--set", std::string("task.max_batch_size=") + batch, "--summary", summary.string()},
        input);
    REQUIRE(r.exit_code == 0);
    auto out = parse_jsonl(r.out);
    REQUIRE(out.size() == all.size());
    double total = 0;
    std::size_t tokens = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      INFO("record " << i);
      const auto& got = out[i]["token_logprobs"];
      REQUIRE(got.size() == all[i].expected.size());
      double sum = 0;
      for (std::size_t t = 0; t < got.size(); ++t) {
        CHECK(std::abs(got[t].get<double>() - all[i].expected[t]) < 1e-5);
        sum += got[t].get<double>();
      }
      CHECK(out[i]["pieces"].back() == "</s>");
      CHECK(out[i]["tokens"].back() == 2);
      CHECK(out[i]["length"] == got.size());
      CHECK(std::abs(out[i]["logprob"].get<double>() - sum) < 1e-12);
      CHECK(std::abs(out[i]["score"].get<double>() - sum / got.size()) < 1e-12);
      total += out[i]["logprob"].get<double>();
      tokens += got.size();
    }
    const json s = json::parse(read_file(summary))["task"];
    CHECK(s["records"] == all.size());
    CHECK(s["scored_tokens"] == tokens);
    CHECK(std::abs(s["logprob"].get<double>() - total) < 1e-9);
    CHECK(std::abs(s["mean_logprob"].get<double>() - total / tokens) < 1e-12);
  }
}

TEST_CASE("seq2seq-score: ids, an empty target, an empty source and the length penalty",
          "[e2e][seq2seq-score]") {
  // The same record with its target as an array of ids scores the same.
  auto text = run_masque({"run", score_pipeline(), "-q", "--input-format", "jsonl"},
                         R"({"text": "س م ي ر", "target": "s a m i r"})"
                         "\n");
  REQUIRE(text.exit_code == 0);
  const json t = parse_jsonl(text.out).at(0);
  json ids_record = {{"text", "س م ي ر"}, {"target", json::array()}};
  for (std::size_t i = 0; i + 1 < t["tokens"].size(); ++i)
    ids_record["target"].push_back(t["tokens"][i]);
  auto ids = run_masque({"run", score_pipeline(), "-q", "--input-format", "jsonl"},
                        ids_record.dump() + "\n");
  REQUIRE(ids.exit_code == 0);
  CHECK(parse_jsonl(ids.out).at(0)["token_logprobs"] == t["token_logprobs"]);

  // As CTranslate2: an empty target scores </s> alone; an empty source scores every token 0.
  auto edge = run_masque(
      {"run", score_pipeline(), "-q", "--input-format", "tsv", "--columns", "text,target"},
      "س م ي ر\t\n\ta t z\n");
  REQUIRE(edge.exit_code == 0);
  auto out = parse_jsonl(edge.out);
  CHECK(out[0]["pieces"] == json::array({"</s>"}));
  CHECK(out[0]["token_logprobs"].size() == 1);
  CHECK(out[0]["token_logprobs"][0].get<double>() < 0);
  CHECK(out[1]["token_logprobs"] == json::array({0.0, 0.0, 0.0, 0.0}));

  auto raw = run_masque({"run", score_pipeline(), "-q", "--input-format", "tsv", "--columns",
                         "text,target", "--set", "task.length_penalty=0"},
                        "س م ي ر\ts a m i r\n");
  REQUIRE(raw.exit_code == 0);
  const json r0 = parse_jsonl(raw.out).at(0);
  CHECK(r0["score"] == r0["logprob"]);
}

TEST_CASE("seq2seq-score: max_input_length truncates the source and says so",
          "[e2e][seq2seq-score]") {
  auto full = run_masque(
      {"run", score_pipeline(), "-q", "--input-format", "tsv", "--columns", "text,target"},
      "آ ت ز\ta t z\n");
  auto cut = run_masque({"run", score_pipeline(), "-q", "--input-format", "tsv", "--columns",
                         "text,target", "--set", "task.max_input_length=3"},
                        "آ ت ز م و ن\ta t z\n");
  REQUIRE(full.exit_code == 0);
  REQUIRE(cut.exit_code == 0);
  const json f = parse_jsonl(full.out).at(0), c = parse_jsonl(cut.out).at(0);
  CHECK(c["token_logprobs"] == f["token_logprobs"]);
  CHECK(c["note"] == "source truncated from 6 to 3 tokens (max_input_length)");
  CHECK(!f.contains("note"));
}

TEST_CASE("seq2seq-score: one BERT-like model under the UniLM mask scores what it generated",
          "[e2e][seq2seq-score]") {
  // Greedy generation reports each token's log-prob (min length 0: plain log-softmax); scoring
  // that output as a given target must give the same values, [SEP] (the end) included.
  const std::string unilm = (source_dir() / "pipelines/seq2seq-unilm.yaml").string();
  const std::string input = "你想吃啥\n今天天气很好\n";
  auto gen = run_masque({"run", unilm, "-q", "--set", "task.token_logprobs=true", "--set",
                         "decoder.max_new_tokens=6"},
                        input);
  REQUIRE(gen.exit_code == 0);
  const auto generated = parse_jsonl(gen.out);
  std::string records;
  std::istringstream lines(input);
  std::string line;
  for (const auto& g : generated) {
    std::getline(lines, line);
    records += json({{"text", line}, {"target", g["tokens"]}}).dump() + "\n";
  }
  const auto dir = scratch_dir("seq2seq_score_unilm");
  write_file(dir / "score.yaml",
             "task: seq2seq-score\nmodel: {plugin: bert, path: " +
                 (shared_dir() / "models/tiny-bert-chinese").string() +
                 "}\ntokenizer: {plugin: wordpiece, vocab: " +
                 (shared_dir() / "tokenizers/bert-base-chinese/vocab.txt").string() +
                 ", lowercase: \"false\"}\nmask: {plugin: seq2seq}\n");
  auto score = run_masque({"run", (dir / "score.yaml").string(), "-q", "--input-format", "jsonl",
                           "--set", "task.max_batch_size=2"},
                          records);
  INFO(score.err);
  REQUIRE(score.exit_code == 0);
  const auto scored = parse_jsonl(score.out);
  REQUIRE(scored.size() == generated.size());
  for (std::size_t i = 0; i < scored.size(); ++i) {
    const auto& want = generated[i]["token_logprobs"];
    const auto& got = scored[i]["token_logprobs"];
    // Generation stopped at max_new_tokens or at [SEP]: compare the tokens both scored.
    REQUIRE(!want.empty());
    REQUIRE(got.size() >= want.size());
    for (std::size_t t = 0; t < want.size(); ++t)
      CHECK(std::abs(got[t].get<double>() - want[t].get<double>()) < 1e-5);
  }
}
