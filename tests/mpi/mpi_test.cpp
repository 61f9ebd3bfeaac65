// masque run under Open MPI's mpirun (TCP transport, oversubscribed on a small machine) and
// with --shard K/N: the output is byte-identical to one plain process and the corpus summary is
// the same; a rank killed with SIGKILL fails the run without a complete-looking output, and
// --resume then finishes it.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace masque::test;
using json = nlohmann::json;

namespace {

struct Outcome {
  int exit_code = -1;
  std::string err;
};

std::vector<std::string> mpirun(int ranks) {
  return {MASQUE_MPIRUN,
          "--allow-run-as-root",
          "--oversubscribe",
          "-n",
          std::to_string(ranks),
          "--mca",
          "btl",
          "self,tcp",
          binary().string()};
}

// Starts argv with stdout and stderr in files under `dir`; returns the pid.
pid_t spawn(const std::vector<std::string>& args, const fs::path& dir) {
  std::vector<std::string> strings = args;
  std::vector<char*> argv;
  for (auto& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string out = (dir / "stdout").string(), err = (dir / "stderr").string();
  const pid_t pid = fork();
  if (pid == 0) {
    // Its own process group, so the test can find and end everything it started.
    setpgid(0, 0);
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int n = open("/dev/null", O_RDONLY);
    dup2(n, 0);
    dup2(o, 1);
    dup2(e, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

Outcome wait_for(pid_t pid, const fs::path& dir) {
  int status = 0;
  waitpid(pid, &status, 0);
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.err = read_file(dir / "stderr");
  return o;
}

Outcome run(const std::vector<std::string>& args, const fs::path& dir) {
  return wait_for(spawn(args, dir), dir);
}

// As wait_for(), but a job still running after `seconds` has hung: mpirun is told to end its
// ranks (SIGTERM, then SIGKILL) and the outcome's exit code is -2.
Outcome wait_within(pid_t pid, const fs::path& dir, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGTERM);
      for (int i = 0; i < 100 && waitpid(pid, &status, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return {-2, read_file(dir / "stderr")};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.err = read_file(dir / "stderr");
  return o;
}

Outcome run_within(const std::vector<std::string>& args, const fs::path& dir, int seconds) {
  return wait_within(spawn(args, dir), dir, seconds);
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The summary without its timings, which differ from run to run, and the decoding steps, which
// follow the batches a shard cuts (the rows they decode do not).
json figures(const fs::path& summary) {
  json j = json::parse(read_file(summary));
  for (const char* k : {"seconds", "records_per_second", "tokens_per_second"}) j.erase(k);
  if (j["task"].is_object())
    for (const char* k : {"decoding_steps", "rows_per_step"}) j["task"].erase(k);
  return j;
}

// A corpus of `n` lines of words from `words` (and a few empty lines, which lm-score fails).
std::string corpus(const std::vector<std::string>& words, int n, int max_words, unsigned seed,
                   bool empty_lines) {
  std::mt19937 rng(seed);
  std::string text;
  for (int i = 0; i < n; ++i) {
    const int len = empty_lines && i % 97 == 13 ? 0 : 1 + static_cast<int>(rng() % max_words);
    for (int w = 0; w < len; ++w) text += (w ? " " : "") + words[rng() % words.size()];
    text += "\n";
  }
  return text;
}

const std::vector<std::string> kStoryWords = {
    "once", "upon",  "a",   "time", "there", "was", "little", "girl", "named", "Lily",
    "she",  "liked", "to",  "play", "in",    "the", "park",   "with", "her",   "dog",
    "one",  "day",   "sun", "was",  "happy", "and", "they",   "ran",  "home",  "."};

// Runs `extra` over `input` without mpirun, under mpirun -n 1, 2, 3 and as 3 --shard runs,
// and checks every output and summary against the plain run.
void check_equal_everywhere(const std::string& name, const std::vector<std::string>& extra,
                            const std::string& input, int expected_code) {
  const fs::path dir = scratch_dir("mpi_" + name);
  write_file(dir / "in.txt", input);
  auto args = [&](const std::string& tag) {
    return concat(extra, {"-i", (dir / "in.txt").string(), "-o", (dir / (tag + ".out")).string(),
                          "--summary", (dir / (tag + ".json")).string(), "--quiet"});
  };
  const Outcome plain = run(concat({binary().string()}, args("plain")), dir);
  REQUIRE(plain.exit_code == expected_code);
  const std::string reference = read_file(dir / "plain.out");
  REQUIRE(!reference.empty());
  const json reference_figures = figures(dir / "plain.json");
  for (int ranks : {1, 2, 3}) {
    const std::string tag = "n" + std::to_string(ranks);
    INFO(name << " under mpirun -n " << ranks);
    const Outcome o = run(concat(mpirun(ranks), args(tag)), dir);
    INFO(o.err);
    CHECK(o.exit_code == expected_code);
    CHECK(read_file(dir / (tag + ".out")) == reference);
    CHECK(figures(dir / (tag + ".json")) == reference_figures);
    CHECK(!fs::exists(dir / (tag + ".out.parts")));
  }
  // Without MPI: three --shard runs, concatenated.
  std::string joined;
  for (int k = 0; k < 3; ++k) {
    const std::string tag = "shard" + std::to_string(k);
    const Outcome o = run(
        concat(concat({binary().string()}, args(tag)), {"--shard", std::to_string(k) + "/3"}), dir);
    INFO(o.err);
    CHECK((o.exit_code == 0 || o.exit_code == expected_code));
    joined += read_file(dir / (tag + ".out"));
  }
  CHECK(joined == reference);
}

}  // namespace

TEST_CASE("mpi: lm-score under mpirun -n 1/2/3 and --shard equals one process", "[mpi]") {
  const std::string pipeline = (source_dir() / "pipelines/lm-score.yaml").string();
  // Empty lines fail (nothing to score): the failure count is part of the summary.
  check_equal_everywhere("lm_score", {"run", pipeline, "--set", "run.max_batch_size=8"},
                         corpus(kStoryWords, 300, 24, 7, true), 1);
}

TEST_CASE("mpi: translate (beam) under mpirun -n 1/2/3 and --shard equals one process", "[mpi]") {
  const std::string pipeline = (source_dir() / "pipelines/translate.yaml").string();
  const std::vector<std::string> letters = {"س", "م", "ي", "ر", "ن", "ا", "د", "ة",
                                            "ل", "ك", "ب", "ت", "ح", "ع", "و"};
  std::string input;
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    const int len = 2 + static_cast<int>(rng() % 7);
    for (int c = 0; c < len; ++c) input += (c ? " " : "") + letters[rng() % letters.size()];
    input += "\n";
  }
  check_equal_everywhere("translate",
                         {"run", pipeline, "--set", "decoder.beam_size=4", "--set",
                          "decoder.num_hypotheses=2", "--format", "nbest"},
                         input, 0);
}

TEST_CASE(
    "mpi: lm-generate under a JSON schema with mpirun -n 1/2/3 and --shard equals one process",
    "[mpi]") {
  const std::string pipeline = (source_dir() / "pipelines/lm-json-schema.yaml").string();
  check_equal_everywhere("json_schema", {"run", pipeline, "--set", "run.max_batch_size=8"},
                         corpus(kStoryWords, 120, 6, 13, false), 0);
}

TEST_CASE("mpi: fill under mpirun -n 1/2/3 and --shard equals one process", "[mpi]") {
  const std::string pipeline = (source_dir() / "pipelines/fill.yaml").string();
  // Every line has one [MASK] among the words (a line without one is an error for fill).
  std::string input;
  std::istringstream lines(corpus(kStoryWords, 200, 16, 5, false));
  std::string line;
  for (int i = 0; std::getline(lines, line); ++i) {
    const std::size_t space = line.find(' ', line.size() / 2);
    input.append(line.substr(0, space)).append(" [MASK]");
    if (space != std::string::npos) input.append(line.substr(space));
    input.append("\n");
  }
  check_equal_everywhere("fill", {"run", pipeline}, input, 0);
}

TEST_CASE("mpi: TSV with a header, sharded, keeps its columns and record ids", "[mpi]") {
  const std::string pipeline = (source_dir() / "pipelines/lm-score.yaml").string();
  std::string input = "id\ttext\n";
  const std::string lines = corpus(kStoryWords, 120, 12, 3, false);
  std::istringstream ss(lines);
  std::string line;
  for (int i = 0; std::getline(ss, line); ++i) {
    input.append("r").append(std::to_string(i)).append("\t");  // (GCC 12 misreads + here)
    input.append(line).append("\n");
  }
  check_equal_everywhere("tsv", {"run", pipeline, "--input-format", "tsv", "--keep-fields"}, input,
                         0);
}

namespace {

// The pid of the masque process of `rank` whose command line mentions `marker`, or 0.
pid_t find_rank(int rank, const std::string& marker) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline, environ;
    try {
      cmdline = read_file(entry.path() / "cmdline");
      environ = read_file(entry.path() / "environ");
    } catch (...) {
      continue;
    }
    if (cmdline.find(marker) == std::string::npos || cmdline.rfind(binary().string(), 0) != 0)
      continue;
    const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
    if (environ.find(want + '\0') != std::string::npos) return std::stoi(name);
  }
  return 0;
}

// Runs `args` (a run's arguments without -i and -o) over `input` under mpirun -n 2, kills rank
// 1 in its shard and checks that the run fails without an output, then that --resume finishes it
// equal to one plain process.
void check_killed_and_resumed(const std::string& name, const std::vector<std::string>& args,
                              const std::string& input) {
  const fs::path dir = scratch_dir("mpi_kill_" + name);
  write_file(dir / "in.txt", input);
  const fs::path out = dir / "out.jsonl";
  const auto io = [&](const fs::path& to) {
    return concat(args, {"-i", (dir / "in.txt").string(), "-o", to.string(), "--quiet"});
  };
  const fs::path reference = dir / "reference.jsonl";
  REQUIRE(run(concat({binary().string()}, io(reference)), dir).exit_code == 0);

  const auto job_args = concat(io(out), {"--summary", (dir / "summary.json").string()});
  const pid_t job = spawn(concat(mpirun(2), job_args), dir);
  pid_t victim = 0;
  for (int i = 0; i < 600 && !victim; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    victim = find_rank(1, out.string());
  }
  REQUIRE(victim != 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // into its shard
  kill(victim, SIGKILL);
  const Outcome killed = wait_for(job, dir);
  INFO(killed.err);
  CHECK(killed.exit_code != 0);
  CHECK(killed.err.find("rank 1") != std::string::npos);
  CHECK(!fs::exists(out));

  // Resuming (here with two ranks again) redoes only what did not finish.
  const Outcome resumed = run(concat(mpirun(2), concat(job_args, {"--resume"})), dir);
  INFO(resumed.err);
  CHECK(resumed.exit_code == 0);
  CHECK(read_file(out) == read_file(reference));
  CHECK(!fs::exists(dir / "out.jsonl.parts"));
}

}  // namespace

TEST_CASE("mpi: a rank killed with SIGKILL fails the run, and --resume finishes it", "[mpi]") {
  const std::string pipeline = (source_dir() / "pipelines/lm-score.yaml").string();
  // Enough records that rank 1 is still at work when it is killed.
  check_killed_and_resumed("lm_score", {"run", pipeline}, corpus(kStoryWords, 3000, 40, 17, false));
}

namespace {

// diffusion-generate on tiny-bert-chinese (random weights) under block-causal: 6 slots per
// record in blocks of 2, each block decoded over the KV cache of the finished ones.
std::string diffusion_pipeline() {
  const fs::path dir = scratch_dir("mpi_diffusion_pipeline");
  write_file(dir / "pipeline.yaml",
             "task:\n  name: diffusion-generate\n  length: 6\n  steps: 3\nmodel:\n  plugin: bert\n"
             "  path: " +
                 (shared_dir() / "models/tiny-bert-chinese").string() +
                 "\ntokenizer:\n  plugin: wordpiece\n  vocab: " +
                 (shared_dir() / "tokenizers/bert-base-chinese/vocab.txt").string() +
                 "\n  lowercase: \"false\"\nmask:\n  plugin: block-causal\n  block_size: 2\n");
  return (dir / "pipeline.yaml").string();
}

// `n` lines of 1 to 8 Chinese characters.
std::string chinese_corpus(int n, unsigned seed) {
  const std::vector<std::string> chars = {"北", "京", "欢", "迎", "你", "好", "今", "天",
                                          "气", "很", "我", "们", "一", "起", "学", "习"};
  std::mt19937 rng(seed);
  std::string text;
  for (int i = 0; i < n; ++i) {
    const int len = 1 + static_cast<int>(rng() % 8);
    for (int c = 0; c < len; ++c) text += chars[rng() % chars.size()];
    text += "\n";
  }
  return text;
}

}  // namespace

TEST_CASE("mpi: diffusion-generate under mpirun -n 1/2/3 and --shard equals one process",
          "[mpi][diffusion]") {
  const std::string pipeline = diffusion_pipeline();
  for (const std::string batching : {"static", "continuous"}) {
    INFO(batching << " batching");
    check_equal_everywhere(
        "diffusion_" + batching,
        {"run", pipeline, "--set", "run.max_batch_size=8", "--set", "run.batching=" + batching},
        chinese_corpus(200, 19), 0);
  }
}

TEST_CASE("mpi: diffusion-generate with a rank killed and then resumed equals one process",
          "[mpi][diffusion]") {
  check_killed_and_resumed("diffusion",
                           {"run", diffusion_pipeline(), "--set", "run.batching=continuous"},
                           chinese_corpus(3000, 29));
}

// What zstd(1) or gzip(1) decompresses `file` to.
std::string decompressed(const fs::path& file) {
  const fs::path back = file.string() + ".back";
  const std::string tool = file.extension() == ".gz" ? "gzip" : "zstd -q";
  REQUIRE(std::system((tool + " -dc " + file.string() + " > " + back.string()).c_str()) == 0);
  return read_file(back);
}

TEST_CASE("mpi: .gz and .zst corpora under mpirun -n 2, killed and resumed, equal one process",
          "[mpi][compressed]") {
  const fs::path dir = scratch_dir("mpi_compressed");
  const std::string pipeline = (source_dir() / "pipelines/lm-score.yaml").string();
  write_file(dir / "in.txt", corpus(kStoryWords, 3000, 40, 23, false));
  REQUIRE(std::system(
              ("gzip -k " + (dir / "in.txt").string() + " && zstd -q " + (dir / "in.txt").string())
                  .c_str()) == 0);
  const fs::path reference = dir / "reference.jsonl";
  REQUIRE(run(concat({binary().string()}, {"run", pipeline, "-i", (dir / "in.txt").string(), "-o",
                                           reference.string(), "--quiet"}),
              dir)
              .exit_code == 0);
  for (const auto& [in, out] :
       {std::pair{"in.txt.gz", "out.jsonl.zst"}, {"in.txt.zst", "out.jsonl.gz"}}) {
    INFO(in << " -> " << out);
    const std::vector<std::string> args = {
        "run", pipeline, "-i", (dir / in).string(), "-o", (dir / out).string(), "--quiet"};
    const Outcome o = run(concat(mpirun(2), args), dir);
    INFO(o.err);
    REQUIRE(o.exit_code == 0);
    CHECK(decompressed(dir / out) == read_file(reference));
    fs::remove(dir / out);
    if (std::string(in) != "in.txt.gz") continue;  // one kill is enough (and slow under ASan)

    // Rank 1 killed in its shard: --resume runs what did not finish, into one valid stream.
    const pid_t job = spawn(concat(mpirun(2), args), dir);
    pid_t victim = 0;
    for (int i = 0; i < 600 && !victim; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      victim = find_rank(1, (dir / out).string());
    }
    REQUIRE(victim != 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(victim, SIGKILL);
    const Outcome killed = wait_for(job, dir);
    CHECK(killed.exit_code != 0);
    CHECK(!fs::exists(dir / out));
    const Outcome resumed = run(concat(mpirun(2), concat(args, {"--resume"})), dir);
    INFO(resumed.err);
    CHECK(resumed.exit_code == 0);
    CHECK(decompressed(dir / out) == read_file(reference));
  }
}

TEST_CASE("mpi: --resume skips the shards that finished", "[mpi]") {
  const fs::path dir = scratch_dir("mpi_resume");
  const std::string pipeline = (source_dir() / "pipelines/lm-score.yaml").string();
  // One empty line in the second half: with --fail-fast rank 1 stops there, rank 0 finishes.
  std::string input = corpus(kStoryWords, 200, 12, 23, false);
  input.insert(input.size() * 3 / 4, "\n");
  input.insert(input.find('\n', input.size() * 3 / 4) + 1, "\n");
  write_file(dir / "in.txt", input);
  const fs::path out = dir / "out.jsonl";
  const std::vector<std::string> args = {"run", pipeline,    "-i", (dir / "in.txt").string(),
                                         "-o",  out.string()};
  REQUIRE(run(concat({binary().string()}, {"run", pipeline, "-i", (dir / "in.txt").string(), "-o",
                                           (dir / "reference.jsonl").string(), "--quiet"}),
              dir)
              .exit_code == 1);

  const Outcome stopped = run(concat(mpirun(2), concat(args, {"--fail-fast"})), dir);
  INFO(stopped.err);
  CHECK(stopped.exit_code == 1);
  CHECK(stopped.err.find("--resume") != std::string::npos);
  CHECK(!fs::exists(out));
  CHECK(fs::exists(dir / "out.jsonl.parts/part-0.json"));
  CHECK(!fs::exists(dir / "out.jsonl.parts/part-1.json"));

  // Parts of a run with other settings are not mixed in.
  const Outcome other =
      run(concat({binary().string()}, concat(args, {"--resume", "-f", "tsv"})), dir);
  INFO(other.err);
  CHECK(other.exit_code == 2);
  CHECK(other.err.find("holds the parts of a different run (its format differs)") !=
        std::string::npos);
  CHECK(fs::exists(dir / "out.jsonl.parts/part-0.json"));

  // One process finishes it (no mpirun): only shard 1 runs.
  const Outcome resumed = run(concat({binary().string()}, concat(args, {"--resume"})), dir);
  INFO(resumed.err);
  CHECK(resumed.exit_code == 1);  // the empty lines fail, as in the plain run
  CHECK(resumed.err.find("resuming: 1 of 2 shards to run") != std::string::npos);
  CHECK(read_file(out) == read_file(dir / "reference.jsonl"));

  // A finished run has nothing to resume: refused, as one process refuses it, not run again.
  fs::remove(dir / "reference.jsonl");
  fs::copy_file(out, dir / "reference.jsonl");
  const Outcome again = run_within(concat(mpirun(2), concat(args, {"--resume"})), dir, 120);
  INFO(again.err);
  CHECK(again.exit_code == 2);
  CHECK(again.err.find("nothing to resume: " + out.string() + " has no unfinished run") !=
        std::string::npos);
  CHECK(read_file(out) == read_file(dir / "reference.jsonl"));
  CHECK_FALSE(fs::exists(dir / "out.jsonl.parts"));
}

TEST_CASE("mpi: --shard and sharded runs reject what they cannot do", "[mpi]") {
  const fs::path dir = scratch_dir("mpi_usage");
  const std::string pipeline = (source_dir() / "pipelines/lm-score.yaml").string();
  write_file(dir / "in.txt", "once upon a time\n");
  auto bad = [&](const std::vector<std::string>& extra, const std::string& message) {
    const Outcome o = run(concat({binary().string(), "run", pipeline}, extra), dir);
    INFO(o.err);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find(message) != std::string::npos);
  };
  bad({"-i", (dir / "in.txt").string(), "--shard", "3/3"}, "expected K/N with 0 <= K < N");
  bad({"-i", (dir / "in.txt").string(), "--shard", "1"}, "expected K/N");
  bad({"--shard", "0/2"}, "needs -i FILE");
  bad({"-i", (dir / "in.txt").string(), "--resume"}, "needs -o FILE");
  const Outcome o = run(concat(mpirun(2), {"run", pipeline, "-i", (dir / "in.txt").string()}), dir);
  CHECK(o.exit_code != 0);
  CHECK(o.err.find("needs -o FILE") != std::string::npos);

  // A missing input is named as a plain run names it.
  bad({"-i", (dir / "missing.txt").string(), "--shard", "0/2"},
      "missing.txt: cannot open the input file: No such file or directory");
  // An output that is a directory, or in a folder that does not exist, is refused before any
  // record runs: the finished output's rename failed (exit 3), or the folder was made.
  fs::create_directories(dir / "folder");
  const std::string in = (dir / "in.txt").string();
  const std::string folder = (dir / "folder").string(), nowhere = (dir / "nowhere/out").string();
  bad({"-i", in, "-o", folder, "--shard", "0/2"}, "cannot open the output file: Is a directory");
  bad({"-i", in, "-o", nowhere, "--shard", "0/2"}, "cannot write in");
  bad({"-i", in, "-o", nowhere}, "cannot write in");  // one process writes OUT.parts/ too
  for (const std::string& out : {folder, nowhere}) {
    const Outcome m = run(concat(mpirun(2), {"run", pipeline, "-i", in, "-o", out}), dir);
    INFO(m.err);
    CHECK(m.exit_code == 2);
    CHECK(m.err.find("cannot open the output file") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir / "nowhere"));
  CHECK_FALSE(fs::exists(dir / "folder.parts"));
  CHECK_FALSE(fs::exists(dir / "folder.masque-tmp"));
  CHECK(fs::is_empty(dir / "folder"));
}

TEST_CASE("mpi: ranks that read different inputs or pipelines stop the run, naming the rank",
          "[mpi]") {
  const fs::path dir = scratch_dir("mpi_mismatch");
  const std::string pipeline = (source_dir() / "pipelines/lm-score.yaml").string();
  const std::string text = corpus(kStoryWords, 40, 8, 7, false);
  write_file(dir / "in.txt", text);
  write_file(dir / "short.txt", text.substr(0, text.size() / 2));
  const std::string out = (dir / "out.jsonl").string();
  // Rank 0 reads in.txt; rank 1 (a second app context of the same job) what it is given.
  auto job = [&](const std::string& input, const std::vector<std::string>& extra) {
    std::vector<std::string> args =
        concat(mpirun(1), {"run", pipeline, "-q", "-i", (dir / "in.txt").string(), "-o", out});
    args = concat(args, {":", "-n", "1", binary().string(), "run", pipeline, "-q", "-i",
                         (dir / input).string(), "-o", out});
    return run(concat(args, extra), dir);
  };
  Outcome o = job("short.txt", {});
  INFO(o.err);
  CHECK(o.exit_code == 2);
  CHECK(o.err.find("rank 1 on") != std::string::npos);
  CHECK(o.err.find("input_bytes") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
  o = job("in.txt", {"--set", "task.token_logprobs=true"});
  INFO(o.err);
  CHECK(o.exit_code == 2);
  CHECK(o.err.find("another pipeline") != std::string::npos);
  o = job("in.txt", {});
  INFO(o.err);
  CHECK(o.exit_code == 0);
  CHECK(parse_jsonl(read_file(out)).size() == 40);
}

TEST_CASE("mpi: an error on one rank before the job starts ends the job, naming the rank",
          "[mpi]") {
  const fs::path dir = scratch_dir("mpi_early_error");
  const std::string pipeline = (source_dir() / "pipelines/lm-score.yaml").string();
  write_file(dir / "in.txt", corpus(kStoryWords, 40, 8, 7, false));
  const std::string out = (dir / "out.jsonl").string();
  // Rank 1 stops while loading its pipeline; rank 0 waits for it in the job's first collective
  // (it hung there, and rank 1 in MPI_Finalize).
  std::vector<std::string> args =
      concat(mpirun(1), {"run", pipeline, "-q", "-i", (dir / "in.txt").string(), "-o", out});
  args = concat(args, {":", "-n", "1", binary().string(), "run", pipeline, "-q", "-i",
                       (dir / "in.txt").string(), "-o", out, "--set", "task.bogus=1"});
  Outcome o = run_within(args, dir, 60);
  INFO(o.err);
  CHECK(o.exit_code == 2);
  CHECK(o.err.find("masque: rank 1 of 2 on ") != std::string::npos);
  CHECK(o.err.find("task.bogus") != std::string::npos);
  CHECK_FALSE(fs::exists(out));

  // The same in training: rank 1's train_file does not exist.
  write_file(dir / "train.txt", corpus(kStoryWords, 16, 8, 3, false));
  const std::string train = (source_dir() / "pipelines/train-causal-lm.yaml").string();
  auto trainer = [&](const std::string& data) {
    return std::vector<std::string>{binary().string(),
                                    "train",
                                    train,
                                    "-q",
                                    "--set",
                                    "task.train_file=" + (dir / data).string(),
                                    "--set",
                                    "task.output=" + (dir / "run").string(),
                                    "--set",
                                    "task.steps=2",
                                    "--set",
                                    "task.batch_size=4"};
  };
  auto launcher = mpirun(1);
  launcher.pop_back();  // the binary is the first of trainer's arguments
  args = concat(concat(concat(launcher, trainer("train.txt")), {":", "-n", "1"}),
                trainer("missing.txt"));
  o = run_within(args, dir, 60);
  INFO(o.err);
  CHECK(o.exit_code == 2);
  CHECK(o.err.find("masque: rank 1 of 2 on ") != std::string::npos);
  CHECK(o.err.find("missing.txt") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "run/last"));
}

TEST_CASE(
    "mpi: ranks that would train different steps stop before the first, naming the rank and "
    "what differs",
    "[mpi][train]") {
  const fs::path dir = scratch_dir("mpi_train_mismatch");
  const std::string text = corpus(kStoryWords, 24, 10, 5, false);
  write_file(dir / "train.txt", text);
  write_file(dir / "short.txt", text.substr(0, text.find('\n', text.size() / 2) + 1));
  const std::string pipeline = (source_dir() / "pipelines/train-causal-lm.yaml").string();
  auto trainer = [&](const std::string& data, const std::vector<std::string>& extra) {
    return concat({binary().string(), "train", pipeline, "-q", "--set",
                   "task.train_file=" + (dir / data).string(), "--set",
                   "task.output=" + (dir / "run").string(), "--set", "task.batch_size=4"},
                  extra);
  };
  auto launcher = mpirun(1);
  launcher.pop_back();  // the binary is the first of trainer's arguments
  // Rank 0 and rank 1 (a second app context) with their own arguments.
  auto job = [&](const std::vector<std::string>& rank0, const std::vector<std::string>& rank1) {
    fs::remove_all(dir / "run");
    return run_within(concat(concat(concat(launcher, rank0), {":", "-n", "1"}), rank1), dir, 120);
  };
  auto check_refused = [&](const Outcome& o, const std::string& what) {
    INFO(o.err);
    CHECK(o.exit_code == 2);
    CHECK(o.err.find("rank 1 on ") != std::string::npos);
    CHECK(o.err.find("trains with another " + what + " than rank 0") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "run/last"));
  };
  // Other data: silently other gradients; with epochs, other step counts, and the rank that
  // finished first left the other waiting in a reduction for ever.
  check_refused(job(trainer("train.txt", {}), trainer("short.txt", {})), "task.train_file");
  check_refused(job(trainer("train.txt", {"--set", "task.steps=3"}),
                    trainer("train.txt", {"--set", "task.steps=3", "--set", "task.lr=1e-2"})),
                "task.lr");
  // Another --threads cuts the batches into other parts: records trained twice or never.
  check_refused(job(trainer("train.txt", {"--set", "task.steps=3", "--threads", "2"}),
                    trainer("train.txt", {"--set", "task.steps=3"})),
                "--threads");
  // A rank that does not resume would start from other weights.
  fs::remove_all(dir / "base");
  fs::create_directories(dir / "base.log");
  const Outcome base = run(trainer("train.txt", {"--set", "task.steps=4", "--set",
                                                 "task.output=" + (dir / "base").string()}),
                           dir / "base.log");
  REQUIRE(base.exit_code == 0);
  check_refused(
      job(trainer("train.txt", {"--set", "task.steps=4", "--resume", (dir / "base").string()}),
          trainer("train.txt", {"--set", "task.steps=4"})),
      "model weights");
  // The same job on both ranks trains.
  const Outcome same = job(trainer("train.txt", {"--set", "task.steps=3"}),
                           trainer("train.txt", {"--set", "task.steps=3"}));
  INFO(same.err);
  CHECK(same.exit_code == 0);
  CHECK(fs::is_regular_file(dir / "run/last/model.safetensors"));
}

namespace {

// The number of lines of `file` (0 when it does not exist yet).
std::size_t lines_of(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return 0;
  const std::string text = read_file(file);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

// mpirun -n 2 masque train of pipelines/train-causal-lm.yaml on DIR/train.txt into `output`,
// then `extra` (the binary's arguments: --set, --resume).
std::vector<std::string> train_on_two_ranks(const fs::path& dir, const fs::path& output,
                                            const std::vector<std::string>& extra) {
  auto launcher = mpirun(2);
  launcher.pop_back();  // the binary comes with its arguments
  const std::string pipeline = (source_dir() / "pipelines/train-causal-lm.yaml").string();
  return concat(concat(launcher, {binary().string(), "train", pipeline, "-q", "--set",
                                  "task.train_file=" + (dir / "train.txt").string(), "--set",
                                  "task.output=" + output.string()}),
                extra);
}

// The step of the run's last checkpoint.
int last_step(const fs::path& output) {
  return json::parse(read_file(output / "last/trainer_state.json"))["step"].get<int>();
}

}  // namespace

TEST_CASE(
    "mpi: a signal to one rank, or one mpirun passes on, stops every rank of a training after "
    "the same step with its checkpoint",
    "[mpi][train]") {
  const fs::path dir = scratch_dir("mpi_train_signal");
  write_file(dir / "train.txt", corpus(kStoryWords, 2000, 30, 13, false));
  const fs::path output = dir / "run";
  const std::vector<std::string> args = train_on_two_ranks(
      dir, output, {"--set", "task.batch_size=16", "--set", "task.steps=100000"});
  // Signals a job once it has made a few steps; the outcome, and the step it stopped after.
  auto stop = [&](const std::vector<std::string>& job, const std::function<void(pid_t)>& signal) {
    const std::size_t before = lines_of(output / "metrics.jsonl");
    const pid_t pid = spawn(job, dir);
    for (int i = 0; i < 1200 && lines_of(output / "metrics.jsonl") < before + 3; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    signal(pid);
    return wait_within(pid, dir, 120);
  };

  // SIGTERM to rank 1 alone: rank 0 learns it at the next step and stops with the same signal.
  const Outcome first = stop(args, [&](pid_t) {
    const pid_t rank1 = find_rank(1, output.string());
    REQUIRE(rank1 != 0);
    kill(rank1, SIGTERM);
  });
  INFO(first.err);
  CHECK(first.exit_code == 128 + SIGTERM);
  CHECK(first.err.find("stopped by signal 15 (sent to rank 1) after step") != std::string::npos);
  REQUIRE(fs::is_regular_file(output / "last/model.safetensors"));
  const int stopped_at = last_step(output);
  CHECK(stopped_at > 0);
  CHECK(lines_of(output / "metrics.jsonl") == static_cast<std::size_t>(stopped_at));

  // mpirun passes SIGUSR1 on to every rank (its SIGINT would kill them a second later): they
  // stop with a checkpoint, as a plain process does, and the run resumed.
  const Outcome second =
      stop(concat(args, {"--resume", output.string()}), [](pid_t job) { kill(job, SIGUSR1); });
  INFO(second.err);
  CHECK(second.exit_code == 128 + SIGUSR1);
  CHECK(second.err.find("resuming from") != std::string::npos);
  CHECK(second.err.find("stopped by signal " + std::to_string(SIGUSR1)) != std::string::npos);
  CHECK(last_step(output) > stopped_at);
  CHECK(fs::is_regular_file(output / "last/optimizer.bin"));
}

TEST_CASE(
    "mpi: an error inside a training step on one rank stops every rank before that step, and "
    "rank 0 keeps the last whole one",
    "[mpi][train]") {
  const fs::path dir = scratch_dir("mpi_train_step_error");
  write_file(dir / "train.txt", corpus(kStoryWords, 64, 10, 5, false));
  const fs::path output = dir / "run";
  // The same pipeline both times, with a mask that fails only when the environment says so.
  auto job = [&](const std::vector<std::string>& env, const std::vector<std::string>& extra) {
    return concat(
        concat(concat({"/usr/bin/env"}, env),
               train_on_two_ranks(dir, output,
                                  {"--allow-plugin-file", "--set",
                                   std::string("mask.plugin=") + MASQUE_FAILING_MASK, "--set",
                                   "task.batch_size=8", "--set", "task.steps=12"})),
        extra);
  };
  // Rank 1 lays out 4 records a step; its 21st layout falls in step 5 or 6 (the objective
  // probes the mask before the first step). Before the fix rank 1 ended the job through
  // MPI_Abort while rank 0 waited in a reduction: no checkpoint, the steps lost.
  const Outcome failed =
      run_within(job({"MASQUE_TEST_FAIL_RANK=1", "MASQUE_TEST_FAIL_AFTER=20"}, {}), dir, 120);
  INFO(failed.err);
  CHECK(failed.exit_code == 3);
  CHECK(failed.err.find("rank 1 of 2 on ") != std::string::npos);
  CHECK(failed.err.find("test-failing: layout 21 fails on purpose") != std::string::npos);
  CHECK(failed.err.find("failed on rank 1 (its error is above)") != std::string::npos);
  CHECK(failed.err.find("the run failed after step") != std::string::npos);
  REQUIRE(fs::is_regular_file(output / "last/model.safetensors"));
  const int kept = last_step(output);
  CHECK(kept >= 4);
  CHECK(kept <= 5);
  CHECK(lines_of(output / "metrics.jsonl") == static_cast<std::size_t>(kept));
  // The cause gone, --resume finishes the run.
  const Outcome resumed = run_within(job({}, {"--resume", output.string()}), dir, 120);
  INFO(resumed.err);
  CHECK(resumed.exit_code == 0);
  CHECK(last_step(output) == 12);
}

namespace {

std::vector<json> probe(const std::vector<std::string>& launcher, const fs::path& dir) {
  const Outcome o = run(concat(launcher, {MASQUE_DIST_PROBE}), dir);
  INFO(o.err);
  REQUIRE(o.exit_code == 0);
  return parse_jsonl(read_file(dir / "stdout"));
}

}  // namespace

TEST_CASE("mpi: the communicator reduces in rank order and moves bytes", "[mpi]") {
  const fs::path dir = scratch_dir("mpi_probe");
  SECTION("one process without mpirun") {
    const auto lines = probe({}, dir);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0]["uses_mpi"] == false);
    CHECK(lines[0]["size"] == 1);
    CHECK(lines[0]["u"] == 1);
    CHECK(lines[0]["d"][0].get<double>() == 0.1);
  }
  SECTION("three ranks") {
    auto launcher = mpirun(3);
    launcher.pop_back();  // not masque: the probe
    const auto lines = probe(launcher, dir);
    REQUIRE(lines.size() == 3);
    const double d0 = (0.1 * 1 + 0.1 * 2) + 0.1 * 3;  // rank order, in double
    for (int r = 0; r < 3; ++r) {
      const json& l = lines[static_cast<std::size_t>(r)];
      INFO("rank " << r);
      CHECK(l["rank"] == r);
      CHECK(l["size"] == 3);
      CHECK(l["uses_mpi"] == true);
      CHECK(l["local_size"] == 3);
      // ((1 + 1e8) + -1e8) is 0 in float; any other order gives 1 or 0: rank order gives 0.
      CHECK(l["f0_bits"] == 0u);
      CHECK(l["f_last"] == 6.0);
      CHECK(l["d"][0].get<double>() == d0);
      CHECK(l["d"][1].get<double>() == (1.0 / 3.0 + 1.0 / 3.0) + 1.0 / 3.0);
      CHECK(l["u"] == 6);
      CHECK(l["message"] == "from rank 0");
      CHECK(l["everyone"] == json::array({"r0", "r1", "r2"}));
    }
    CHECK(lines[0]["echoed_bytes"] == (3u << 20) + 3);
    CHECK(lines[0]["echoed_tail"] == "end");
  }
}

namespace {

std::vector<double> step_losses(const fs::path& metrics) {
  std::vector<double> out;
  std::istringstream in(read_file(metrics));
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

}  // namespace

TEST_CASE(
    "mpi: mpirun -n 2 masque train is data-parallel: 50 steps equal one process's within "
    "1e-5",
    "[mpi][train]") {
  const fs::path dir = scratch_dir("mpi_train");
  write_file(dir / "train.txt", corpus(kStoryWords, 64, 12, 11, false));
  const std::string pipeline = (source_dir() / "pipelines/train-causal-lm.yaml").string();
  auto train = [&](const std::string& name) {
    return std::vector<std::string>{"train",
                                    pipeline,
                                    "-q",
                                    "--set",
                                    "task.train_file=" + (dir / "train.txt").string(),
                                    "--set",
                                    "task.output=" + (dir / name).string(),
                                    "--set",
                                    "task.steps=50",
                                    "--set",
                                    "task.batch_size=8",
                                    "--set",
                                    "task.lr=1e-3"};
  };
  fs::create_directories(dir / "one.log");
  const Outcome one = run(concat({binary().string()}, train("one")), dir / "one.log");
  INFO(one.err);
  REQUIRE(one.exit_code == 0);
  fs::create_directories(dir / "two.log");
  auto two_args = mpirun(2);
  two_args.pop_back();  // the binary is the first of train's arguments
  const Outcome two =
      run(concat(concat(two_args, {binary().string()}), train("two")), dir / "two.log");
  INFO(two.err);
  REQUIRE(two.exit_code == 0);
  const auto a = step_losses(dir / "one/metrics.jsonl"), b = step_losses(dir / "two/metrics.jsonl");
  REQUIRE(a.size() == 50);
  REQUIRE(b.size() == 50);
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(b[i] == Approx(a[i]).epsilon(1e-5));
  }
  // Rank 0 alone wrote the run folder; the checkpoint loads like any model folder.
  CHECK(fs::is_regular_file(dir / "two/last/model.safetensors"));
  CHECK(fs::is_regular_file(dir / "two/last/tokenizer.model"));
}
