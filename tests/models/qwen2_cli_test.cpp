// The qwen2 plugin through the CLI (lm-score, lm-generate with greedy and beam search, and the
// windowed-causal mask strategy) on the generated Qwen2 folders, against qwen2_reference.py.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "lm_reference.hpp"
#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path kFixture = MASQUE_QWEN2_FIXTURE;

std::string ids_line(const json& ids) {
  std::string line;
  for (const auto& id : ids) {
    if (!line.empty()) line += ' ';
    line += std::to_string(id.get<int>());
  }
  return line + "\n";
}

fs::path pipeline(const std::string& variant, const std::string& task, const std::string& extra) {
  const fs::path dir = scratch_dir("qwen2_cli_" + variant + "_" + task);
  const std::string plugin = variant.rfind("llama", 0) == 0 ? "llama" : "qwen2";
  write_file(dir / "p.yaml", "task:\n  name: " + task + "\n" + extra + "model:\n  plugin: " +
                                 plugin + "\n  path: " + (kFixture / variant).string() + "\n");
  return dir / "p.yaml";
}

// -log p(x_{t+1} | x_<=t) summed over a sequence, from reference logits rows.
double nll_of(const json& logits, const json& ids) {
  double nll = 0;
  for (std::size_t t = 0; t + 1 < ids.size(); ++t) {
    const auto row = logits[t].get<std::vector<double>>();
    double mx = row[0];
    for (double x : row) mx = std::max(mx, x);
    double sum = 0;
    for (double x : row) sum += std::exp(x - mx);
    nll -= row[ids[t + 1].get<int>()] - mx - std::log(sum);
  }
  return nll;
}

}  // namespace

TEST_CASE("qwen2 CLI: lm-score matches the reference NLLs, causal and windowed-causal",
          "[qwen2][e2e]") {
  const json ref = read_json(kFixture / "reference.json");
  for (const char* variant : {"qwen2-tied", "qwen2-window", "llama-window"}) {
    for (const bool window3 : {false, true}) {
      DYNAMIC_SECTION(variant << (window3 ? " windowed-causal 3" : " causal")) {
        std::string input;
        std::vector<json> seqs;
        for (const auto& s : ref[variant]["sequences"])
          if (s["ids"].size() >= 2) {
            seqs.push_back(s);
            input += ids_line(s["ids"]);
          }
        const std::string mask = window3 ? "mask:\n  plugin: windowed-causal\n  window: 3\n" : "";
        auto r = run_masque(
            {"run", pipeline(variant, "lm-score", mask).string(), "--input-format", "ids", "-q"},
            input);
        REQUIRE(r.exit_code == 0);
        const auto out = parse_jsonl(r.out);
        REQUIRE(out.size() == seqs.size());
        for (std::size_t i = 0; i < seqs.size(); ++i) {
          const double want =
              nll_of(seqs[i][window3 ? "window3_logits" : "logits"], seqs[i]["ids"]);
          CHECK(std::abs(out[i]["nll"].get<double>() - want) < 1e-4);
        }
      }
    }
  }
}

TEST_CASE("qwen2 CLI: lm-generate greedy and beam give the reference tokens", "[qwen2][e2e]") {
  const json ref = read_json(kFixture / "reference.json");
  for (const char* variant : {"qwen2-tied", "qwen2-window", "llama-window"}) {
    DYNAMIC_SECTION(variant) {
      const json& v = ref[variant];
      auto greedy = run_masque(
          {"run",
           pipeline(variant, "lm-generate", "decoder:\n  plugin: greedy\n  max_new_tokens: 10\n")
               .string(),
           "--input-format", "ids", "-q"},
          ids_line(v["prompt"]));
      REQUIRE(greedy.exit_code == 0);
      CHECK(parse_jsonl(greedy.out).at(0)["tokens"] == v["greedy_ids"]);

      REQUIRE(v["beam3_gap"].get<double>() > 1e-3);  // the best beam is not a float32 tie
      auto beam =
          run_masque({"run",
                      pipeline(variant, "lm-generate",
                               "decoder:\n  plugin: beam\n  beam_size: 3\n  max_new_tokens: 6\n")
                          .string(),
                      "--input-format", "ids", "-q"},
                     ids_line(v["prompt"]));
      REQUIRE(beam.exit_code == 0);
      CHECK(parse_jsonl(beam.out).at(0)["tokens"] == v["beam3_ids"]);
    }
  }
}
