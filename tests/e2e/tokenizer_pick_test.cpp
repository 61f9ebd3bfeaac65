// A `tokenizer:` section that names a folder and no plugin: the folder's files pick the plugin
// (tokenizer_files.hpp: what the tokenizer plugins declare), so Hugging Face folders run as they are.
#include <catch2/catch.hpp>

#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;

namespace {

std::filesystem::path pipeline_with(const std::string& name, const std::string& yaml) {
  const auto file = scratch_dir("tokenizer_pick_" + name) / "pipeline.yaml";
  write_file(file, yaml);
  return file;
}

}  // namespace

TEST_CASE("tokenizer picked from a folder: tokenizer.json gives the tokenizer-json plugin",
          "[e2e][tokenize]") {
  const auto folder = shared_dir() / "tokenizers-json/qwen3";
  const auto pipeline =
      pipeline_with("qwen3", "task: tokenize\ntokenizer:\n  path: " + folder.string() + "\n");
  const auto vectors = read_jsonl(folder / "vectors.jsonl");
  std::string input;
  std::vector<json> expected;
  for (const auto& v : vectors) {
    if (v.contains("add_special_tokens") && v["add_special_tokens"].get<bool>()) continue;
    input += json({{"text", v["text"]}}).dump() + "\n";
    expected.push_back(v["ids"]);
  }
  REQUIRE(expected.size() > 10);
  const auto r = run_masque(
      {"tokenize", pipeline.string(), "--input-format", "jsonl", "--no-special", "-q"}, input);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == expected.size());
  for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i]["ids"] == expected[i]);
}

TEST_CASE("tokenizer picked from a folder: a model folder scores as the ready pipeline does",
          "[e2e][tokenize]") {
  const auto folder = shared_dir() / "models/stories260k";
  const auto pipeline = pipeline_with(
      "stories", "task: lm-score\nmodel:\n  plugin: llama\n  path: " + folder.string() +
                     "\ntokenizer:\n  path: " + folder.string() + "\nmask:\n  plugin: causal\n");
  const std::string text = "Once upon a time, there was a little girl named Lily.\n";
  const auto picked = run_masque({"run", pipeline.string(), "-q"}, text);
  const auto ready =
      run_masque({"run", (source_dir() / "pipelines/lm-score.yaml").string(), "-q"}, text);
  INFO(picked.err);
  REQUIRE(picked.exit_code == 0);
  CHECK(picked.out == ready.out);
}

TEST_CASE("tokenizer picked from a folder: a folder with no tokenizer file is a clear error",
          "[e2e][tokenize]") {
  const auto empty = scratch_dir("tokenizer_pick_empty");
  const auto pipeline =
      pipeline_with("empty", "task: tokenize\ntokenizer:\n  path: " + empty.string() + "\n");
  const auto r = run_masque({"tokenize", pipeline.string(), "-q"}, "text\n");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("tokenizer: no 'plugin:' given") &&
                        Catch::Contains("tokenizer.json (tokenizer-json)") &&
                        Catch::Contains("pipeline.yaml:3"));
}
