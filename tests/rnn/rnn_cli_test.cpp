// End to end through the CLI: `masque run` with task seq2seq, model rnn-seq2seq and the vocab
// tokenizer on a fixture gives the reference's greedy outputs and log-probs.
#include <catch2/catch.hpp>

#include <cmath>

#include "rnn_support.hpp"
#include "test_support.hpp"

using namespace masque::test;
using namespace masque::test::rnn;

namespace {

std::string pipeline(const std::string& fixture, const std::string& decoder) {
  const auto dir = fixture_dir(fixture);
  // Its own folder: test cases of this file run in parallel processes under ctest -j.
  const auto file = own_scratch_dir("rnn-cli-" + fixture + "-" + decoder) / "pipeline.yaml";
  write_file(file,
             "task: seq2seq\n"
             "model:\n  plugin: rnn-seq2seq\n  path: " +
                 dir.string() +
                 "\n"
                 "tokenizer:\n  plugin: vocab\n  vocab: " +
                 (dir / "source_vocab.txt").string() +
                 "\n"
                 "target_tokenizer:\n  plugin: vocab\n  vocab: " +
                 (dir / "target_vocab.txt").string() +
                 "\n"
                 "decoder:\n  plugin: " +
                 decoder + "\n  max_new_tokens: 12\n  min_new_tokens: 0\n");
  return file.string();
}

}  // namespace

TEST_CASE("rnn-seq2seq: masque run decodes like the reference (greedy)", "[rnn][e2e]") {
  for (const std::string name : {"lstm-bahdanau", "gru-luong"}) {
    const auto e = expected(name);
    std::string input;
    for (const auto& r : e["records"]) {
      std::string line;
      for (const auto& id : r["source"])
        line += (line.empty() ? "s" : " s") + std::to_string(id.get<int>());
      input += line + "\n";
    }
    const auto run = run_masque(
        {"run", pipeline(name, "greedy"), "-q", "--set", "task.token_logprobs=true"}, input);
    INFO(run.err);
    REQUIRE(run.exit_code == 0);
    const auto out = parse_jsonl(run.out);
    REQUIRE(out.size() == e["records"].size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      const auto& want = e["records"][i];
      INFO(name << " " << want["source"].dump() << " -> " << out[i].dump());
      CHECK(out[i]["tokens"] == want["greedy"]);
      const auto& logprobs = out[i]["token_logprobs"];
      REQUIRE(logprobs.size() == want["greedy_logprobs"].size());
      for (std::size_t t = 0; t < logprobs.size(); ++t)
        CHECK(std::abs(logprobs[t].get<double>() - want["greedy_logprobs"][t].get<double>()) <
              1e-4);
    }
  }
}

TEST_CASE(
    "rnn-seq2seq: masque run with beam search: batches of mixed lengths equal one "
    "record at a time",
    "[rnn][e2e]") {
  std::string input;
  for (int i = 0; i < 60; ++i) {  // lengths 1 to 15, in no order
    std::string line;
    for (int t = 0; t <= (i * 7) % 15; ++t)
      line += (t ? " s" : "s") + std::to_string(4 + (i * 5 + t * 3) % 16);
    input += line + "\n";
  }
  const auto file = pipeline("lstm-luong", "beam");
  std::vector<std::vector<nlohmann::json>> outputs;
  for (const char* batch : {"1", "32"}) {
    const auto run = run_masque({"run", file, "-q", "--set", "decoder.beam_size=4", "--set",
                                 std::string("task.max_batch_size=") + batch},
                                input);
    INFO(run.err);
    REQUIRE(run.exit_code == 0);
    outputs.push_back(parse_jsonl(run.out));
    REQUIRE(outputs.back().size() == 60);
  }
  for (std::size_t i = 0; i < 60; ++i) {
    INFO("record " << i);
    CHECK(outputs[0][i]["tokens"] == outputs[1][i]["tokens"]);
    CHECK(std::abs(outputs[0][i]["score"].get<double>() - outputs[1][i]["score"].get<double>()) <
          1e-5);
  }
}

TEST_CASE("rnn-seq2seq: masque run with a bad model folder is a configuration error",
          "[rnn][e2e]") {
  const auto missing = (fixture_dir("lstm-luong") / "missing").string();
  const auto absent = run_masque(
      {"run", pipeline("lstm-luong", "greedy"), "-q", "--set", "model.path=" + missing}, "s4\n");
  CHECK(absent.exit_code == 2);
  CHECK_THAT(absent.err, Catch::Contains("model.path: no such file or directory: " + missing));
  // A folder without the model's files.
  const auto empty = masque::test::scratch_dir("rnn_empty_model").string();
  const auto bad = run_masque(
      {"run", pipeline("lstm-luong", "greedy"), "-q", "--set", "model.path=" + empty}, "s4\n");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains(empty) && Catch::Contains("config.json"));
}

TEST_CASE("rnn-seq2seq: return_attention and replace_unknowns are configuration errors",
          "[rnn][e2e][attention]") {
  // The model does not record attention probabilities (ModelInfo::records_attention).
  for (const char* option : {"task.return_attention=true", "task.replace_unknowns=true"}) {
    const auto bad =
        run_masque({"run", pipeline("lstm-luong", "greedy"), "-q", "--set", option}, "s4\n");
    INFO(bad.err);
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.err, Catch::Contains("model cannot show its attention"));
  }
}

TEST_CASE("rnn-seq2seq: inspect and the run summary say which products run int8",
          "[rnn][e2e][int8]") {
  // The wide fixture's recurrent layers, bridge and most projections pass the int8 rule; its
  // generator (128 -> 24 outputs) and Bahdanau query projection (16,384 weights) do not.
  const auto dir = fixture_dir("lstm-wide");
  const auto inspect = run_masque({"inspect", dir.string(), "--matmul-dtype", "int8", "--json"});
  INFO(inspect.err);
  REQUIRE(inspect.exit_code == 0);
  const auto j = nlohmann::json::parse(inspect.out);
  const auto& matmuls = j["matmuls"];
  // 2 encoder layers x 2 directions + 2 decoder layers, two products each; bridge; key, query
  // and output projections; generator.
  CHECK(matmuls["layers"] == 17);
  CHECK(matmuls["by_dtype"]["f32"] == 2);
  CHECK(matmuls["by_dtype"]["int8"] == 15);
  bool recurrent_int8 = false;
  for (const auto& layer : matmuls["list"])
    if (layer["name"] == "encoder.rnn.l0_reverse.recurrent")
      recurrent_int8 = layer["dtype"] == "int8";
  CHECK(recurrent_int8);

  const auto run = run_masque(
      {"run", pipeline("lstm-wide", "greedy"), "--set", "model.matmul_dtype=int8"}, "s4 s5 s6\n");
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.err, Catch::Contains("int8: 15 of 17 linear layers; 2 kept f32"));
}
