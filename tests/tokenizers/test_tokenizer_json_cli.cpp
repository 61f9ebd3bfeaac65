// `masque tokenize --tokenizer tokenizer-json` (the real binary) on every encode vector of the
// six tokenizer.json files in ../shared/tokenizers-json: the vectors without special tokens with
// --no-special, those with "add_special_tokens": true without it; ids exact, pieces and offsets
// present for every token. A broken file is exit code 2 with the file and JSON path.
#include <catch2/catch.hpp>

#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;

namespace {

std::vector<json> run_tokenize(const std::string& folder, const std::vector<json>& vectors,
                               bool special) {
  std::string input;
  for (const auto& v : vectors) input += json({{"text", v["text"]}}).dump() + "\n";
  std::vector<std::string> args = {"tokenize",       "--tokenizer",    "tokenizer-json", "--set",
                                   "path=" + folder, "--input-format", "jsonl",          "-q"};
  if (!special) args.push_back("--no-special");
  const auto r = run_masque(args, input);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return parse_jsonl(r.out);
}

}  // namespace

TEST_CASE("tokenize: every tokenizer.json vector through the CLI",
          "[e2e][tokenize][tokenizer-json]") {
  for (const char* name : {"llama3", "qwen3", "deepseek-v3", "gemma3", "phi-3-mini", "t5-small"}) {
    INFO(name);
    const std::string folder = (shared_dir() / "tokenizers-json" / name).string();
    const auto all = read_jsonl(shared_dir() / "tokenizers-json" / name / "vectors.jsonl");
    for (bool special : {false, true}) {
      std::vector<json> vectors;
      for (const auto& v : all)
        if (v.value("add_special_tokens", false) == special) vectors.push_back(v);
      if (vectors.empty()) continue;
      const auto out = run_tokenize(folder, vectors, special);
      REQUIRE(out.size() == vectors.size());
      for (std::size_t i = 0; i < out.size(); ++i) {
        const std::string text = vectors[i]["text"];
        INFO(text);
        CHECK(out[i]["ids"] == vectors[i]["ids"]);
        REQUIRE(out[i]["pieces"].size() == out[i]["ids"].size());
        REQUIRE(out[i]["offsets"].size() == out[i]["ids"].size());
        for (const auto& o : out[i]["offsets"]) {
          CHECK(o[0].get<std::size_t>() <= o[1].get<std::size_t>());
          CHECK(o[1].get<std::size_t>() <= text.size());
        }
      }
    }
  }
}

TEST_CASE("tokenize: a broken tokenizer.json stops with the file and JSON path",
          "[e2e][tokenize][tokenizer-json]") {
  const auto dir = scratch_dir("cli-broken-tokenizer-json");
  write_file(dir / "tokenizer.json",
             R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a"]}, )"
             R"("decoder": {"type": "Nonesuch"}})");
  const auto r = run_masque(
      {"tokenize", "--tokenizer", "tokenizer-json", "--set", "path=" + dir.string(), "-q"}, "a\n");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("tokenizer.json: $.model.merges[0]: the merged token 'aa'"));
}
