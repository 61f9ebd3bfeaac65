// The CLI surface: version, help, exit codes, and `masque mask` on DESIGN.md's three examples.
#include <catch2/catch.hpp>

#include <string>

#include "masque/abi.hpp"

#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;

TEST_CASE("masque --version names the version and the plugin ABI", "[cli]") {
  auto r = run_masque({"--version"});
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("masque 0.") == 0);
  CHECK(r.out.find("plugin ABI " + std::to_string(masque::kAbiMajor) + ".") != std::string::npos);
}

TEST_CASE("every subcommand has --help with examples, bad usage exits 2", "[cli]") {
  for (const char* cmd : {"run", "plugins", "tasks", "mask", "tokenize"}) {
    auto r = run_masque({cmd, "--help"});
    INFO(cmd);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("Usage: masque") != std::string::npos);
  }
  CHECK(run_masque({"run", "--help"}).out.find("Examples:") != std::string::npos);
  CHECK(run_masque({"run", "--help"}).out.find("Exit codes") != std::string::npos);
  auto unknown = run_masque({"frobnicate"});
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find("unknown command 'frobnicate'") != std::string::npos);
  auto bad_option = run_masque({"run", "--no-such-option"});
  CHECK(bad_option.exit_code == 2);
  auto no_pipeline = run_masque({"run"});
  CHECK(no_pipeline.exit_code == 2);
  CHECK(no_pipeline.err.find("missing PIPELINE") != std::string::npos);
  auto missing_file = run_masque({"run", "/no/such/pipeline.yaml"});
  CHECK(missing_file.exit_code == 2);
  CHECK(missing_file.err.find("/no/such/pipeline.yaml: cannot open the pipeline file") !=
        std::string::npos);
  auto none = run_masque({});
  CHECK(none.exit_code == 2);
}

namespace {
json mask_json(std::vector<std::string> args) {
  args.insert(args.begin(), "mask");
  args.push_back("--format");
  args.push_back("json");
  auto r = run_masque(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}
}  // namespace

TEST_CASE("masque mask: causal over 北 京 欢 迎 你", "[cli][mask]") {
  json j = mask_json({"--strategy", "causal", "北", "京", "欢", "迎", "你"});
  CHECK(j["tokens"] == json({"北", "京", "欢", "迎", "你"}));
  CHECK(j["allowed"] ==
        json::parse(R"([[1,0,0,0,0],[1,1,0,0,0],[1,1,1,0,0],[1,1,1,1,0],[1,1,1,1,1]])"));
  CHECK(j["incremental"] == true);
}

TEST_CASE("masque mask: seq2seq over [CLS] 你 想 吃 啥 [SEP] 白 切 鸡 [SEP]", "[cli][mask]") {
  json j = mask_json({"--strategy", "seq2seq", "--segments", "0,0,0,0,0,0,1,1,1,1", "[CLS]", "你",
                      "想", "吃", "啥", "[SEP]", "白", "切", "鸡", "[SEP]"});
  json expected = json::parse(R"([
    [1,1,1,1,1,1,0,0,0,0],[1,1,1,1,1,1,0,0,0,0],[1,1,1,1,1,1,0,0,0,0],
    [1,1,1,1,1,1,0,0,0,0],[1,1,1,1,1,1,0,0,0,0],[1,1,1,1,1,1,0,0,0,0],
    [1,1,1,1,1,1,1,0,0,0],[1,1,1,1,1,1,1,1,0,0],[1,1,1,1,1,1,1,1,1,0],
    [1,1,1,1,1,1,1,1,1,1]])");
  CHECK(j["allowed"] == expected);
  auto missing = run_masque({"mask", "--strategy", "seq2seq", "a", "b"});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("one segment id per token") != std::string::npos);
}

TEST_CASE("masque mask: permutation 迎 → 京 → 你 → 欢 → 北 (order 3,1,4,2,0)", "[cli][mask]") {
  json j = mask_json(
      {"--strategy", "permutation", "--order", "3,1,4,2,0", "北", "京", "欢", "迎", "你"});
  // rank: 北 4, 京 1, 欢 3, 迎 0, 你 2; a token sees itself and the tokens before it in the order.
  CHECK(j["allowed"] ==
        json::parse(R"([[1,1,1,1,1],[0,1,0,1,0],[0,1,1,1,1],[0,0,0,1,0],[0,1,0,1,1]])"));
  CHECK(j["order"] == json({3, 1, 4, 2, 0}));

  auto grid = run_masque(
      {"mask", "--strategy", "permutation", "--order", "3,1,4,2,0", "北", "京", "欢", "迎", "你"});
  REQUIRE(grid.exit_code == 0);
  CHECK(grid.out.find("迎 → 京 → 你 → 欢 → 北") != std::string::npos);
  CHECK(grid.out.find("3 迎  ·  ·  ·  ■  ·") != std::string::npos);

  auto bad = run_masque({"mask", "--strategy", "permutation", "--order", "0,1", "a", "b", "c"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("the order has 2 positions but the sequence has 3 tokens") !=
        std::string::npos);
}

TEST_CASE("masque mask: the query stream predicts each position from the ones before it",
          "[cli][mask]") {
  json j = mask_json(
      {"--strategy", "permutation", "--order", "2,0,1", "--set", "stream=query", "a", "b", "c"});
  CHECK(j["tokens"] == json({"a", "b", "c", "?c", "?a", "?b"}));
  // Content rows as in the plain permutation; query t sees content of steps < t and itself.
  CHECK(j["allowed"] == json::parse(R"([
    [1,0,1,0,0,0],[1,1,1,0,0,0],[0,0,1,0,0,0],
    [0,0,0,1,0,0],[0,0,1,0,1,0],[1,0,1,0,0,1]])"));
}

TEST_CASE("masque mask: random orders are seeded and differ per record", "[cli][mask]") {
  std::vector<std::string> tokens{"a", "b", "c", "d", "e", "f", "g", "h"};
  auto order = [&](const std::string& seed, const std::string& record) {
    std::vector<std::string> args{"--strategy", "permutation", "--order",     "random",
                                  "--seed",     seed,          "--record-id", record};
    args.insert(args.end(), tokens.begin(), tokens.end());
    return mask_json(args)["order"];
  };
  CHECK(order("7", "0") == order("7", "0"));
  CHECK(order("7", "0") != order("8", "0"));
  CHECK(order("7", "0") != order("7", "1"));
}

TEST_CASE("masque mask: an order that is not a permutation is a usage error", "[cli][mask]") {
  for (const char* order : {"0,0", "0,1,2"}) {
    auto r = run_masque({"mask", "--strategy", "permutation", "--order", order, "a", "b"});
    INFO(order << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("order") != std::string::npos);
  }
}

TEST_CASE("masque mask: JSON of a long sequence is one whole document", "[cli][mask]") {
  std::vector<std::string> args{"--strategy", "causal"};
  for (int i = 0; i < 300; ++i) args.push_back(std::to_string(i));
  json j = mask_json(args);
  REQUIRE(j["allowed"].size() == 300);
  CHECK(j["allowed"][299].size() == 300);
  CHECK(j["allowed"][0][1] == 0);
  CHECK(j["allowed"][299][0] == 1);
  CHECK(j["incremental"] == true);
}

TEST_CASE("masque mask: no tokens or a negative record number are usage errors", "[cli][mask]") {
  auto none = run_masque({"mask", "--strategy", "causal"});
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("give the tokens") != std::string::npos);
  auto negative = run_masque({"mask", "--strategy", "causal", "--record-id", "-1", "a", "b"});
  CHECK(negative.exit_code == 2);
  CHECK(negative.err.find("--record-id") != std::string::npos);
}

TEST_CASE("masque plugins: integer ranges are shown in full", "[cli]") {
  auto r = run_masque({"plugins", "windowed-causal"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("range [1, 2147483647]") != std::string::npos);
  // The error for a value outside it says the same.
  const auto refused =
      run_masque({"mask", "--strategy", "windowed-causal", "--set", "window=0", "a", "b"});
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("expected an integer in [1, 2147483647], got 0") != std::string::npos);
}

TEST_CASE("masque tasks --json: every task and the run settings, as with NAME", "[cli]") {
  auto all = run_masque({"tasks", "--json"});
  INFO(all.err);
  REQUIRE(all.exit_code == 0);
  const auto j = nlohmann::json::parse(all.out);
  REQUIRE(j["tasks"].size() > 5);
  bool found = false;
  for (const auto& t : j["tasks"]) {
    if (t["name"] != "lm-score") continue;
    found = true;
    auto one = run_masque({"tasks", "lm-score", "--json"});
    REQUIRE(one.exit_code == 0);
    CHECK(nlohmann::json::parse(one.out) == t);
    CHECK(t["default_plugins"]["mask"] == "causal");
  }
  CHECK(found);
  bool batching = false;
  for (const auto& p : j["run_settings"]) batching |= p["name"] == "batching";
  CHECK(batching);
}
