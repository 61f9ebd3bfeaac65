// `masque run --resume` in one process: a run killed with SIGKILL, or stopped by a failed write,
// is finished from its complete records, and the output equals an uninterrupted run's byte for
// byte; a resume against a different input or pipeline is refused.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "test_support.hpp"

using namespace masque::test;
namespace fs = std::filesystem;

namespace {

std::string pipeline() {
  return (source_dir() / "pipelines/lm-score.yaml").string();
}

// 1500 different records, long enough to take a moment to score. Every 97th is empty: lm-score
// fails it (an error record in its place, exit code 1), so error records are resumed too.
fs::path write_corpus(const fs::path& dir) {
  const char* words[] = {"Once",  "upon", "a",   "time",  "there", "was",  "a",  "little", "girl",
                         "named", "Lily", "she", "liked", "to",    "play", "in", "the",    "park"};
  std::string text;
  for (int i = 0; i < 1500; ++i) {
    if (i % 97 == 5) {
      text += "\n";
      continue;
    }
    for (int w = 0; w < 8 + i % 13; ++w)
      text += std::string(w ? " " : "") + words[(i * 7 + w * 3) % 18];
    text += ".\n";
  }
  write_file(dir / "corpus.txt", text);
  return dir / "corpus.txt";
}

int shell(const std::string& script) {
  const int status = std::system(("/bin/sh -c '" + script + "'").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::size_t lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

// An uninterrupted run's output.
std::string full_output(const fs::path& dir, const fs::path& corpus) {
  const auto r = run_masque(
      {"run", pipeline(), "-i", corpus.string(), "-o", (dir / "full.jsonl").string(), "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 1);                     // the empty records
  CHECK(!fs::exists(dir / "full.jsonl.parts"));  // a finished run leaves no side file
  return read_file(dir / "full.jsonl");
}

// Starts a run (of `run_args`: the pipeline and settings) into `out`, SIGKILLs it once at least
// `records` lines are written.
void run_and_kill(const fs::path& corpus, const fs::path& out, int records,
                  const std::string& run_args = pipeline()) {
  const std::string cmd = binary().string() + " run " + run_args + " -i " + corpus.string() +
                          " -o " + out.string() + " -q --unbuffered --threads 1";
  const int code = shell(cmd +
                         " & pid=$!; n=0; while [ $n -lt 2000 ]; do "
                         "l=$(cat " +
                         out.string() +
                         " 2>/dev/null | wc -l); "
                         "[ \"$l\" -ge " +
                         std::to_string(records) +
                         " ] && break; sleep 0.01; n=$((n+1)); done; kill -9 $pid; wait $pid; "
                         "exit $?");
  CHECK(code == 128 + 9);  // killed, not finished
}

}  // namespace

TEST_CASE("resume: a SIGKILLed run finishes byte-identical", "[e2e][resume]") {
  const auto dir = scratch_dir("resume_kill");
  const auto corpus = write_corpus(dir);
  const std::string full = full_output(dir, corpus);
  REQUIRE(lines(full) == 1500);
  const auto out = dir / "out.jsonl";
  run_and_kill(corpus, out, 100);
  const std::string partial = read_file(out);
  INFO("records before the kill: " << lines(partial));
  REQUIRE(lines(partial) >= 100);
  REQUIRE(lines(partial) < 1500);
  REQUIRE(fs::exists(dir / "out.jsonl.parts/manifest.json"));
  // A torn last record, as a kill in the middle of a write leaves it.
  std::ofstream(out, std::ios::app) << "{\"id\": 99999, \"tok";
  const auto r =
      run_masque({"run", pipeline(), "-i", corpus.string(), "-o", out.string(), "--resume"});
  INFO(r.err);
  REQUIRE(r.exit_code == 1);  // empty records among the rest
  CHECK_THAT(r.err, Catch::Contains("resuming at record " + std::to_string(lines(partial))));
  CHECK(read_file(out) == full);
  CHECK(!fs::exists(dir / "out.jsonl.parts"));
  // Finished: nothing to resume any more.
  const auto again =
      run_masque({"run", pipeline(), "-i", corpus.string(), "-o", out.string(), "--resume", "-q"});
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.err, Catch::Contains("nothing to resume"));
}

TEST_CASE("resume: a run stopped by a failed write finishes byte-identical", "[e2e][resume]") {
  const auto dir = scratch_dir("resume_write_error");
  const auto corpus = write_corpus(dir);
  const std::string full = full_output(dir, corpus);
  const auto out = dir / "out.jsonl";
  // The file size limit (16 KiB) makes write() fail with EFBIG part way through.
  const int code = shell("trap \"\" XFSZ; ulimit -f 16; " + binary().string() + " run " +
                         pipeline() + " -i " + corpus.string() + " -o " + out.string() + " -q");
  CHECK(code == 3);  // runtime failure: the output could not be written
  REQUIRE(fs::file_size(out) <= 16 * 1024);
  REQUIRE(fs::file_size(out) > 0);
  const auto r =
      run_masque({"run", pipeline(), "-i", corpus.string(), "-o", out.string(), "--resume", "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 1);  // empty records among the rest
  CHECK(read_file(out) == full);
}

TEST_CASE("resume: a different input or pipeline is refused", "[e2e][resume]") {
  const auto dir = scratch_dir("resume_mismatch");
  const auto corpus = write_corpus(dir);
  const auto out = dir / "out.jsonl";
  run_and_kill(corpus, out, 20);
  const std::string partial = read_file(out);
  const auto other = dir / "other.txt";
  write_file(other, read_file(corpus) + "one more line\n");
  const auto input =
      run_masque({"run", pipeline(), "-i", other.string(), "-o", out.string(), "--resume", "-q"});
  CHECK(input.exit_code == 2);
  CHECK_THAT(input.err, Catch::Contains("was written by a different run (its input differs"));
  const auto changed = run_masque({"run", pipeline(), "-i", corpus.string(), "-o", out.string(),
                                   "--resume", "-q", "--set", "task.token_logprobs=true"});
  CHECK(changed.exit_code == 2);
  CHECK_THAT(changed.err, Catch::Contains("(its pipeline differs"));
  const auto format = run_masque({"run", pipeline(), "-i", corpus.string(), "-o", out.string(),
                                  "--resume", "-q", "--format", "tsv"});
  CHECK(format.exit_code == 2);
  const auto from_stdin =
      run_masque({"run", pipeline(), "-o", out.string(), "--resume", "-q"}, "text\n");
  CHECK(from_stdin.exit_code == 2);
  CHECK_THAT(from_stdin.err, Catch::Contains("needs -i FILE"));
  CHECK(read_file(out) == partial);  // refused runs leave the output alone
}

TEST_CASE("resume: nbest output of generated text with newlines is one line per hypothesis",
          "[e2e][resume]") {
  const auto dir = scratch_dir("resume_nbest");
  // Stories from these prompts run over several lines of text.
  std::string prompts;
  for (int i = 0; i < 12; ++i) prompts += i % 3 == 0 ? "\n" : i % 3 == 1 ? "Lily\n" : "A dog\n";
  write_file(dir / "prompts.txt", prompts);
  const std::string gen = (source_dir() / "pipelines/lm-generate.yaml").string();
  const std::string args =
      " run " + gen + " -i " + (dir / "prompts.txt").string() + " -f nbest -q --threads 1 -o ";
  REQUIRE(shell(binary().string() + args + (dir / "full.txt").string()) == 0);
  const std::string full = read_file(dir / "full.txt");
  CHECK(lines(full) == 12);
  CHECK(full.find("\\n") != std::string::npos);  // the newlines are there, escaped
  // A failed write (the file size limit) leaves a partial output to resume.
  const auto out = dir / "out.txt";
  CHECK(shell("trap \"\" XFSZ; ulimit -f 4; " + binary().string() + args + out.string()) == 3);
  REQUIRE(fs::file_size(out) > 0);
  REQUIRE(fs::file_size(out) < full.size());
  const auto r = run_masque({"run", gen, "-i", (dir / "prompts.txt").string(), "-f", "nbest", "-q",
                             "--threads", "1", "-o", out.string(), "--resume"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(read_file(out) == full);
}

TEST_CASE("resume: a SIGKILLed diffusion-generate run finishes byte-identical", "[e2e][resume]") {
  const auto dir = scratch_dir("resume_diffusion");
  // Block diffusion on tiny-bert-chinese (random weights): 6 slots in blocks of 2 over the KV
  // cache, continuously batched, sampled with random remasking (seeded per record and step).
  write_file(dir / "pipeline.yaml",
             "task:\n  name: diffusion-generate\n  length: 6\n  steps: 3\n  temperature: 0.8\n"
             "  remasking: random\nmodel:\n  plugin: bert\n  path: " +
                 (shared_dir() / "models/tiny-bert-chinese").string() +
                 "\ntokenizer:\n  plugin: wordpiece\n  vocab: " +
                 (shared_dir() / "tokenizers/bert-base-chinese/vocab.txt").string() +
                 "\n  lowercase: \"false\"\nmask:\n  plugin: block-causal\n  block_size: 2\n"
                 "run:\n  batching: continuous\n  max_batch_size: 8\n");
  const std::string pipeline = (dir / "pipeline.yaml").string();
  const char* chars[] = {"北", "京", "欢", "迎", "你", "好", "今", "天", "气", "很", "学", "习"};
  std::string text;
  for (int i = 0; i < 1500; ++i) {
    for (int c = 0; c < 1 + i % 7; ++c) text += chars[(i * 5 + c * 7) % 12];
    text += "\n";
  }
  write_file(dir / "corpus.txt", text);
  const auto corpus = dir / "corpus.txt";
  const auto full = run_masque(
      {"run", pipeline, "-i", corpus.string(), "-o", (dir / "full.jsonl").string(), "-q"});
  INFO(full.err);
  REQUIRE(full.exit_code == 0);
  const auto out = dir / "out.jsonl";
  run_and_kill(corpus, out, 100, pipeline);
  const std::string partial = read_file(out);
  INFO("records before the kill: " << lines(partial));
  REQUIRE(lines(partial) >= 100);
  REQUIRE(lines(partial) < 1500);
  const auto r =
      run_masque({"run", pipeline, "-i", corpus.string(), "-o", out.string(), "--resume"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("resuming at record " + std::to_string(lines(partial))));
  CHECK(read_file(out) == read_file(dir / "full.jsonl"));
  CHECK(!fs::exists(dir / "out.jsonl.parts"));
}
