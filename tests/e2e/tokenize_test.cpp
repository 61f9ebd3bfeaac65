// `masque tokenize` with the real tokenizers: the reference vectors through the CLI, offsets,
// --no-special, JSON-lines input (texts with newlines), a pipeline's tokenizer.
#include <catch2/catch.hpp>

#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;

namespace {

// Every vector of `file` as JSON-lines input; returns (outputs, vectors).
std::pair<std::vector<json>, std::vector<json>> tokenize_vectors(const std::string& file,
                                                                 std::vector<std::string> args) {
  auto vectors = read_jsonl(shared_dir() / "tokenizers" / file);
  std::string input;
  for (const auto& v : vectors) input += json({{"text", v["text"]}}).dump() + "\n";
  args.insert(args.begin(), "tokenize");
  args.insert(args.end(), {"--input-format", "jsonl", "--no-special", "-q"});
  auto r = run_masque(args, input);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return {parse_jsonl(r.out), vectors};
}

}  // namespace

TEST_CASE("tokenize: every reference vector through the CLI", "[e2e][tokenize]") {
  struct Case {
    const char* file;
    std::vector<std::string> args;
  };
  const std::string tok = (shared_dir() / "tokenizers").string();
  const std::vector<Case> cases = {
      {"gpt2/vectors.jsonl", {"--tokenizer", "bpe", "--set", "path=" + tok + "/gpt2"}},
      {"bert-base-uncased/vectors.jsonl",
       {"--tokenizer", "wordpiece", "--set", "vocab=" + tok + "/bert-base-uncased/vocab.txt",
        "--set", "lowercase=true"}},
      {"bert-base-chinese/vectors.jsonl",
       {"--tokenizer", "wordpiece", "--set", "vocab=" + tok + "/bert-base-chinese/vocab.txt",
        "--set", "lowercase=false"}},
      {"bert-base-chinese/vectors_lowercase.jsonl",
       {"--tokenizer", "wordpiece", "--set", "vocab=" + tok + "/bert-base-chinese/vocab.txt",
        "--set", "lowercase=true"}},
      {"stories260k/vectors.jsonl",
       {"--tokenizer", "sentencepiece", "--set",
        "path=" + (shared_dir() / "models/stories260k").string()}},
  };
  for (const auto& c : cases) {
    INFO(c.file);
    auto [out, vectors] = tokenize_vectors(c.file, c.args);
    REQUIRE(out.size() == vectors.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      INFO(vectors[i]["text"]);
      CHECK(out[i]["id"] == i);
      CHECK(out[i]["ids"] == vectors[i]["ids"]);
      REQUIRE(out[i]["offsets"].size() == out[i]["ids"].size());
      REQUIRE(out[i]["pieces"].size() == out[i]["ids"].size());
      for (const auto& o : out[i]["offsets"])
        CHECK(o[1].get<std::size_t>() <= vectors[i]["text"].get<std::string>().size());
    }
  }
}

TEST_CASE("tokenize: special tokens, offsets and a pipeline's tokenizer", "[e2e][tokenize]") {
  const std::string vocab = (shared_dir() / "tokenizers/bert-base-chinese/vocab.txt").string();
  auto with = run_masque({"tokenize", "--tokenizer", "wordpiece", "--set", "vocab=" + vocab, "-q"},
                         "北京欢迎你\n");
  REQUIRE(with.exit_code == 0);
  auto w = parse_jsonl(with.out).at(0);
  CHECK(w["pieces"] == json({"[CLS]", "北", "京", "欢", "迎", "你", "[SEP]"}));
  CHECK(w["offsets"] == json::parse("[[0,0],[0,3],[3,6],[6,9],[9,12],[12,15],[15,15]]"));
  auto without = run_masque(
      {"tokenize", "--tokenizer", "wordpiece", "--set", "vocab=" + vocab, "-q", "--no-special"},
      "你想吃啥 白切鸡\n");
  CHECK(parse_jsonl(without.out).at(0)["pieces"] ==
        json({"你", "想", "吃", "啥", "白", "切", "鸡"}));

  auto pipe = run_masque({"tokenize", (source_dir() / "pipelines/lm-score.yaml").string(), "-q"},
                         "Once upon a time, there was a little girl named Lily.\n");
  REQUIRE(pipe.exit_code == 0);
  CHECK(parse_jsonl(pipe.out).at(0)["ids"] ==
        json({1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426}));

  auto bad = run_masque({"tokenize", "--tokenizer", "wordpiece", "--set", "vocab=" + vocab, "-q"},
                        "ok\n\xff\n");
  CHECK(bad.exit_code == 1);
  auto lines = parse_jsonl(bad.out);
  REQUIRE(lines.size() == 2);
  CHECK(lines[1]["error"].get<std::string>().find("invalid UTF-8") == 0);
}
