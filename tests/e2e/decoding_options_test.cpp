// CTranslate2's decoding options on the transliteration model (../shared/models/aren-
// transliteration, CTranslate2's own test model), greedy and beam: the expectations of its
// python/tests/test_translator.py where they apply without a vocabulary map, and the documented
// semantics of each option otherwise. Target ids: a 3, n 7, o 8, s 9, t 11, m 13, u 14, z 23,
// </s> 2.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "test_support.hpp"

using namespace masque::test;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

const char* const kAtzmon = "آ ت ز م و ن";
const char* const kAchison = "آ ت ش ي س و ن";

std::string translate() {
  return (source_dir() / "pipelines/translate.yaml").string();
}

// Runs translate.yaml with `sets` (section.key=value) on `input`, exit code 0 required.
std::vector<json> run(const std::vector<std::string>& sets, const std::string& input,
                      const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"run", translate(), "-q"};
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run_masque(args, input);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return parse_jsonl(r.out);
}

std::string beam(int size) {
  return "decoder.beam_size=" + std::to_string(size);
}

}  // namespace

TEST_CASE("return_end_token keeps </s> in the tokens, not in the text or the score",
          "[e2e][decoding-options]") {
  for (int size : {1, 2}) {
    INFO("beam_size " << size);
    const auto plain = run({beam(size)}, std::string(kAtzmon) + "\n");
    const auto kept =
        run({beam(size), "decoder.return_end_token=true"}, std::string(kAtzmon) + "\n");
    CHECK(plain[0]["text"] == "a t z m o n");
    CHECK(kept[0]["text"] == "a t z m o n");
    auto tokens = plain[0]["tokens"];
    tokens.push_back(2);
    CHECK(kept[0]["tokens"] == tokens);
    CHECK(kept[0]["score"] == plain[0]["score"]);
  }
}

TEST_CASE("suppress_sequences: single tokens never appear, longer sequences never complete",
          "[e2e][decoding-options]") {
  // CTranslate2 test_suppress_sequences_with_vmap suppresses ["o"] and ["t", "z", "m"] on
  // atzmon (expected "a t z u m u n" under its vocabulary map).
  for (int size : {1, 2}) {
    INFO("beam_size " << size);
    const auto out = run({beam(size), "decoder.suppress_sequences=[\"8\", \"11 23 13\"]"},
                         std::string(kAtzmon) + "\n");
    const auto tokens = out[0]["tokens"].get<std::vector<int>>();
    CHECK(std::find(tokens.begin(), tokens.end(), 8) == tokens.end());
    for (std::size_t i = 0; i + 2 < tokens.size(); ++i)
      CHECK_FALSE((tokens[i] == 11 && tokens[i + 1] == 23 && tokens[i + 2] == 13));
    // CTranslate2's expectation (its vocabulary map only drops tokens this output does not use).
    CHECK(out[0]["text"] == "a t z u m u n");
    // Suppressing the end token's prefix only: "n </s>" cannot end the word after "n".
    const auto no_end =
        run({beam(size), "decoder.suppress_sequences=[\"7 2\"]", "decoder.max_new_tokens=10"},
            std::string(kAtzmon) + "\n");
    CHECK(no_end[0]["text"].get<std::string>().rfind("a t z m o n", 0) == 0);
    CHECK(no_end[0]["text"] != "a t z m o n");
  }
}

TEST_CASE("prefix_bias_beta: a strong bias follows the prefix, a weak one changes nothing",
          "[e2e][decoding-options]") {
  // CTranslate2 test_strongly_biased_target_prefix / test_weakly_biased_target_prefix.
  const std::string input =
      std::string(kAtzmon) + "\ta t s\n" + std::string(kAchison) + "\ts i o\n";
  const std::vector<std::string> tsv = {"--input-format", "tsv", "--columns", "text,prefix"};
  for (int size : {1, 2}) {
    INFO("beam_size " << size);
    const auto strong = run({beam(size), "decoder.prefix_bias_beta=0.9999999"},
                            std::string(kAtzmon) + "\ta t s\n" + kAchison + "\t\n", tsv);
    CHECK(strong[0]["text"].get<std::string>().rfind("a t s", 0) == 0);
    CHECK(strong[1]["text"] == "a c h i s o n");
    const auto free = run({beam(size)}, std::string(kAtzmon) + "\n" + kAchison + "\n");
    const auto weak = run({beam(size), "decoder.prefix_bias_beta=0.0000001"}, input, tsv);
    for (std::size_t i = 0; i < 2; ++i) {
      CHECK(weak[i]["text"] == free[i]["text"]);
      CHECK(std::abs(weak[i]["score"].get<double>() - free[i]["score"].get<double>()) < 1e-5);
    }
    // A hard prefix "s i o" would force it: the bias lets the hypothesis leave it.
    CHECK(weak[1]["text"] == "a c h i s o n");
  }
}

TEST_CASE("max_input_length truncates the source and notes it", "[e2e][decoding-options]") {
  for (int size : {1, 2}) {
    INFO("beam_size " << size);
    const auto cut = run({beam(size), "task.max_input_length=3"}, std::string(kAtzmon) + "\n");
    const auto short_source = run({beam(size)}, "آ ت ز\n");
    CHECK(cut[0]["text"] == short_source[0]["text"]);
    CHECK(cut[0]["score"] == short_source[0]["score"]);
    CHECK(cut[0]["note"] == "source truncated from 6 to 3 tokens (max_input_length)");
    CHECK_FALSE(short_source[0].contains("note"));
  }
}

TEST_CASE("invalid decoding options are configuration errors (exit code 2)",
          "[e2e][decoding-options]") {
  struct Case {
    std::vector<std::string> sets;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"decoder.end_tokens=[43]"}, "end_tokens: id 43 is outside the vocabulary (size 43)"},
      {{"decoder.suppress_sequences=[\"3 99\"]"},
       "suppress_sequences: id 99 is outside the vocabulary (size 43)"},
      {{"decoder.suppress_sequences=[\"3 x\"]"},
       "suppress_sequences: '3 x' is not a sequence of space-separated token ids"},
      {{"decoder.num_hypotheses=0"}, "num_hypotheses"},
      {{"decoder.num_hypotheses=3"},
       "num_hypotheses (3) cannot exceed round(beam_size * patience) = 2"},
      {{"decoder.min_new_tokens=10", "decoder.max_new_tokens=5"},
       "min_new_tokens (10) is greater than max_new_tokens (5)"},
      {{"decoder.prefix_bias_beta=1"}, "prefix_bias_beta must be < 1"},
      // A plugin's own checks say which section and plugin they are about.
      {{"decoder.plugin=sample", "decoder.top_p=0"}, "decoder 'sample': top_p must be > 0"},
      {{"decoder.patience=0"}, "decoder 'beam': patience must be > 0"},
      {{"decoder.plugin=greedy", "decoder.prefix_bias_beta=0.5",
        "decoder.return_alternatives=true"},
       "prefix_bias_beta (a biased prefix) cannot be used with return_alternatives"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"run", translate(), "-q"};
    for (const auto& s : c.sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    INFO(c.message);
    auto r = run_masque(args, std::string(kAtzmon) + "\n");
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Contains(c.message));
  }
}

TEST_CASE("return_alternatives: the best next tokens after the prefix, each completed",
          "[e2e][decoding-options]") {
  // CTranslate2 test_return_alternatives (its default beam size is 2), and greedy completion.
  const std::vector<std::string> tsv = {"--input-format", "tsv", "--columns", "text,prefix"};
  const std::string input = std::string(kAtzmon) + "\ta t\n" + kAchison + "\t\n";
  for (int size : {1, 2}) {
    INFO("beam_size " << size);
    const std::string plugin = size == 1 ? "decoder.plugin=greedy" : "decoder.plugin=beam";
    const auto out = run({beam(size), plugin, "decoder.return_alternatives=true",
                          "decoder.num_hypotheses=10", "task.token_logprobs=true"},
                         input, tsv);
    const auto& alts = out[0]["hypotheses"];
    REQUIRE(alts.size() == 10);
    CHECK(alts[0]["text"] == "a t z m o n");
    CHECK(alts[1]["text"] == "a t s u m o n");
    std::set<std::string> third;
    for (std::size_t i = 0; i < alts.size(); ++i) {
      const auto text = alts[i]["text"].get<std::string>();
      CHECK(text.rfind("a t ", 0) == 0);
      third.insert(text.substr(4, text.find(' ', 4) - 4));
      // Expansion order: the expansion log-prob (the first scored token) never increases.
      if (i > 0)
        CHECK(alts[i]["token_logprobs"][0].get<double>() <=
              alts[i - 1]["token_logprobs"][0].get<double>());
    }
    CHECK(third.size() == 10);  // ten different expansions
    // Without a prefix, the first position is expanded.
    REQUIRE(out[1]["hypotheses"].size() == 10);
    CHECK(out[1]["hypotheses"][0]["text"] == "a c h i s o n");

    // Only expansions at least this likely are kept.
    const auto likely =
        run({beam(size), plugin, "decoder.return_alternatives=true", "decoder.num_hypotheses=10",
             "task.token_logprobs=true", "decoder.min_alternative_expansion_prob=0.05"},
            std::string(kAtzmon) + "\ta t\n", tsv);
    const std::size_t kept =
        likely[0].contains("hypotheses") ? likely[0]["hypotheses"].size() : std::size_t{1};
    CHECK(kept < 10);
    CHECK(kept >= 1);
    for (std::size_t i = 0; i < 10; ++i) {
      const double p = std::exp(alts[i]["token_logprobs"][0].get<double>());
      CHECK((i < kept) == (p >= 0.05));
    }
  }
}

namespace {

// A vocabulary map with one always-allowed line (CTranslate2's _get_model_path_with_vmap) and
// optional rules; returns the --set that enables it.
std::string vmap(const std::string& name, const std::string& always,
                 const std::string& rules = "") {
  // One folder per file: test cases run in parallel and scratch_dir() empties its folder.
  const auto dir = scratch_dir("decoding_vmap_" + name);
  write_file(dir / name, "\t" + always + "\n" + rules);
  return "task.vmap=" + (dir / name).string();
}

}  // namespace

TEST_CASE("vmap: CTranslate2's vocabulary map tests, greedy and beam", "[e2e][decoding-options]") {
  const std::vector<std::string> tsv = {"--input-format", "tsv", "--columns", "text,prefix"};
  for (int size : {1, 2}) {
    INFO("beam_size " << size);
    // test_hard_target_prefix_with_vmap
    auto out =
        run({beam(size), vmap("prefix.txt", "t z m o n")}, std::string(kAtzmon) + "\ta t z\n", tsv);
    CHECK(out[0]["text"] == "a t z m o n");
    // test_min_decoding_length_with_vmap
    out = run({beam(size), vmap("min.txt", "a t z m o n"), "decoder.min_new_tokens=1"},
              std::string(kAtzmon) + "\n");
    CHECK(out[0]["text"] == "a t z m o n");
    // test_suppress_sequences_with_vmap
    out = run({beam(size), vmap("suppress.txt", "a t z s m o u n"),
               "decoder.suppress_sequences=[\"8\", \"11 23 13\"]"},
              std::string(kAtzmon) + "\n");
    CHECK(out[0]["text"] == "a t z u m u n");
    // test_repetition_penalty_with_vmap: no token twice
    out = run({beam(size), vmap("repeat.txt", "a t z m o n"), "decoder.repetition_penalty=100",
               "decoder.max_new_tokens=3"},
              "ن ن ن\n");
    auto tokens = out[0]["tokens"].get<std::vector<int>>();
    CHECK(std::set<int>(tokens.begin(), tokens.end()).size() == tokens.size());
    // test_no_repeat_ngram_size_with_vmap: no 3-gram twice
    std::string fifty = "ن";
    for (int i = 1; i < 50; ++i) fifty += " ن";
    out = run({beam(size), vmap("ngram.txt", "a t z m o n"), "decoder.no_repeat_ngram_size=3"},
              fifty + "\n");
    tokens = out[0]["tokens"].get<std::vector<int>>();
    std::set<std::vector<int>> grams;
    for (std::size_t i = 0; i + 3 <= tokens.size(); ++i)
      CHECK(grams.insert({tokens[i], tokens[i + 1], tokens[i + 2]}).second);
    // Every produced token is allowed: a t z m o n are ids 3 11 23 13 8 7.
    for (int t : tokens) CHECK(std::set<int>{3, 11, 23, 13, 8, 7}.count(t) == 1);
  }
  // test_return_alternatives_with_vmap (beam size 2, CTranslate2's default)
  const auto alts = run({vmap("alternatives.txt", "z s u m o n"),
                         "decoder.return_alternatives=true", "decoder.num_hypotheses=2"},
                        std::string(kAtzmon) + "\ta t\n", tsv);
  REQUIRE(alts[0]["hypotheses"].size() == 2);
  CHECK(alts[0]["hypotheses"][0]["text"] == "a t z m o n");
  CHECK(alts[0]["hypotheses"][1]["text"] == "a t s u m o n");
}

TEST_CASE("vmap: source n-gram rules allow their targets for that record only",
          "[e2e][decoding-options]") {
  // "n" is allowed only where the source has "ن" (a unigram rule) or "و ن" (a bigram rule).
  const std::string set = vmap("rules.txt", "a t z m o i", "ن\tn\nو ن\tn\n");
  const auto out = run({set}, std::string(kAtzmon) + "\n" + "آ ت ز م و\n");
  CHECK(out[0]["text"] == "a t z m o n");
  CHECK(out[1]["text"].get<std::string>().find('n') == std::string::npos);
  // A line without a tab or an unknown target token is a configuration error naming the line.
  const auto dir = scratch_dir("decoding_vmap_errors");
  write_file(dir / "bad.txt", "\ta t\nن n\n");
  auto r =
      run_masque({"run", translate(), "-q", "--set", "task.vmap=" + (dir / "bad.txt").string()},
                 std::string(kAtzmon) + "\n");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("bad.txt:2: expected '<source n-gram> TAB <target tokens>'"));
  write_file(dir / "unknown.txt", "\ta t QQ\n");
  r = run_masque({"run", translate(), "-q", "--set", "task.vmap=" + (dir / "unknown.txt").string()},
                 std::string(kAtzmon) + "\n");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("unknown.txt:1: target token 'QQ' is not in the target vocabulary"));
}

TEST_CASE("the options hold for sampling too", "[e2e][decoding-options]") {
  const std::vector<std::string> tsv = {"--input-format", "tsv", "--columns", "text,prefix"};
  const std::vector<std::string> sample = {"decoder.plugin=sample", "decoder.seed=7",
                                           "decoder.temperature=1.5"};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.begin(), sample.begin(), sample.end());
    return sets;
  };
  // Suppressed tokens never appear in 16 samples at a high temperature.
  auto out =
      run(with({"decoder.num_hypotheses=16", "decoder.suppress_sequences=[\"8\", \"11 23\"]"}),
          std::string(kAtzmon) + "\n");
  REQUIRE(out[0]["hypotheses"].size() == 16);
  for (const auto& h : out[0]["hypotheses"]) {
    const auto tokens = h["tokens"].get<std::vector<int>>();
    CHECK(std::find(tokens.begin(), tokens.end(), 8) == tokens.end());
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i)
      CHECK_FALSE((tokens[i] == 11 && tokens[i + 1] == 23));
  }
  // A strong bias keeps every sample on the prefix.
  out = run(with({"decoder.num_hypotheses=8", "decoder.prefix_bias_beta=0.9999999"}),
            std::string(kAtzmon) + "\ta t s\n", tsv);
  for (const auto& h : out[0]["hypotheses"])
    CHECK(h["text"].get<std::string>().rfind("a t s", 0) == 0);
  // Alternatives: distinct expansions after the prefix, each completed by one sample.
  out = run(with({"decoder.num_hypotheses=5", "decoder.return_alternatives=true"}),
            std::string(kAtzmon) + "\ta t\n", tsv);
  REQUIRE(out[0]["hypotheses"].size() == 5);
  std::set<int> third;
  for (const auto& h : out[0]["hypotheses"]) {
    const auto tokens = h["tokens"].get<std::vector<int>>();
    REQUIRE(tokens.size() >= 3);
    CHECK(tokens[0] == 3);
    CHECK(tokens[1] == 11);
    third.insert(tokens[2]);
  }
  CHECK(third.size() == 5);
  // The same seed gives the same alternatives.
  const auto again = run(with({"decoder.num_hypotheses=5", "decoder.return_alternatives=true"}),
                         std::string(kAtzmon) + "\ta t\n", tsv);
  CHECK(again[0]["hypotheses"] == out[0]["hypotheses"]);
}
