// The seq2seq task's return_attention and replace_unknowns (CTranslate2's options) through the
// real binary: the rows equal a float64 plain-torch reference (attention_reference.py) within
// 1e-5 on ../shared/models/aren-transliteration (cross-attention, last decoder layer, head 0 by
// default) and on a random UniLM BERT (attention to the source segment), greedy and beam, in a
// batch and one record at a time; an <unk> is replaced by the most attended source token; bad
// options are configuration errors (exit 2).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "test_support.hpp"

using namespace masque::test;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

constexpr double kTolerance = 1e-5;

std::string translate() {
  return (source_dir() / "pipelines/translate.yaml").string();
}
std::filesystem::path aren() {
  return shared_dir() / "models/aren-transliteration";
}
std::filesystem::path bert_fixture() {
  return std::filesystem::path(MASQUE_ATTENTION_FIXTURE) / "unilm-bert";
}

// A seq2seq pipeline running the UniLM BERT fixture under the seq2seq mask.
std::string unilm_pipeline(const std::string& decoder) {
  const auto dir = own_scratch_dir("unilm_pipeline_" + decoder);
  write_file(
      dir / "unilm.yaml",
      "task: seq2seq\nmodel:\n  plugin: bert\n  path: " + bert_fixture().string() +
          "\ntokenizer:\n  plugin: wordpiece\n  vocab: " + (bert_fixture() / "vocab.txt").string() +
          "\nmask:\n  plugin: seq2seq\ndecoder:\n  plugin: " + decoder + "\n  max_new_tokens: 6\n");
  return (dir / "unilm.yaml").string();
}

std::vector<json> run(const std::string& pipeline, const std::vector<std::string>& sets,
                      const std::string& input, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"run", pipeline, "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  auto r = run_masque(args, input);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return parse_jsonl(r.out);
}

// The reference script's answer for `cases` (mode attend or forward).
json reference(const std::string& mode, const json& cases) {
  const auto dir = own_scratch_dir("attention_reference");
  write_file(dir / "cases.json", cases.dump());
  const std::string command = std::string(MASQUE_TORCH_PYTHON) + " " + MASQUE_SOURCE_DIR +
                              "/tests/attention/attention_reference.py " + mode + " " +
                              (dir / "cases.json").string() + " " + (dir / "out.json").string();
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
  return json::parse(read_file(dir / "out.json"));
}

// Source ids of a line of space-separated characters in the aren source vocabulary.
std::vector<int> aren_source(const std::string& line) {
  auto r = run_masque({"tokenize", translate(), "-q"}, line + "\n");
  REQUIRE(r.exit_code == 0);
  return parse_jsonl(r.out).at(0).at("ids").get<std::vector<int>>();
}

// Every hypothesis of every output record, as {source, tokens, attention} (best first).
struct Hyp {
  std::vector<int> source, tokens;
  json attention;
};
std::vector<Hyp> hypotheses(const std::vector<json>& out,
                            const std::vector<std::vector<int>>& src) {
  std::vector<Hyp> all;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].contains("hypotheses")) {
      for (const auto& h : out[i]["hypotheses"])
        all.push_back({src[i], h["tokens"].get<std::vector<int>>(), h["attention"]});
    } else {
      all.push_back({src[i], out[i]["tokens"].get<std::vector<int>>(), out[i]["attention"]});
    }
  }
  return all;
}

double worst_difference(const json& got, const json& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t t = 0; t < got.size(); ++t) {
    REQUIRE(got[t].size() == want[t].size());
    for (std::size_t j = 0; j < got[t].size(); ++j)
      worst = std::max(worst, std::abs(got[t][j].get<double>() - want[t][j].get<double>()));
  }
  return worst;
}

// Compares each hypothesis' rows with the reference for `model`, layer and heads.
void check_against_reference(const std::vector<Hyp>& hyps, const std::string& model,
                             const std::filesystem::path& dir, int layer, int heads) {
  json cases = json::array();
  for (const Hyp& h : hyps)
    cases.push_back({{"model", model},
                     {"dir", dir.string()},
                     {"source", h.source},
                     {"target", h.tokens},
                     {"layer", layer},
                     {"heads", heads}});
  const json want = reference("attend", cases);
  double worst_all = 0;
  for (std::size_t k = 0; k < hyps.size(); ++k) {
    INFO("hypothesis " << k << " tokens " << json(hyps[k].tokens).dump());
    REQUIRE(hyps[k].attention.size() == hyps[k].tokens.size());
    const double worst = worst_difference(hyps[k].attention, want[k]);
    CHECK(worst < kTolerance);
    worst_all = std::max(worst_all, worst);
  }
  std::printf("%s: %zu hypotheses, attention within %.2e of the float64 reference\n", model.c_str(),
              hyps.size(), worst_all);
}

const std::vector<std::string> kWords = {"س م ي ر", "ن ا د ي ة", "آ ت ز م و ن", "ر ا م ي",
                                         "آ ت ش ي س و ن"};

std::string lines(const std::vector<std::string>& words) {
  std::string text;
  for (const auto& w : words) text += w + "\n";
  return text;
}

}  // namespace

TEST_CASE(
    "return_attention on aren-transliteration equals the float64 reference (greedy, beam, "
    "n-best, prefix, end token)",
    "[attention][return-attention]") {
  std::vector<std::vector<int>> sources;
  for (const auto& w : kWords) sources.push_back(aren_source(w));
  SECTION("greedy and beam, the model's alignment (last layer, head 0)") {
    for (const char* beam : {"decoder.beam_size=1", "decoder.beam_size=2"}) {
      INFO(beam);
      const auto out = run(translate(), {beam, "task.return_attention=true"}, lines(kWords));
      REQUIRE(out.size() == kWords.size());
      check_against_reference(hypotheses(out, sources), "aren", aren(), -1, 1);
      // Each row is a distribution over the source (cross-attention sees only the source).
      for (const auto& rec : out)
        for (const auto& row : rec["attention"]) {
          double sum = 0;
          for (const auto& v : row) sum += v.get<double>();
          CHECK(std::abs(sum - 1.0) < 1e-5);
        }
    }
  }
  SECTION("n-best beam search: every hypothesis has its own rows") {
    const auto out =
        run(translate(),
            {"decoder.beam_size=4", "decoder.num_hypotheses=3", "task.return_attention=true"},
            lines(kWords));
    const auto hyps = hypotheses(out, sources);
    REQUIRE(hyps.size() == 3 * kWords.size());
    check_against_reference(hyps, "aren", aren(), -1, 1);
  }
  SECTION("another layer, every head averaged; the end token's row with return_end_token") {
    const auto out = run(translate(),
                         {"task.return_attention=true", "task.alignment_layer=2",
                          "task.alignment_heads=0", "decoder.return_end_token=true"},
                         lines(kWords));
    const auto hyps = hypotheses(out, sources);
    for (const auto& h : hyps) CHECK(h.tokens.back() == 2);  // </s> kept, one row for it
    check_against_reference(hyps, "aren", aren(), 2, 0);
  }
  SECTION("a forced prefix has rows too (CTranslate2 returns the prefix)") {
    const auto out =
        run(translate(), {"task.return_attention=true"},
            "{\"text\": \"آ ت ز م و ن\", \"prefix\": \"a c\"}\n", {"--input-format", "jsonl"});
    const auto hyps = hypotheses(out, {sources[2]});
    REQUIRE(hyps[0].tokens.size() >= 2);
    check_against_reference(hyps, "aren", aren(), -1, 1);
  }
}

TEST_CASE("return_attention: a batch of records of different lengths equals one at a time",
          "[attention][return-attention]") {
  for (const char* beam : {"decoder.beam_size=1", "decoder.beam_size=3"}) {
    INFO(beam);
    const auto batched = run(translate(), {beam, "task.return_attention=true"}, lines(kWords));
    for (std::size_t i = 0; i < kWords.size(); ++i) {
      const auto alone = run(translate(), {beam, "task.return_attention=true"}, kWords[i] + "\n");
      CHECK(alone[0]["tokens"] == batched[i]["tokens"]);
      CHECK(worst_difference(alone[0]["attention"], batched[i]["attention"]) < 1e-6);
    }
  }
}

TEST_CASE("return_attention: an empty source gives empty rows without running the model",
          "[attention][return-attention]") {
  const auto out = run(translate(), {"task.return_attention=true"}, "\n");
  CHECK(out[0]["tokens"] == json::array());
  CHECK(out[0]["attention"] == json::array());
}

TEST_CASE("return_attention: a truncated source keeps its columns, at 0 (max_input_length)",
          "[attention][return-attention]") {
  const auto out =
      run(translate(), {"task.return_attention=true", "task.max_input_length=3"}, "آ ت ز م و ن\n");
  REQUIRE(out[0].contains("note"));
  for (const auto& row : out[0]["attention"]) {
    REQUIRE(row.size() == 6);
    for (std::size_t j = 3; j < 6; ++j) CHECK(row[j] == 0.0);
  }
}

TEST_CASE(
    "return_attention on a UniLM BERT: attention to the source segment equals the "
    "reference",
    "[attention][return-attention][unilm]") {
  const std::vector<std::string> texts = {"the cat sat on a mat", "a big dog", "it was red"};
  std::vector<std::vector<int>> sources;
  for (const auto& t : texts) {
    auto r = run_masque({"tokenize", unilm_pipeline("greedy"), "-q"}, t + "\n");
    REQUIRE(r.exit_code == 0);
    sources.push_back(parse_jsonl(r.out).at(0).at("ids").get<std::vector<int>>());
    CHECK(sources.back().front() == 2);  // [CLS] ... [SEP]: the source segment
    CHECK(sources.back().back() == 3);
  }
  for (const std::string decoder : {"greedy", "beam"}) {
    INFO(decoder);
    std::vector<std::string> sets = {"task.return_attention=true", "task.alignment_heads=0"};
    if (decoder == "beam") sets.push_back("decoder.beam_size=3");
    const auto out = run(unilm_pipeline(decoder), sets, lines(texts));
    const auto hyps = hypotheses(out, sources);
    check_against_reference(hyps, "unilm", bert_fixture(), -1, 0);
    // The first row (predicted at [SEP]) sees only the source: it sums to 1; later rows share
    // their mass with the target so far.
    for (const auto& h : hyps) {
      if (h.attention.empty()) continue;
      double sum = 0;
      for (const auto& v : h.attention[0]) sum += v.get<double>();
      CHECK(std::abs(sum - 1.0) < 1e-5);
    }
  }
  SECTION("one at a time equals the batch") {
    const auto batched =
        run(unilm_pipeline("greedy"), {"task.return_attention=true"}, lines(texts));
    for (std::size_t i = 0; i < texts.size(); ++i) {
      const auto alone =
          run(unilm_pipeline("greedy"), {"task.return_attention=true"}, texts[i] + "\n");
      CHECK(worst_difference(alone[0]["attention"], batched[i]["attention"]) < 1e-6);
    }
  }
}

TEST_CASE("replace_unknowns replaces a generated <unk> by the most attended source token",
          "[attention][replace-unknowns]") {
  // Every target token but </s> (2) and <unk> (42) suppressed: the first token must be <unk>.
  std::string suppressed = "decoder.suppress_sequences=[";
  for (int id = 0; id < 43; ++id) {
    if (id == 2 || id == 42) continue;
    suppressed += (suppressed.back() == '[' ? "\"" : ", \"") + std::to_string(id) + "\"";
  }
  suppressed += "]";
  const std::string word = "آ ت ز م و ن";
  const auto source = aren_source(word);
  for (const char* beam : {"decoder.beam_size=1", "decoder.beam_size=2"}) {
    INFO(beam);
    const auto out = run(translate(),
                         {beam, suppressed, "decoder.max_new_tokens=3",
                          "task.replace_unknowns=true", "task.return_attention=true"},
                         word + "\n");
    const auto tokens = out[0]["tokens"].get<std::vector<int>>();
    REQUIRE(!tokens.empty());
    REQUIRE(tokens[0] == 42);  // <unk> was generated, and the ids keep it
    // The reference's most attended source position for each <unk>.
    const json want = reference("attend", json::array({{{"model", "aren"},
                                                        {"dir", aren().string()},
                                                        {"source", source},
                                                        {"target", tokens},
                                                        {"layer", -1},
                                                        {"heads", 1}}}))[0];
    std::vector<std::string> chars;
    for (std::size_t p = 0, q; p < word.size(); p = q + 1) {
      q = word.find(' ', p);
      if (q == std::string::npos) q = word.size();
      chars.push_back(word.substr(p, q - p));
    }
    std::string expected;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const auto& row = want[t];
      std::size_t best = 0;
      for (std::size_t j = 1; j < row.size(); ++j)
        if (row[j].get<double>() > row[best].get<double>()) best = j;
      if (!expected.empty()) expected += ' ';
      REQUIRE(tokens[t] == 42);  // only <unk> (and the end) can be produced
      expected += chars[best];
    }
    CHECK(out[0]["text"] == expected);
  }
  SECTION("without replace_unknowns the text keeps no source token") {
    const auto plain = run(
        translate(), {suppressed, "decoder.max_new_tokens=3", "decoder.beam_size=1"}, word + "\n");
    CHECK(plain[0]["text"].get<std::string>().find("آ") == std::string::npos);
  }
  SECTION("a forced <unk> prefix is replaced too") {
    const auto out =
        run(translate(), {"task.replace_unknowns=true"},
            "{\"text\": \"" + word + "\", \"prefix\": \"<unk>\"}\n", {"--input-format", "jsonl"});
    REQUIRE(out[0]["tokens"][0] == 42);
    const std::string text = out[0]["text"];
    bool from_source = false;
    for (const std::string c : {"آ", "ت", "ز", "م", "و", "ن"})
      from_source = from_source || text.rfind(c, 0) == 0;
    CHECK(from_source);
    CHECK_FALSE(out[0].contains("attention"));  // only replace_unknowns was asked
  }
}

TEST_CASE("return_attention / replace_unknowns configuration errors exit 2 with a message",
          "[attention][errors]") {
  auto fails = [](const std::vector<std::string>& args, const std::string& message) {
    auto r = run_masque(args, "س م ي ر\n");
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(message));
  };
  fails({"run", translate(), "--set", "task.return_attention=true", "--set",
         "task.alignment_layer=6"},
        "alignment_layer: 6 is not a layer");
  fails({"run", translate(), "--set", "task.replace_unknowns=true", "--set",
         "task.alignment_heads=9"},
        "alignment_heads: 9 heads asked");
  // A task that generates without a source has no such option.
  fails({"run", (source_dir() / "pipelines/lm-generate.yaml").string(), "--set",
         "task.return_attention=true"},
        "return_attention");
}
