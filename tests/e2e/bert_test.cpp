// One BERT-like network under different masks, end to end: permutation-LM scoring and
// infilling, UniLM seq2seq, fill-mask, forward under every mask.
#include <catch2/catch.hpp>

#include <cmath>

#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;

namespace {

std::string pipeline(const char* name) {
  return (source_dir() / "pipelines" / name).string();
}

json run_one(const std::vector<std::string>& args, const std::string& input) {
  auto r = run_masque(args, input);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return parse_jsonl(r.out).at(0);
}

}  // namespace

TEST_CASE("plm-score: 北京欢迎你 in the order 迎 → 京 → 你 → 欢 → 北, three methods",
          "[e2e][bert]") {
  std::vector<std::string> base{"run", pipeline("plm-score.yaml"), "-q", "--set",
                                "mask.order=3,1,4,2,0"};
  json query = run_one(base, "北京欢迎你\n");
  CHECK(query["tokens"] == json({"北", "京", "欢", "迎", "你"}));
  CHECK(query["order"] == json({3, 1, 4, 2, 0}));
  REQUIRE(query["token_logprobs"].size() == 5);
  double sum = 0;
  for (const auto& lp : query["token_logprobs"]) sum += lp.get<double>();
  CHECK(std::abs(sum - query["logprob"].get<double>()) < 1e-9);

  // The one-pass query stream equals scoring one step at a time (the cached incremental method).
  auto step_args = base;
  step_args.insert(step_args.end(), {"--set", "task.method=incremental"});
  json stepwise = run_one(step_args, "北京欢迎你\n");
  for (std::size_t t = 0; t < 5; ++t)
    CHECK(std::abs(query["token_logprobs"][t].get<double>() -
                   stepwise["token_logprobs"][t].get<double>()) < 1e-5);

  // The visible-[MASK] method conditions differently (plain BERT checkpoints): other numbers.
  auto visible_args = base;
  visible_args.insert(visible_args.end(), {"--set", "task.method=visible-mask"});
  json visible = run_one(visible_args, "北京欢迎你\n");
  CHECK(std::abs(visible["logprob"].get<double>() - query["logprob"].get<double>()) > 1e-6);
}

TEST_CASE("plm-score: the same order and seed give identical scores, other orders other scores",
          "[e2e][bert]") {
  auto score = [](const std::string& order, const std::string& seed) {
    return run_one({"run", pipeline("plm-score.yaml"), "-q", "--set", "mask.order=" + order,
                    "--set", "mask.seed=" + seed},
                   "北京欢迎你\n");
  };
  json a = score("random", "7"), b = score("random", "7"), c = score("random", "8");
  CHECK(a == b);
  CHECK(a["order"] != c["order"]);
  CHECK(a["logprob"] != c["logprob"]);
  json l2r = score("left-to-right", "0"), r2l = score("right-to-left", "0");
  CHECK(l2r["order"] == json({0, 1, 2, 3, 4}));
  CHECK(r2l["order"] == json({4, 3, 2, 1, 0}));
  CHECK(l2r["logprob"] != r2l["logprob"]);
  // A record's own order wins over the pipeline's.
  json own = run_one({"run", pipeline("plm-score.yaml"), "-q", "--input-format", "jsonl"},
                     R"({"text": "北京欢迎你", "order": [3, 1, 4, 2, 0]})"
                     "\n");
  CHECK(own["order"] == json({3, 1, 4, 2, 0}));
  json piped = run_one({"run", pipeline("plm-score.yaml"), "-q", "--set", "mask.order=3,1,4,2,0"},
                       "北京欢迎你\n");
  CHECK(own["logprob"] == piped["logprob"]);
}

TEST_CASE("seq2seq (UniLM): 你想吃啥 → a target, batches equal one record at a time",
          "[e2e][bert]") {
  json one = run_one({"run", pipeline("seq2seq-unilm.yaml"), "-q"}, "你想吃啥\n");
  CHECK(!one["tokens"].empty());
  std::string input =
      "你想吃啥\n北京欢迎你\n白切鸡\n我\n今天天气很好，我们去公园吧\n你好\n谢谢你的帮助\n啊\n";
  auto run = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args{"run", pipeline("seq2seq-unilm.yaml"), "-q"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_masque(args, input);
    REQUIRE(r.exit_code == 0);
    return r.out;
  };
  const std::string batched = run({"--set", "task.max_batch_size=8"});
  CHECK(parse_jsonl(batched).size() == 8);
  CHECK(parse_jsonl(batched)[0] == one);
  CHECK(run({"--set", "task.max_batch_size=1"}) == batched);
  const std::string beam = run({"--set", "decoder.plugin=beam", "--set", "decoder.beam_size=3",
                                "--set", "task.max_batch_size=8"});
  CHECK(run({"--set", "decoder.plugin=beam", "--set", "decoder.beam_size=3", "--set",
             "task.max_batch_size=1"}) == beam);
}

TEST_CASE("plm-generate: fills every [MASK] in the chosen order, methods agree on positions",
          "[e2e][bert]") {
  json l2r = run_one({"run", pipeline("plm-generate.yaml"), "-q"}, "[MASK] 京 欢 迎 [MASK]\n");
  REQUIRE(l2r["filled"].size() == 2);
  CHECK(l2r["filled"][0]["position"] == 1);  // after [CLS]
  CHECK(l2r["filled"][1]["position"] == 5);
  json r2l =
      run_one({"run", pipeline("plm-generate.yaml"), "-q", "--set", "mask.order=right-to-left"},
              "[MASK] 京 欢 迎 [MASK]\n");
  CHECK(r2l["filled"][0]["position"] == 5);
  json conf = run_one({"run", pipeline("plm-generate.yaml"), "-q", "--set",
                       "task.order_by=confidence", "--set", "task.method=incremental"},
                      "[MASK] 京 欢 迎 [MASK]\n");
  CHECK(conf["filled"].size() == 2);
  CHECK(conf["filled"][0]["logprob"].get<double>() >=
        conf["filled"][1]["logprob"].get<double>() - 1.0);
  json beam = run_one({"run", pipeline("plm-generate.yaml"), "-q", "--set", "decoder.plugin=beam",
                       "--set", "decoder.beam_size=4", "--set", "decoder.num_hypotheses=2"},
                      "[MASK] 京 欢 迎 [MASK]\n");
  CHECK(beam["hypotheses"].size() == 2);
  CHECK(beam["score"].get<double>() >= l2r["score"].get<double>() - 1e-9);
}

TEST_CASE("fill: top-k candidates per [MASK] and the filled text", "[e2e][bert]") {
  json out = run_one({"run", pipeline("fill.yaml"), "-q", "--set", "task.top_k=3"},
                     "the cat [MASK] on the [MASK]\n");
  REQUIRE(out["masks"].size() == 2);
  CHECK(out["masks"][0]["position"] == 3);
  REQUIRE(out["masks"][0]["candidates"].size() == 3);
  auto lp0 = out["masks"][0]["candidates"][0]["logprob"].get<double>();
  CHECK(lp0 <= 0);
  CHECK(lp0 >= out["masks"][0]["candidates"][1]["logprob"].get<double>());
  CHECK(out["text"].get<std::string>().find("[MASK]") == std::string::npos);
  auto none = run_masque({"run", pipeline("fill.yaml"), "-q"}, "no mask here\n");
  CHECK(none.exit_code == 1);
  CHECK(parse_jsonl(none.out).at(0)["error"].get<std::string>().find("no [MASK]") !=
        std::string::npos);
}

TEST_CASE("forward: tiny-bert-uncased under every mask matches the reference", "[e2e][bert]") {
  auto ref = json::parse(read_file(shared_dir() / "models/tiny-bert-uncased/reference.json"));
  const auto& input = ref["input"];
  const int real = input["real_length"].get<int>();
  std::vector<int> ids(input["input_ids"].begin(), input["input_ids"].begin() + real);
  std::vector<int> types(input["token_type_ids"].begin(), input["token_type_ids"].begin() + real);
  auto dir = scratch_dir("e2e_bert_forward");
  for (const char* mask : {"bidirectional", "causal", "seq2seq", "permutation"}) {
    INFO(mask);
    const auto& m = ref["masks"][mask];
    write_file(
        dir / "p.yaml",
        std::string(
            "task:\n  name: forward\n  hidden_states: true\nmodel:\n  plugin: bert\n  path: ") +
            (shared_dir() / "models/tiny-bert-uncased").string() + "\nmask: " + mask + "\n");
    json record = {{"ids", ids}, {"token_type_ids", types}};
    if (std::string(mask) == "seq2seq") record["segments"] = m["segment_ids"];
    if (std::string(mask) == "permutation") record["order"] = m["order"];
    json out = run_one({"run", (dir / "p.yaml").string(), "-q", "--input-format", "jsonl"},
                       record.dump() + "\n");
    REQUIRE(out["positions"].size() == static_cast<std::size_t>(real));
    for (int t = 0; t < real; ++t) {
      const auto& want = m["positions"][t];
      const auto& got = out["positions"][t];
      CHECK(std::abs(got["logsumexp"].get<double>() - want["logsumexp"].get<double>()) < 1e-4);
      CHECK(std::abs(got["top_logits"][0].get<double>() - want["top10_logits"][0].get<double>()) <
            1e-4);
    }
    const auto& hidden = m["hidden_states"];
    for (std::size_t k = 0; k < hidden["positions"].size(); ++k) {
      int p = hidden["positions"][k].get<int>();
      for (std::size_t d = 0; d < hidden["values"][k].size(); ++d)
        CHECK(std::abs(out["positions"][p]["hidden"][d].get<double>() -
                       hidden["values"][k][d].get<double>()) < 1e-4);
    }
  }
}
