// Encoder-decoder seq2seq end to end: the transliteration model's examples with greedy and beam
// search, and batches of mixed lengths against one record at a time.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;

namespace {

std::string translate() {
  return (source_dir() / "pipelines/translate.yaml").string();
}

std::string join(const json& tokens) {
  std::string s;
  for (const auto& t : tokens) {
    if (!s.empty()) s += ' ';
    s += t.get<std::string>();
  }
  return s;
}

std::vector<std::string> first_lines(std::size_t n) {
  std::istringstream in(read_file(shared_dir() / "bench/aren-20k.txt"));
  std::vector<std::string> lines;
  std::string line;
  while (lines.size() < n && std::getline(in, line)) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("translate: every example reproduces with greedy and with beam size 4",
          "[e2e][seq2seq]") {
  auto examples = read_jsonl(shared_dir() / "models/aren-transliteration/examples.jsonl");
  std::string input;
  for (const auto& e : examples) input += join(e["source_tokens"]) + "\n";
  for (const char* beam : {"1", "4"}) {
    INFO("beam_size " << beam);
    auto r = run_masque(
        {"run", translate(), "-q", "--set", std::string("decoder.beam_size=") + beam}, input);
    REQUIRE(r.exit_code == 0);
    auto out = parse_jsonl(r.out);
    REQUIRE(out.size() == examples.size());
    for (std::size_t i = 0; i < examples.size(); ++i) {
      INFO(examples[i]["name"]);
      CHECK(out[i]["text"] == join(examples[i]["expected"]));
      if (std::string(beam) == "1")
        CHECK(std::abs(out[i]["score"].get<double>() -
                       examples[i]["expected_score"].get<double>()) < 1e-5);
    }
  }
  auto text = run_masque({"run", translate(), "-q", "--format", "text"}, input);
  CHECK(text.out == "s a m i r\nn a d i a\nr a m i\n");
}

TEST_CASE("translate: teacher-forced log-probs of the examples", "[e2e][seq2seq]") {
  // Greedy with token_logprobs: the scored tokens are the output tokens then </s>. The reference
  // values are plain log-softmax, so the minimum length (which takes </s> out of step 0's
  // softmax, as CTranslate2 does) is off here.
  auto examples = read_jsonl(shared_dir() / "models/aren-transliteration/examples.jsonl");
  std::string input;
  for (const auto& e : examples) input += join(e["source_tokens"]) + "\n";
  auto r = run_masque({"run", translate(), "-q", "--set", "decoder.beam_size=1", "--set",
                       "task.token_logprobs=true", "--set", "decoder.min_new_tokens=0"},
                      input);
  REQUIRE(r.exit_code == 0);
  auto out = parse_jsonl(r.out);
  for (std::size_t i = 0; i < examples.size(); ++i) {
    const auto& want = examples[i]["expected_token_log_probs"];
    REQUIRE(out[i]["token_logprobs"].size() == want.size());
    for (std::size_t t = 0; t < want.size(); ++t)
      CHECK(std::abs(out[i]["token_logprobs"][t].get<double>() - want[t].get<double>()) < 1e-5);
  }
}

TEST_CASE("translate: 32 records of different lengths in one batch equal one at a time",
          "[e2e][seq2seq]") {
  auto lines = first_lines(32);
  std::string input;
  for (const auto& l : lines) input += l + "\n";
  for (const char* beam : {"1", "4"}) {
    INFO("beam_size " << beam);
    auto batched =
        run_masque({"run", translate(), "-q", "--format", "nbest", "--set",
                    std::string("decoder.beam_size=") + beam, "--set", "task.max_batch_size=32"},
                   input);
    auto single =
        run_masque({"run", translate(), "-q", "--format", "nbest", "--set",
                    std::string("decoder.beam_size=") + beam, "--set", "task.max_batch_size=1"},
                   input);
    auto threads =
        run_masque({"run", translate(), "-q", "--format", "nbest", "--threads", "2", "--set",
                    std::string("decoder.beam_size=") + beam, "--set", "task.max_batch_size=7"},
                   input);
    REQUIRE(batched.exit_code == 0);
    CHECK(std::count(batched.out.begin(), batched.out.end(), '\n') == 32);
    CHECK(batched.out == single.out);
    CHECK(batched.out == threads.out);
  }
}

TEST_CASE("translate: n-best, target prefix and an empty source", "[e2e][seq2seq]") {
  auto nbest = run_masque({"run", translate(), "-q", "--set", "decoder.beam_size=4", "--set",
                           "decoder.num_hypotheses=4"},
                          "س م ي ر\n");
  REQUIRE(nbest.exit_code == 0);
  auto out = parse_jsonl(nbest.out).at(0);
  REQUIRE(out["hypotheses"].size() == 4);
  for (std::size_t i = 1; i < 4; ++i)
    CHECK(out["hypotheses"][i - 1]["score"].get<double>() >=
          out["hypotheses"][i]["score"].get<double>());

  auto prefix =
      run_masque({"run", translate(), "-q", "--input-format", "tsv", "--columns", "text,prefix"},
                 "س م ي ر\ts e\n");
  REQUIRE(prefix.exit_code == 0);
  CHECK(parse_jsonl(prefix.out).at(0)["text"].get<std::string>().rfind("s e", 0) == 0);

  auto empty = run_masque({"run", translate(), "-q"}, "\n");
  REQUIRE(empty.exit_code == 0);
  CHECK(parse_jsonl(empty.out).at(0)["text"] == "");
  CHECK(parse_jsonl(empty.out).at(0)["score"] == 0.0);
}

TEST_CASE("seq2seq: the route follows the pipeline's mask and checks the model's kind",
          "[e2e][seq2seq]") {
  // A BERT-like model without a mask section would be run as an encoder-decoder.
  const auto dir = scratch_dir("seq2seq_routes");
  write_file(dir / "p.yaml",
             "task: seq2seq\nmodel: {plugin: bert, path: " +
                 (shared_dir() / "models/tiny-bert-chinese").string() +
                 "}\ntokenizer: {plugin: wordpiece, vocab: " +
                 (shared_dir() / "tokenizers/bert-base-chinese/vocab.txt").string() + "}\n");
  auto no_mask = run_masque({"run", (dir / "p.yaml").string(), "-q"}, "你想吃啥\n");
  CHECK(no_mask.exit_code == 2);
  CHECK(no_mask.err.find("seq2seq without a `mask` section runs encoder-decoder models; the model "
                         "'bert' is encoder-only: for one BERT-like model under the UniLM mask "
                         "add mask: {plugin: seq2seq}") != std::string::npos);
  // An encoder-decoder under a mask would be read as one model under that mask.
  auto with_mask = run_masque({"run", translate(), "-q", "--set", "mask.plugin=seq2seq"}, "abc\n");
  CHECK(with_mask.exit_code == 2);
  CHECK(with_mask.err.find("seq2seq with a `mask` section (one model, UniLM) runs encoder-only "
                           "models; the model 'encoder-decoder' is encoder-decoder") !=
        std::string::npos);
  // A task that runs other kinds says which.
  auto lm = run_masque(
      {"run", translate(), "-q", "--set", "task=lm-generate", "--set", "mask.plugin=causal"},
      "abc\n");
  CHECK(lm.exit_code == 2);
  CHECK(lm.err.find("the task 'lm-generate' runs decoder-only or encoder-only models; the model "
                    "'encoder-decoder' is encoder-decoder") != std::string::npos);
}

TEST_CASE("seq2seq: stop strings cut each hypothesis, from task.stop or the record's own",
          "[e2e][seq2seq][stop]") {
  // Unstopped (greedy): "b e t t e r", "m e l l e r".
  const std::string words = "{\"text\": \"ب ي ت ر\"}\n{\"text\": \"م ي ل ر\", \"stop\": \"l e\"}\n";
  const auto free = run_masque({"run", translate(), "-q", "--set", "decoder.plugin=greedy"},
                               "ب ي ت ر\nم ي ل ر\n");
  REQUIRE(free.exit_code == 0);
  const auto plain = parse_jsonl(free.out);
  REQUIRE(plain.at(0)["text"] == "b e t t e r");
  REQUIRE(plain.at(1)["text"] == "m e l l e r");
  for (const char* batching : {"static", "continuous"}) {
    const auto r = run_masque(
        {"run", translate(), "-q", "--input-format", "jsonl", "--set", "task.stop=[\"t t\"]",
         "--set", "decoder.plugin=greedy", "--set", std::string("run.batching=") + batching},
        words);
    INFO(batching << "\n" << r.err);
    REQUIRE(r.exit_code == 0);
    const auto out = parse_jsonl(r.out);
    CHECK(out.at(0)["text"] == "b e ");    // task.stop
    CHECK(out.at(1)["text"] == "m e l ");  // the record's "stop" replaces it
    // The tokens keep the one that completed the stop string, and no more.
    CHECK(out.at(0)["tokens"].size() < plain.at(0)["tokens"].size());
  }
  // Beam search ends a hypothesis at a stop as at an end token and keeps the best finished one:
  // no text holds the stop string.
  const auto beam = run_masque({"run", translate(), "-q", "--input-format", "jsonl", "--set",
                                "task.stop=[\"t t\"]", "--set", "decoder.num_hypotheses=2"},
                               words);
  REQUIRE(beam.exit_code == 0);
  for (const auto& j : parse_jsonl(beam.out))
    for (const auto& h : j["hypotheses"])
      CHECK(h["text"].get<std::string>().find("t t") == std::string::npos);
}
