// Causal language models end to end: lm-generate, lm-score and forward through the CLI,
// against the float64 references of stories260k and tiny-gpt2.
#include <catch2/catch.hpp>

#include <cmath>

#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string pipeline(const char* name) {
  return (source_dir() / "pipelines" / name).string();
}

json read_json(const fs::path& p) {
  return json::parse(read_file(p));
}

std::string ids_line(const json& ids) {
  std::string line;
  for (const auto& id : ids) {
    if (!line.empty()) line += ' ';
    line += std::to_string(id.get<int>());
  }
  return line + "\n";
}

// A pipeline for tiny-gpt2 written into a scratch dir (no tokenizer: records are ids).
fs::path gpt2_pipeline(const std::string& task, const std::string& extra = "") {
  auto dir = scratch_dir("e2e_gpt2_" + task);
  write_file(dir / "p.yaml", "task:\n  name: " + task + "\n" + extra +
                                 "model:\n  plugin: gpt2\n  path: " +
                                 (shared_dir() / "models/tiny-gpt2").string() + "\n");
  return dir / "p.yaml";
}

}  // namespace

TEST_CASE("lm-generate: greedy 256 steps from BOS print the published stories260k story",
          "[e2e][lm]") {
  auto ref = read_json(shared_dir() / "models/stories260k/reference/greedy_256.json");
  auto text = run_masque({"run", pipeline("lm-generate.yaml"), "--format", "text", "-q"}, "\n");
  REQUIRE(text.exit_code == 0);
  CHECK(text.out == ref["text"].get<std::string>() + "\n");
  CHECK(ref["matches_published_text"] == true);

  auto jsonl = run_masque({"run", pipeline("lm-generate.yaml"), "-q"}, "\n");
  REQUIRE(jsonl.exit_code == 0);
  auto out = parse_jsonl(jsonl.out);
  REQUIRE(out.size() == 1);
  CHECK(out[0]["tokens"] == ref["generated_ids"]);
  CHECK(out[0]["text"] == ref["text"]);
}

TEST_CASE("lm-score: stories260k matches the reference NLLs within 1e-4 per token", "[e2e][lm]") {
  auto ref = read_json(shared_dir() / "models/stories260k/reference/prompt_logits.json");
  std::vector<json> seqs{ref["prompt"]};
  for (const auto& s : ref["sentences"]) seqs.push_back(s);
  std::string input;
  for (const auto& s : seqs) input += json({{"text", s["text"]}}).dump() + "\n";
  auto r = run_masque({"run", pipeline("lm-score.yaml"), "--input-format", "jsonl", "--set",
                       "task.token_logprobs=true"},
                      input);
  REQUIRE(r.exit_code == 0);
  auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    INFO(seqs[i]["name"]);
    CHECK(out[i]["id"] == i);
    CHECK(out[i]["ids"] == seqs[i]["input_ids"]);  // BOS + SentencePiece, as the reference
    const auto& nll = seqs[i]["token_nll"];
    REQUIRE(out[i]["token_logprobs"].size() == nll.size());
    for (std::size_t t = 0; t < nll.size(); ++t)
      CHECK(std::abs(-out[i]["token_logprobs"][t].get<double>() - nll[t].get<double>()) < 1e-4);
    CHECK(std::abs(out[i]["nll"].get<double>() - seqs[i]["total_nll"].get<double>()) <
          1e-4 * nll.size());
    CHECK(std::abs(out[i]["ppl"].get<double>() / seqs[i]["perplexity"].get<double>() - 1) < 1e-4);
    CHECK(out[i]["tokens"] == seqs[i]["length"]);
  }
  // The corpus summary on stderr.
  CHECK(r.err.find("masque: lm-score: 6 records") != std::string::npos);
  CHECK(r.err.find("corpus perplexity") != std::string::npos);
}

TEST_CASE("lm-score: tiny-gpt2 matches its reference, alone and in a right-padded batch",
          "[e2e][lm]") {
  auto ref = read_json(shared_dir() / "models/tiny-gpt2/reference.json")["causal"];
  std::vector<json> seqs;
  for (const auto& s : ref["sequences"])
    if (s["length"].get<int>() >= 2) seqs.push_back(s);
  for (const auto& s : ref["padded_batch"]["sequences"]) seqs.push_back(s);
  std::string input;
  for (const auto& s : seqs) input += ids_line(s["input_ids"]);
  auto p = gpt2_pipeline("lm-score", "  token_logprobs: true\n");
  for (const char* batch : {"1", "32"}) {
    INFO("max_batch_size " << batch);
    auto r = run_masque({"run", p.string(), "--input-format", "ids", "-q", "--set",
                         std::string("task.max_batch_size=") + batch},
                        input);
    REQUIRE(r.exit_code == 0);
    auto out = parse_jsonl(r.out);
    REQUIRE(out.size() == seqs.size());
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      INFO(seqs[i]["name"]);
      const auto& positions = seqs[i]["positions"];
      for (std::size_t t = 0; t + 1 < positions.size(); ++t)
        CHECK(std::abs(out[i]["token_logprobs"][t].get<double>() -
                       positions[t]["next_token_logprob"].get<double>()) < 1e-4);
      CHECK(std::abs(out[i]["nll"].get<double>() - seqs[i]["total_nll"].get<double>()) < 1e-3);
    }
  }
}

TEST_CASE("forward: tiny-gpt2 logits, top ids and logsumexp match the reference", "[e2e][lm]") {
  auto ref = read_json(shared_dir() / "models/tiny-gpt2/reference.json")["causal"];
  const json* seq = nullptr;
  for (const auto& s : ref["sequences"])
    if (s["name"] == "len33") seq = &s;
  REQUIRE(seq);
  auto r = run_masque({"run", gpt2_pipeline("forward").string(), "--input-format", "ids", "-q"},
                      ids_line((*seq)["input_ids"]));
  REQUIRE(r.exit_code == 0);
  auto out = parse_jsonl(r.out).at(0);
  REQUIRE(out["positions"].size() == 33);
  for (std::size_t t = 0; t < 33; ++t) {
    const auto& want = (*seq)["positions"][t];
    const auto& got = out["positions"][t];
    CHECK(std::abs(got["logsumexp"].get<double>() - want["logsumexp"].get<double>()) < 1e-4);
    CHECK(std::abs(got["top_logits"][0].get<double>() - want["top10_logits"][0].get<double>()) <
          1e-4);
    if (want["top10_min_gap"].get<double>() > 1e-4) CHECK(got["top_ids"] == want["top10_ids"]);
  }
}

TEST_CASE(
    "decoding: seeded sampling is independent of batch size, position and threads, beam 1 is "
    "greedy",
    "[e2e][lm]") {
  std::string prompts =
      "Once upon a time\n\nThe dog\nLily and Tom went to\nOne day\nThe sun\nA bird\nTim said\n";
  auto sample = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args{"run",
                                  pipeline("lm-generate.yaml"),
                                  "-q",
                                  "--set",
                                  "decoder.plugin=sample",
                                  "--set",
                                  "decoder.seed=42",
                                  "--set",
                                  "decoder.max_new_tokens=40",
                                  "--set",
                                  "decoder.top_p=0.9"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_masque(args, prompts);
    REQUIRE(r.exit_code == 0);
    return r.out;
  };
  const std::string base = sample({"--set", "task.max_batch_size=1"});
  CHECK(parse_jsonl(base).size() == 8);
  CHECK(sample({"--set", "task.max_batch_size=8"}) == base);
  CHECK(sample({"--set", "task.max_batch_size=3", "--threads", "2"}) == base);
  CHECK(sample({"--set", "task.max_batch_size=8", "--threads", "2"}) == base);
  // Another seed gives other stories.
  auto other = run_masque(
      {"run", pipeline("lm-generate.yaml"), "-q", "--set", "decoder.plugin=sample", "--set",
       "decoder.seed=43", "--set", "decoder.max_new_tokens=40", "--set", "decoder.top_p=0.9"},
      prompts);
  CHECK(other.out != base);

  auto greedy = run_masque(
      {"run", pipeline("lm-generate.yaml"), "-q", "--set", "decoder.max_new_tokens=60"}, prompts);
  auto beam1 =
      run_masque({"run", pipeline("lm-generate.yaml"), "-q", "--set", "decoder.plugin=beam",
                  "--set", "decoder.beam_size=1", "--set", "decoder.max_new_tokens=60"},
                 prompts);
  REQUIRE(greedy.exit_code == 0);
  REQUIRE(beam1.exit_code == 0);
  auto g = parse_jsonl(greedy.out), b = parse_jsonl(beam1.out);
  REQUIRE(g.size() == b.size());
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i]["tokens"] == b[i]["tokens"]);
}

TEST_CASE("lm-generate: beam search returns n-best hypotheses with scores", "[e2e][lm]") {
  auto r = run_masque({"run", pipeline("lm-generate.yaml"), "-q", "--set", "decoder.plugin=beam",
                       "--set", "decoder.beam_size=4", "--set", "decoder.num_hypotheses=3", "--set",
                       "decoder.max_new_tokens=20"},
                      "Once upon a time\n");
  REQUIRE(r.exit_code == 0);
  auto out = parse_jsonl(r.out).at(0);
  REQUIRE(out["hypotheses"].size() == 3);
  CHECK(out["hypotheses"][0]["score"].get<double>() >= out["hypotheses"][1]["score"].get<double>());
  CHECK(out["hypotheses"][1]["score"].get<double>() >= out["hypotheses"][2]["score"].get<double>());
  CHECK(out["text"] == out["hypotheses"][0]["text"]);
  auto nbest = run_masque({"run", pipeline("lm-generate.yaml"), "-q", "--format", "nbest", "--set",
                           "decoder.plugin=beam", "--set", "decoder.num_hypotheses=2", "--set",
                           "decoder.max_new_tokens=5"},
                          "a\nb\n");
  REQUIRE(nbest.exit_code == 0);
  CHECK(nbest.out.rfind("0 ||| ", 0) == 0);
  CHECK(std::count(nbest.out.begin(), nbest.out.end(), '\n') == 4);
}

TEST_CASE("lm-generate: stop strings end each text before them, in any batch and with beam",
          "[e2e][lm][stop]") {
  auto ref = read_json(shared_dir() / "models/stories260k/reference/greedy_256.json");
  const std::string story = ref["text"];
  // "little girl" spans two tokens of the story; "named Lily" comes later and is never reached.
  REQUIRE(story.find("little girl") != std::string::npos);
  auto one = run_masque({"run", pipeline("lm-generate.yaml"), "-q", "--set",
                         "task.stop=[\"named Lily\", \"little girl\"]"},
                        "\n");
  REQUIRE(one.exit_code == 0);
  const json out = parse_jsonl(one.out).at(0);
  CHECK(out["text"] == story.substr(0, story.find("little girl")));
  // The tokens are the story's, up to the one that completed the stop string.
  const json& all = ref["generated_ids"];
  REQUIRE(out["tokens"].size() < all.size());
  for (std::size_t i = 0; i < out["tokens"].size(); ++i) CHECK(out["tokens"][i] == all[i]);

  // Many prompts: a stop at every full stop. Each text is the unstopped text up to its first
  // ".", whatever the batching and threads.
  const std::string prompts =
      "Once upon a time\nThe dog\nLily wanted\n\nTim and Sam\nOne day, a bird\nThe sun\n"
      "A big red ball\nMom said\nThe cat\n";
  const auto unstopped = run_masque(
      {"run", pipeline("lm-generate.yaml"), "-q", "--set", "decoder.max_new_tokens=60"}, prompts);
  REQUIRE(unstopped.exit_code == 0);
  const auto plain = parse_jsonl(unstopped.out);
  std::string first;
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--set", "run.batching=static", "--set", "run.max_batch_size=1"},
        {"--set", "run.batching=static", "--set", "run.max_batch_size=8"},
        {"--set", "run.batching=continuous", "--set", "run.max_batch_size=3", "--threads", "2"}}) {
    std::vector<std::string> args{"run",        pipeline("lm-generate.yaml"), "-q",
                                  "--set",      "decoder.max_new_tokens=60",  "--set",
                                  "task.stop=."};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_masque(args, prompts);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    if (first.empty()) first = r.out;
    CHECK(r.out == first);
    const auto stopped = parse_jsonl(r.out);
    REQUIRE(stopped.size() == plain.size());
    for (std::size_t i = 0; i < plain.size(); ++i) {
      const std::string text = plain[i]["text"];
      CHECK(stopped[i]["text"] == text.substr(0, text.find('.')));
    }
  }

  // Beam: no hypothesis holds the stop string.
  auto beam = run_masque({"run", pipeline("lm-generate.yaml"), "-q", "--set", "decoder.plugin=beam",
                          "--set", "decoder.beam_size=4", "--set", "decoder.num_hypotheses=3",
                          "--set", "decoder.max_new_tokens=40", "--set", "task.stop=[\".\", \"!\"]"},
                         "Once upon a time\nThe dog\n");
  REQUIRE(beam.exit_code == 0);
  for (const json& record : parse_jsonl(beam.out))
    for (const json& h : record["hypotheses"]) {
      CHECK(h["text"].get<std::string>().find('.') == std::string::npos);
      CHECK(h["text"].get<std::string>().find('!') == std::string::npos);
    }
  // An empty stop string, and --stream, are refused up front.
  CHECK(run_masque({"run", pipeline("lm-generate.yaml"), "-q", "--set", "task.stop=[\"\"]"}, "\n")
            .exit_code == 2);
  CHECK(run_masque({"run", pipeline("lm-generate.yaml"), "-q", "--stream", "--set", "task.stop=."},
                   "\n")
            .exit_code == 2);
}

TEST_CASE("lm-generate: a JSON record's own \"stop\" replaces task.stop for that record",
          "[e2e][lm][stop]") {
  const std::string input =
      "{\"text\": \"Once upon a time\", \"stop\": \"little girl\"}\n"
      "{\"text\": \"Once upon a time\"}\n"
      "{\"text\": \"Once upon a time\", \"stop\": [\"park\", \"Lily\"]}\n"
      "{\"text\": \"Once upon a time\", \"stop\": [\"\"]}\n"
      "{\"text\": \"Once upon a time\", \"stop\": 3}\n";
  const auto plain = run_masque({"run", pipeline("lm-generate.yaml"), "-q", "--input-format",
                                 "jsonl", "--set", "decoder.max_new_tokens=60"},
                                "{\"text\": \"Once upon a time\"}\n");
  REQUIRE(plain.exit_code == 0);
  const std::string full = parse_jsonl(plain.out).at(0)["text"];
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--set", "run.batching=static"},
        {"--set", "run.batching=continuous", "--set", "run.max_batch_size=2"}}) {
    std::vector<std::string> args{"run",          pipeline("lm-generate.yaml"),
                                  "-q",           "--input-format",
                                  "jsonl",        "--set",
                                  "task.stop=.",  "--set",
                                  "decoder.max_new_tokens=60"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_masque(args, input);
    INFO(r.err);
    CHECK(r.exit_code == 1);  // the two bad "stop" fields
    const auto out = parse_jsonl(r.out);
    REQUIRE(out.size() == 5);
    CHECK(out[0]["text"] == full.substr(0, full.find("little girl")));
    CHECK(out[1]["text"] == full.substr(0, full.find('.')));  // task.stop
    CHECK(out[2]["text"] == full.substr(0, std::min(full.find("park"), full.find("Lily"))));
    CHECK_THAT(out[3]["error"].get<std::string>(), Catch::Contains("empty"));
    CHECK_THAT(out[4]["error"].get<std::string>(), Catch::Contains("list of strings"));
  }
}
