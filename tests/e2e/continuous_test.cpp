// Continuous batching (run.batching: continuous) against static batching and one record at a
// time: the same bytes out for greedy, seeded sampling and beam search, on stories260k and
// tiny-gpt2 with prompts of mixed lengths, whatever the row limit, token budget and threads.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Prompts of 0 to ~40 words: records end at very different steps, so rows free up unevenly.
std::string mixed_prompts(std::size_t count) {
  const std::vector<std::string> words = {"Once",  "upon",   "a",    "time",  "there", "was",
                                          "a",     "little", "girl", "named", "Lily",  "who",
                                          "loved", "to",     "play", "in",    "the",   "park"};
  std::string out;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t length = (i * 7) % 41;  // 0, 7, 14, ..., deterministic spread
    for (std::size_t w = 0; w < length; ++w) {
      if (w) out += ' ';
      out += words[(i + w) % words.size()];
    }
    out += '\n';
  }
  return out;
}

struct Decoding {
  const char* name;
  std::vector<std::string> sets;
};

const std::vector<Decoding>& decodings() {
  static const std::vector<Decoding> all = {
      {"greedy", {"decoder.plugin=greedy", "decoder.max_new_tokens=48"}},
      {"sample",
       {"decoder.plugin=sample", "decoder.seed=11", "decoder.top_p=0.9",
        "decoder.max_new_tokens=64", "decoder.num_hypotheses=2"}},
      {"sample with penalties",
       {"decoder.plugin=sample", "decoder.seed=3", "decoder.temperature=0.8",
        "decoder.repetition_penalty=1.2", "decoder.min_new_tokens=5", "decoder.max_new_tokens=40"}},
      {"beam",
       {"decoder.plugin=beam", "decoder.beam_size=3", "decoder.num_hypotheses=2",
        "decoder.max_new_tokens=32"}},
  };
  return all;
}

std::string run_with(const std::string& pipeline, const std::string& input, const Decoding& d,
                     const std::vector<std::string>& extra, const std::vector<std::string>& pre) {
  std::vector<std::string> args{"run", pipeline, "-q"};
  args.insert(args.end(), pre.begin(), pre.end());
  for (const auto& s : d.sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run_masque(args, input);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return r.out;
}

// `pre`: arguments before the decoding's; `sets`: --set values after them (they win).
void check_same_everywhere(const std::string& pipeline, const std::string& input,
                           const std::vector<std::string>& pre, std::size_t records,
                           const std::vector<std::string>& sets = {}) {
  for (Decoding d : decodings()) {
    INFO(d.name);
    d.sets.insert(d.sets.end(), sets.begin(), sets.end());
    const std::string alone = run_with(
        pipeline, input, d, {"--set", "run.batching=static", "--set", "run.max_batch_size=1"}, pre);
    auto out = parse_jsonl(alone);
    REQUIRE(out.size() == records);
    for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i]["id"] == i);  // input order
    CHECK(run_with(pipeline, input, d,
                   {"--set", "run.batching=static", "--set", "run.max_batch_size=8"},
                   pre) == alone);
    CHECK(run_with(pipeline, input, d,
                   {"--set", "run.batching=continuous", "--set", "run.max_batch_size=8"},
                   pre) == alone);
    // Few rows, a small prompt budget (one record per admission) and two workers.
    CHECK(run_with(pipeline, input, d,
                   {"--set", "run.batching=continuous", "--set", "run.max_batch_size=3", "--set",
                    "run.max_batch_tokens=30", "--threads", "2"},
                   pre) == alone);
    // A row limit below the beam size: one record at a time, still admitted as rows free up.
    CHECK(run_with(pipeline, input, d,
                   {"--set", "run.batching=continuous", "--set", "run.max_batch_size=2", "--set",
                    "run.read_ahead=7"},
                   pre) == alone);
  }
}

}  // namespace

TEST_CASE("continuous batching: stories260k outputs equal static batching and one at a time",
          "[e2e][lm][continuous]") {
  const std::string input = mixed_prompts(24);
  check_same_everywhere((source_dir() / "pipelines" / "lm-generate.yaml").string(), input, {}, 24);
}

TEST_CASE("continuous batching: tiny-gpt2 ids prompts equal static batching",
          "[e2e][lm][continuous]") {
  auto dir = scratch_dir("e2e_continuous_gpt2");
  write_file(dir / "p.yaml", "task: lm-generate\nmodel:\n  plugin: gpt2\n  path: " +
                                 (shared_dir() / "models/tiny-gpt2").string() +
                                 "\ndecoder:\n  plugin: greedy\n");
  std::string input;
  for (int i = 0; i < 12; ++i) {
    for (int t = 0; t < 1 + (i * 5) % 23; ++t)
      input += std::to_string((i * 31 + t * 17) % 900) + " ";
    input += "\n";
  }
  // A 50,257-token vocabulary: short outputs keep the test quick.
  check_same_everywhere((dir / "p.yaml").string(), input, {"--input-format", "ids"}, 12,
                        {"decoder.max_new_tokens=12"});
}

TEST_CASE("continuous batching: encoder-decoder seq2seq (aren) equals static batching",
          "[e2e][seq2seq][continuous]") {
  std::istringstream lines(read_file(shared_dir() / "bench/aren-20k.txt"));
  std::string input, line;
  for (int i = 0; i < 40 && std::getline(lines, line); ++i) input += line + "\n";
  input += "\n";  // an empty source: an empty target without the model
  check_same_everywhere((source_dir() / "pipelines" / "translate.yaml").string(), input, {}, 41);
}

TEST_CASE("continuous batching: UniLM seq2seq (tiny-bert-chinese) equals static batching",
          "[e2e][seq2seq][continuous]") {
  const std::vector<std::string> sources = {"你想吃啥", "今天天气很好",
                                            "我",       "我们一起去公园玩吧",
                                            "他说",     "这是一个很长的句子，里面有很多字"};
  std::string input;
  for (int i = 0; i < 10; ++i) input += sources[i % sources.size()] + sources[(i * 5) % 6] + "\n";
  check_same_everywhere((source_dir() / "pipelines" / "seq2seq-unilm.yaml").string(), input, {}, 10,
                        {"decoder.max_new_tokens=10"});
}

TEST_CASE("continuous batching: plm-generate (both methods, both orders) equals static batching",
          "[e2e][bert][continuous]") {
  const std::vector<std::string> templates = {
      "[MASK] 京 欢 迎 [MASK]", "我 [MASK] 吃 [MASK] [MASK] 饭", "[MASK]", "今 天 [MASK] 气 很 好",
      "[MASK] [MASK] [MASK] [MASK] [MASK] 公 园"};
  std::string input;
  for (int i = 0; i < 15; ++i) input += templates[(i * 3) % templates.size()] + "\n";
  const std::string pipeline = (source_dir() / "pipelines" / "plm-generate.yaml").string();
  check_same_everywhere(pipeline, input, {}, 15);
  check_same_everywhere(pipeline, input,
                        {"--set", "task.method=incremental", "--set", "task.order_by=confidence"},
                        15);
}

TEST_CASE("continuous batching: the run parameter is documented and checked",
          "[e2e][lm][continuous]") {
  auto tasks = run_masque({"tasks"});
  REQUIRE(tasks.exit_code == 0);
  CHECK(tasks.out.find("batching") != std::string::npos);
  CHECK(tasks.out.find("one of {continuous,static}") != std::string::npos);
  auto bad = run_masque({"run", (source_dir() / "pipelines" / "lm-generate.yaml").string(), "-q",
                         "--set", "run.batching=dynamic"},
                        "Once\n");
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("batching") != std::string::npos);
}

TEST_CASE("continuous batching: the summary counts decoding steps and the rows they advanced",
          "[e2e][lm][continuous]") {
  // Greedy to the end of the sentence: outputs of 1 to 48 tokens, so static batches run
  // partly empty near their end and continuous batching refills them.
  auto dir = scratch_dir("e2e_continuous_steps");
  const std::string pipeline = (source_dir() / "pipelines" / "lm-generate.yaml").string();
  auto summary = [&](const std::string& batching, const std::string& rows) {
    const fs::path file = dir / ("summary_" + batching + rows + ".json");
    auto r = run_masque({"run", pipeline, "-q", "--set", "decoder.end_tokens=[1,2,426]", "--set",
                         "decoder.max_new_tokens=48", "--set", "run.batching=" + batching, "--set",
                         "run.max_batch_size=" + rows, "--summary", file.string()},
                        mixed_prompts(40));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return json::parse(read_file(file))["task"];
  };
  const json alone = summary("static", "1");
  const json fixed = summary("static", "8");
  const json refilled = summary("continuous", "8");
  // One row at a time: a step per decoded token.
  CHECK(alone["decoding_steps"] == alone["decoded_rows"]);
  CHECK(alone["rows_per_step"] == 1.0);
  // The same tokens are decoded whatever the batching; only the steps they share differ.
  CHECK(fixed["decoded_rows"] == alone["decoded_rows"]);
  CHECK(refilled["decoded_rows"] == alone["decoded_rows"]);
  CHECK(fixed["decoding_steps"].get<int>() < alone["decoding_steps"].get<int>());
  CHECK(refilled["decoding_steps"].get<int>() < fixed["decoding_steps"].get<int>());
  CHECK(refilled["rows_per_step"].get<double>() > fixed["rows_per_step"].get<double>());
  CHECK(refilled["rows_per_step"].get<double>() <= 8.0);
}
