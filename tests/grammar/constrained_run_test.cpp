// Constrained decoding through the real binary: stories260k under a JSON schema writes 1,000
// outputs that python3's json parses and json_schema_check.py validates, identical at 1 and 2
// threads, batch sizes 1, 8 and 32 and continuous batching; a GBNF grammar holds under greedy,
// sampling and beam search, and on the aren encoder-decoder; bad grammars and schemas stop the
// run naming where; an output the limit cuts short is an error record, never an invalid one.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>

#include "test_support.hpp"

using namespace masque::test;
namespace fs = std::filesystem;

namespace {

std::string pipeline(const char* name) {
  return (source_dir() / "pipelines" / name).string();
}

std::string schema() {
  return (source_dir() / "pipelines/schemas/character.schema.json").string();
}

// `n` prompts of a few words each.
std::string prompts(int n) {
  const char* words[] = {"Lily", "Tom", "a",   "big", "dog",  "saw",   "the", "sun",
                         "and",  "was", "sad", "Ben", "park", "happy", "cat", "ran"};
  std::string text;
  for (int i = 0; i < n; ++i) {
    for (int w = 0; w < 1 + i % 6; ++w)
      text += std::string(w ? " " : "") + words[(i * 7 + w * 3) % 16];
    text += "\n";
  }
  return text;
}

int shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string checker() {
  return (source_dir() / "tests/grammar/json_schema_check.py").string();
}

}  // namespace

TEST_CASE("constraint: 1000 stories260k outputs under a JSON schema all parse and validate",
          "[constraint]") {
  const fs::path dir = scratch_dir("constraint_schema");
  write_file(dir / "in.txt", prompts(1000));
  const RunResult r = run_masque({"run", pipeline("lm-json-schema.yaml"), "-i",
                                  (dir / "in.txt").string(), "-o", (dir / "out.jsonl").string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto out = read_jsonl(dir / "out.jsonl");
  REQUIRE(out.size() == 1000);
  // python3's json and the test's validator of the schema's subset, over every record.
  CHECK(shell("python3 " + checker() + " " + schema() + " " + (dir / "out.jsonl").string() +
              " text > " + (dir / "check.txt").string()) == 0);
  INFO(read_file(dir / "check.txt"));
  CHECK(read_file(dir / "check.txt").find("checked 1000, valid 1000") != std::string::npos);
  // Not one answer for all: the prompts steer the values.
  std::set<std::string> distinct;
  for (const auto& j : out) distinct.insert(j["text"].get<std::string>());
  CHECK(distinct.size() >= 10);
}

TEST_CASE("constraint: outputs do not depend on threads or batch size or continuous batching",
          "[constraint]") {
  const fs::path dir = scratch_dir("constraint_batching");
  write_file(dir / "in.txt", prompts(200));
  const auto run = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", pipeline("lm-json-schema.yaml"),
                                     "-i",  (dir / "in.txt").string(),
                                     "-o",  (dir / name).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const RunResult r = run_masque(args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return read_file(dir / name);
  };
  const std::string base = run("base.jsonl", {"--threads", "1", "--set", "run.max_batch_size=1"});
  CHECK(run("t2b8.jsonl", {"--threads", "2", "--set", "run.max_batch_size=8"}) == base);
  CHECK(run("t1b32.jsonl", {"--threads", "1", "--set", "run.max_batch_size=32"}) == base);
  CHECK(run("cont.jsonl", {"--threads", "2", "--set", "run.max_batch_size=8", "--set",
                           "run.batching=continuous"}) == base);
}

TEST_CASE("constraint: a GBNF grammar holds under greedy and sampling and beam search",
          "[constraint]") {
  const fs::path dir = scratch_dir("constraint_gbnf");
  // A list of one to three lower-case words, each followed by a comma or the final period.
  write_file(dir / "list.gbnf",
             "# a short list\nroot ::= word (\", \" word){0,2} \".\"\nword ::= [a-z]{1,8}\n");
  write_file(dir / "in.txt", prompts(1000));
  const std::regex valid("[a-z]{1,8}(, [a-z]{1,8}){0,2}\\.");
  for (const std::vector<std::string>& decoder :
       {std::vector<std::string>{"decoder.plugin=greedy"},
        {"decoder.plugin=sample", "decoder.seed=7", "decoder.temperature=1.5"},
        {"decoder.plugin=beam", "decoder.beam_size=4", "decoder.num_hypotheses=2"}}) {
    std::vector<std::string> args = {"run",   pipeline("lm-generate.yaml"),
                                     "-i",    (dir / "in.txt").string(),
                                     "--set", "decoder.max_new_tokens=48",
                                     "--set", "constraint.plugin=gbnf",
                                     "--set", "constraint.file=" + (dir / "list.gbnf").string()};
    for (const std::string& d : decoder) args.insert(args.end(), {"--set", d});
    const RunResult r = run_masque(args);
    INFO(decoder.front() << "\n" << r.err);
    REQUIRE(r.exit_code == 0);
    const auto out = parse_jsonl(r.out);
    REQUIRE(out.size() == 1000);
    for (const auto& j : out) {
      INFO(j.dump());
      CHECK(std::regex_match(j["text"].get<std::string>(), valid));
      if (j.contains("hypotheses"))
        for (const auto& h : j["hypotheses"])
          CHECK(std::regex_match(h["text"].get<std::string>(), valid));
    }
  }
}

TEST_CASE("constraint: the aren encoder-decoder under a grammar without the letter e",
          "[constraint]") {
  const fs::path dir = scratch_dir("constraint_aren");
  write_file(dir / "no-e.gbnf", "root ::= letter (\" \" letter)*\nletter ::= [a-df-z]\n");
  // Words whose unconstrained transliterations hold an 'e'.
  const std::string words = "ب ي ت ر\nم ي ل ر\nه ي ل ي ن\n";
  const RunResult free = run_masque({"run", pipeline("translate.yaml")}, words);
  REQUIRE(free.exit_code == 0);
  const RunResult bound =
      run_masque({"run", pipeline("translate.yaml"), "--set", "constraint.plugin=gbnf", "--set",
                  "constraint.file=" + (dir / "no-e.gbnf").string()},
                 words);
  INFO(bound.err);
  REQUIRE(bound.exit_code == 0);
  const auto a = parse_jsonl(free.out), b = parse_jsonl(bound.out);
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 3);
  int had_e = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string text = b[i]["text"];
    INFO(a[i]["text"] << " -> " << text);
    CHECK(std::regex_match(text, std::regex("[a-df-z]( [a-df-z])*")));
    had_e += a[i]["text"].get<std::string>().find('e') != std::string::npos;
  }
  CHECK(had_e > 0);  // the grammar changed something
}

TEST_CASE("constraint: 1000 aren transliterations under a grammar all match it at any batching",
          "[constraint]") {
  const fs::path dir = scratch_dir("constraint_aren_1000");
  // Lower-case letters but no 'e', one to twelve of them: a transliteration the model must
  // bend wherever it would write an 'e' (beam 2, the pipeline's default).
  write_file(dir / "no-e.gbnf", "root ::= [a-df-z] (\" \" [a-df-z]){0,11}\n");
  std::ifstream words((shared_dir() / "bench/aren-20k.txt").string());
  std::string input, line;
  for (int i = 0; i < 1000 && std::getline(words, line); ++i) input += line + "\n";
  write_file(dir / "in.txt", input);
  const auto run = [&](const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"run",  pipeline("translate.yaml"), "-i",
                                     (dir / "in.txt").string(), "-o", (dir / name).string(),
                                     "--grammar", (dir / "no-e.gbnf").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const RunResult r = run_masque(args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return read_file(dir / name);
  };
  const std::string base = run("b1.jsonl", {"--threads", "1", "--set", "run.max_batch_size=1"});
  const auto out = parse_jsonl(base);
  REQUIRE(out.size() == 1000);
  const std::regex valid("[a-df-z]( [a-df-z]){0,11}");
  int matching = 0;
  for (const auto& j : out) matching += std::regex_match(j["text"].get<std::string>(), valid);
  CHECK(matching == 1000);
  CHECK(run("b8.jsonl", {"--threads", "2", "--set", "run.max_batch_size=8"}) == base);
  CHECK(run("b32.jsonl", {"--threads", "1", "--set", "run.max_batch_size=32"}) == base);
}

TEST_CASE("constraint: byte-level BPE tokens that hold part of a character (tiny-gpt2)",
          "[constraint]") {
  // Greek letters are two bytes in UTF-8; GPT-2's vocabulary spells many of them with two
  // byte tokens, each of which alone is only part of a character.
  const fs::path dir = scratch_dir("constraint_gpt2");
  write_file(dir / "gpt2.yaml", "task: lm-generate\nmodel: {plugin: gpt2, path: " +
                                    (shared_dir() / "models/tiny-gpt2").string() +
                                    "}\ntokenizer: {plugin: bpe, path: " +
                                    (shared_dir() / "tokenizers/gpt2").string() +
                                    "}\ndecoder: {plugin: greedy, max_new_tokens: 24}\n");
  write_file(dir / "greek.gbnf", "root ::= [α-ω]{3} \"!\"\n");
  const RunResult r = run_masque({"run", (dir / "gpt2.yaml").string(), "--grammar",
                                  (dir / "greek.gbnf").string()},
                                 "Hello\nThe alphabet\nOnce upon a time\n");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 3);
  for (const auto& j : out) {
    INFO(j.dump());
    CHECK(std::regex_match(j["text"].get<std::string>(), std::regex("(\xCE[\xB1-\xBF]|\xCF[\x80-\x89]){3}!")));
  }
}

TEST_CASE("constraint: a SIGKILLed run under a JSON schema resumes byte-identical",
          "[constraint]") {
  const fs::path dir = scratch_dir("constraint_resume");
  write_file(dir / "in.txt", prompts(600));
  const std::string in = (dir / "in.txt").string(), out = (dir / "out.jsonl").string();
  const RunResult full = run_masque({"run", pipeline("lm-json-schema.yaml"), "-i", in, "-o",
                                     (dir / "full.jsonl").string(), "-q"});
  REQUIRE(full.exit_code == 0);
  const int code = shell(binary().string() + " run " + pipeline("lm-json-schema.yaml") + " -i " +
                         in + " -o " + out +
                         " -q --unbuffered --threads 1 & pid=$!; n=0; while [ $n -lt 3000 ]; do "
                         "l=$(cat " +
                         out +
                         " 2>/dev/null | wc -l); [ \"$l\" -ge 50 ] && break; "
                         "sleep 0.01; n=$((n+1)); done; kill -9 $pid; wait $pid; exit $?");
  CHECK(code == 128 + 9);
  const RunResult resumed =
      run_masque({"run", pipeline("lm-json-schema.yaml"), "-i", in, "-o", out, "--resume"});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.err, Catch::Contains("resuming at record"));
  CHECK(read_file(out) == read_file(dir / "full.jsonl"));
}

TEST_CASE("constraint: an output the length limit cuts short is an error record", "[constraint]") {
  const RunResult r = run_masque(
      {"run", pipeline("lm-json-schema.yaml"), "--set", "decoder.max_new_tokens=5"}, "Lily\nTom\n");
  CHECK(r.exit_code == 1);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 2);
  for (const auto& j : out) {
    INFO(j.dump());
    REQUIRE(j.contains("error"));
    CHECK(j["error"].get<std::string>().find("ended before its grammar was complete") !=
          std::string::npos);
  }
}

TEST_CASE("constraint: a malformed grammar or an unsupported schema stops the run naming where",
          "[constraint]") {
  const fs::path dir = scratch_dir("constraint_errors");
  write_file(dir / "bad.gbnf", "root ::= item+\n# items\nitem ::= \"a\" | undefined-rule\n");
  RunResult r = run_masque({"run", pipeline("lm-generate.yaml"), "--set", "constraint.plugin=gbnf",
                            "--set", "constraint.file=" + (dir / "bad.gbnf").string()},
                           "x\n");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("bad.gbnf:3:16: rule 'undefined-rule' is used but not defined") !=
        std::string::npos);
  write_file(dir / "bad.json",
             R"({"type": "object", "properties": {"n": {"type": "number", "minimum": 0}}})");
  r = run_masque({"run", pipeline("lm-json-schema.yaml"), "--set",
                  "constraint.file=" + (dir / "bad.json").string()},
                 "x\n");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("bad.json") != std::string::npos);
  CHECK(r.err.find("/properties/n/minimum") != std::string::npos);
}
