// `masque attention` and `masque mask --format svg` through the real binary, on the random BERT
// fixture under each of the four mask strategies: the SVG's own numbers (data-* attributes of
// its cells) say masked cells are 0 and each row of allowed cells sums to 1, they agree with the
// JSON output, with the mask's pattern, and with the float64 plain-torch reference.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>

#include "test_support.hpp"

using namespace masque::test;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

std::filesystem::path bert_fixture() {
  return std::filesystem::path(MASQUE_ATTENTION_FIXTURE) / "unilm-bert";
}

// A pipeline of the fixture under `mask` (a YAML mapping body, indented by two spaces).
std::string pipeline(const std::string& name, const std::string& mask) {
  const auto dir = own_scratch_dir("attention_pipeline_" + name);
  write_file(dir / "p.yaml", "model:\n  plugin: bert\n  path: " + bert_fixture().string() +
                                 "\ntokenizer:\n  plugin: wordpiece\n  vocab: " +
                                 (bert_fixture() / "vocab.txt").string() + "\nmask:\n" + mask);
  return (dir / "p.yaml").string();
}

struct Cell {
  int head, row, col;
  bool allowed;
  double p;
};

// Every heatmap cell of an SVG, from its data-* attributes.
std::vector<Cell> cells(const std::string& svg) {
  static const std::regex rect(
      "<rect class=\"cell\"[^>]*data-head=\"(-?\\d+)\" data-row=\"(\\d+)\" data-col=\"(\\d+)\" "
      "data-allowed=\"([01])\"(?: data-p=\"([^\"]+)\")?");
  std::vector<Cell> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), rect); it != std::sregex_iterator();
       ++it) {
    const auto& m = *it;
    out.push_back({std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), m[4] == "1",
                   m[5].matched ? std::stod(m[5]) : -1.0});
  }
  return out;
}

struct Strategy {
  std::string name, mask, text;
};

const std::vector<Strategy> kStrategies = {
    {"bidirectional", "  plugin: bidirectional\n", "the cat sat on a mat"},
    {"causal", "  plugin: causal\n", "the cat sat on a mat"},
    {"seq2seq", "  plugin: seq2seq\n", "the big cat\tsat on a mat"},
    {"permutation", "  plugin: permutation\n  order: random\n  seed: 3\n  stream: query\n",
     "the cat sat on"},
};

}  // namespace

TEST_CASE("masque attention: under every mask strategy, masked cells are 0 and rows sum to 1",
          "[attention][attention-command]") {
  for (const Strategy& s : kStrategies) {
    INFO(s.name);
    const std::string file = pipeline(s.name, s.mask);
    const auto dir = own_scratch_dir("attention_svg_" + s.name);
    const auto svg_path = dir / "a.svg";
    auto r = run_masque({"attention", file, s.text, "-o", svg_path.string(), "--json"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const json j = json::parse(r.out);
    const std::string svg = read_file(svg_path);
    CHECK_THAT(svg, Contains("<svg"));
    const auto all = cells(svg);
    const auto n = j["tokens"].size();
    const std::size_t heads = j["heads"].size();
    REQUIRE(heads == 4);  // every head of the layer, as a grid
    REQUIRE(all.size() == heads * n * n);
    // From the SVG alone: masked cells are 0, every row with an allowed cell sums to 1.
    std::map<std::pair<int, int>, double> sums;
    std::map<std::pair<int, int>, bool> any;
    std::size_t masked = 0;
    for (const Cell& c : all) {
      REQUIRE(c.p >= 0);
      if (!c.allowed) {
        CHECK(c.p == 0.0);
        ++masked;
      }
      sums[{c.head, c.row}] += c.p;
      any[{c.head, c.row}] = any[{c.head, c.row}] || c.allowed;
      // The SVG's pattern is the mask's, its numbers the JSON's.
      CHECK(c.allowed == (j["allowed"][c.row][c.col] == 1));
      CHECK(std::abs(c.p - j["attention"][c.head][c.row][c.col].get<double>()) < 1e-6);
    }
    for (const auto& [key, sum] : sums) {
      INFO("head " << key.first << " row " << key.second);
      CHECK(std::abs(sum - (any[key] ? 1.0 : 0.0)) < 1e-5);
    }
    if (s.name != "bidirectional") CHECK(masked > 0);
    if (s.name == "permutation") CHECK(j["tokens"].size() > 6);  // the query stream is drawn

    // The numbers are the network's: the float64 reference under the same pattern.
    if (s.name == "bidirectional" || s.name == "causal") {
      auto t = run_masque({"tokenize", file, "-q"}, s.text + "\n");
      REQUIRE(t.exit_code == 0);
      const auto ids = parse_jsonl(t.out).at(0)["ids"].get<std::vector<int>>();
      REQUIRE(ids.size() == n);
      const auto cases = json::array({{{"dir", bert_fixture().string()},
                                       {"ids", ids},
                                       {"allowed", j["allowed"]},
                                       {"layer", -1}}});
      const auto ref_dir = own_scratch_dir("attention_command_reference");
      write_file(ref_dir / "cases.json", cases.dump());
      const std::string command = std::string(MASQUE_TORCH_PYTHON) + " " + MASQUE_SOURCE_DIR +
                                  "/tests/attention/attention_reference.py forward " +
                                  (ref_dir / "cases.json").string() + " " +
                                  (ref_dir / "out.json").string();
      REQUIRE(std::system(command.c_str()) == 0);
      const json want = json::parse(read_file(ref_dir / "out.json"))[0];
      double worst = 0;
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t k = 0; k < n; ++k)
            worst = std::max(worst, std::abs(j["attention"][h][i][k].get<double>() -
                                             want[h][i][k].get<double>()));
      CHECK(worst < 1e-5);
    }
  }
}

TEST_CASE("masque attention: one head and a chosen layer, and bad options exit 2",
          "[attention][attention-command]") {
  const std::string file = pipeline("causal_one", "  plugin: causal\n");
  auto r = run_masque({"attention", file, "the cat sat", "--layer", "0", "--head", "2", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  CHECK(j["layer"] == 0);
  CHECK(j["heads"] == json::array({2}));
  auto svg = run_masque({"attention", file, "the cat sat", "--layer", "0", "--head", "2"});
  REQUIRE(svg.exit_code == 0);
  for (const Cell& c : cells(svg.out)) CHECK(c.head == 2);

  auto bad = [&](const std::vector<std::string>& args, const std::string& message) {
    auto e = run_masque(args);
    INFO(e.err);
    CHECK(e.exit_code == 2);
    CHECK_THAT(e.err, Contains(message));
  };
  bad({"attention", file, "the cat", "--head", "4"}, "--head: 4 is not a head");
  bad({"attention", file, "the cat", "--layer", "3"}, "attention of layer 3");
  bad({"attention", file, "the cat", "--columns", "0"}, "--columns: expected 1 or more");
  bad({"attention", pipeline("seq2seq_bad", "  plugin: seq2seq\n"), "no tab here"},
      "SOURCE<TAB>TARGET");
  bad({"attention", (source_dir() / "pipelines/translate.yaml").string(), "س م ي ر"},
      "no `mask` section");
}

TEST_CASE("masque mask --format svg draws the allowed cells", "[attention][mask-svg]") {
  const auto dir = own_scratch_dir("mask_svg");
  auto r = run_masque({"mask", "--strategy", "causal", "--format", "svg", "-o",
                       (dir / "m.svg").string(), "a", "b", "c", "d"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto all = cells(read_file(dir / "m.svg"));
  REQUIRE(all.size() == 16);
  for (const Cell& c : all) CHECK(c.allowed == (c.col <= c.row));
  auto json_out = run_masque({"mask", "--strategy", "seq2seq", "--segments", "0,0,1,1", "--format",
                              "json", "a", "b", "c", "d"});
  auto svg_out = run_masque({"mask", "--strategy", "seq2seq", "--segments", "0,0,1,1", "--format",
                             "svg", "a", "b", "c", "d"});
  REQUIRE(json_out.exit_code == 0);
  REQUIRE(svg_out.exit_code == 0);
  const json j = json::parse(json_out.out);
  for (const Cell& c : cells(svg_out.out)) CHECK(c.allowed == (j["allowed"][c.row][c.col] == 1));
}
