// Corpus processing that scripts rely on: one output record per input record, in order, bad
// records marked, documented exit codes, determinism across threads and batch sizes, clean
// stops on SIGINT and on a closed output, progress only on a terminal.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string pipeline(const char* name) {
  return (source_dir() / "pipelines" / name).string();
}

enum class Kind { text, empty, long_line, bad_utf8, chinese };

// A deterministic corpus of `n` records with the awkward cases sprinkled in.
std::vector<Kind> make_corpus(std::size_t n, const fs::path& file) {
  std::mt19937 rng(12345);
  const char* words[] = {"once", "upon",  "a",    "time", "there", "was", "little",
                         "girl", "named", "lily", "she",  "loved", "to",  "play",
                         "in",   "the",   "park", "with", "her",   "dog"};
  std::vector<Kind> kinds;
  std::string text;
  for (std::size_t i = 0; i < n; ++i) {
    Kind k = i % 97 == 5     ? Kind::empty
             : i % 501 == 7  ? Kind::long_line
             : i % 333 == 11 ? Kind::bad_utf8
             : i % 50 == 3   ? Kind::chinese
                             : Kind::text;
    kinds.push_back(k);
    switch (k) {
      case Kind::empty:
        break;
      case Kind::long_line:
        for (int w = 0; w < 3000; ++w) text += std::string(words[rng() % 20]) + " ";
        break;
      case Kind::bad_utf8:
        text += "The cat \xff\xfe sat";
        break;
      case Kind::chinese:
        text += "小猫在公园里玩。";
        break;
      case Kind::text:
        for (int w = 0, m = 3 + rng() % 12; w < m; ++w)
          text += std::string(w ? " " : "") + words[rng() % 20];
        text += ".";
        break;
    }
    text += "\n";
  }
  write_file(file, text);
  return kinds;
}

// Runs masque with stdout to a pipe; calls `on_output` with everything read so far until it
// returns true, then `act(pid, out_fd)`. Returns the exit status and all stdout / stderr.
struct Spawned {
  int status = 0;
  std::string out, err;
};
template <class Until, class Act>
Spawned spawn(const std::vector<std::string>& args, Until until, Act act) {
  int out_pipe[2], err_pipe[2];
  REQUIRE(pipe(out_pipe) == 0);
  REQUIRE(pipe(err_pipe) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], devnull}) close(fd);
    std::vector<std::string> all{binary().string()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  Spawned s;
  char buf[65536];
  bool acted = false;
  while (true) {
    ssize_t n = read(out_pipe[0], buf, sizeof buf);
    if (n <= 0) break;
    s.out.append(buf, static_cast<std::size_t>(n));
    if (!acted && until(s.out)) {
      acted = true;
      if (act(pid, out_pipe[0])) break;  // the act closed our end
    }
  }
  if (!acted || fcntl(out_pipe[0], F_GETFD) != -1) close(out_pipe[0]);
  while (true) {
    ssize_t n = read(err_pipe[0], buf, sizeof buf);
    if (n <= 0) break;
    s.err.append(buf, static_cast<std::size_t>(n));
  }
  close(err_pipe[0]);
  waitpid(pid, &s.status, 0);
  return s;
}

}  // namespace

TEST_CASE("corpus: 10000 records with empty, very long, invalid and Chinese lines",
          "[e2e][corpus]") {
  auto dir = scratch_dir("corpus_10k");
  auto kinds = make_corpus(10000, dir / "in.txt");
  auto r = run_masque({"run", pipeline("lm-score.yaml"), "-i", (dir / "in.txt").string(),
                       "--threads", "2", "--summary", (dir / "summary.json").string()});
  CHECK(r.exit_code == 1);  // some records failed
  auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 10000);
  std::size_t failed = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    INFO("record " << i);
    REQUIRE(out[i]["id"] == i);
    const bool error = out[i].contains("error");
    failed += error;
    switch (kinds[i]) {
      case Kind::empty:
        CHECK(out[i]["error"].get<std::string>().find("nothing to score") == 0);
        break;
      case Kind::long_line:
        CHECK(out[i]["error"].get<std::string>().find(
                  "more than the model's maximum positions (512)") != std::string::npos);
        break;
      case Kind::bad_utf8:
        CHECK(out[i]["error"].get<std::string>().find("invalid UTF-8 at byte 8") == 0);
        break;
      case Kind::chinese:
      case Kind::text:
        CHECK_FALSE(error);
        CHECK(out[i]["ppl"].get<double>() > 1.0);
        break;
    }
  }
  CHECK(r.err.find("masque: 10000 records, " + std::to_string(10000 - failed) + " ok, " +
                   std::to_string(failed) + " failed") != std::string::npos);
  auto summary = json::parse(read_file(dir / "summary.json"));
  CHECK(summary["records"] == 10000);
  CHECK(summary["failed"] == failed);
  CHECK(summary["task"]["records"] == 10000 - failed);
  CHECK(summary["task"]["perplexity"].get<double>() > 1.0);

  // Plain text output keeps one line per record too.
  auto text = run_masque({"run", pipeline("lm-score.yaml"), "-i", (dir / "in.txt").string(), "-q",
                          "--format", "text"});
  CHECK(std::count(text.out.begin(), text.out.end(), '\n') == 10000);

  // --fail-fast stops at the first failure, which is the last record written.
  auto fast = run_masque(
      {"run", pipeline("lm-score.yaml"), "-i", (dir / "in.txt").string(), "-q", "--fail-fast"});
  CHECK(fast.exit_code == 1);
  auto fast_out = parse_jsonl(fast.out);
  REQUIRE(fast_out.size() == 6);  // records 0..5; record 5 is the first empty line
  CHECK(fast_out.back().contains("error"));
  CHECK(fast.err.find("--fail-fast") != std::string::npos);

  // Replacing invalid UTF-8 instead of failing the record.
  auto replaced =
      run_masque({"run", pipeline("lm-score.yaml"), "-q", "--set", "task.invalid_utf8=replace"},
                 "The cat \xff sat\n");
  CHECK(replaced.exit_code == 0);
}

TEST_CASE("corpus: byte-identical output for 1 and 2 threads and batch sizes 1, 7 and 64",
          "[e2e][corpus]") {
  auto dir = scratch_dir("corpus_determinism");
  make_corpus(300, dir / "in.txt");
  auto run = [&](const std::vector<std::string>& extra, const char* p) {
    std::vector<std::string> args{"run", pipeline(p), "-q", "-i", (dir / "in.txt").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_masque(args).out;
  };
  for (const char* mode : {"score", "greedy", "sample"}) {
    INFO(mode);
    std::vector<std::string> base;
    const char* p = "lm-score.yaml";
    if (std::string(mode) != "score") {
      p = "lm-generate.yaml";
      base = {"--set", "decoder.max_new_tokens=24"};
      if (std::string(mode) == "sample")
        base.insert(base.end(), {"--set", "decoder.plugin=sample", "--set", "decoder.seed=9",
                                 "--set", "decoder.top_k=40"});
    }
    std::string reference;
    for (const char* batch : {"1", "7", "64"})
      for (const char* threads : {"1", "2"}) {
        auto args = base;
        args.insert(args.end(),
                    {"--threads", threads, "--set", std::string("task.max_batch_size=") + batch});
        std::string out = run(args, p);
        if (reference.empty()) reference = out;
        INFO("batch " << batch << ", threads " << threads);
        CHECK(out == reference);
      }
    CHECK(std::count(reference.begin(), reference.end(), '\n') == 300);
  }
}

TEST_CASE("corpus: SIGINT mid-way leaves only complete records", "[e2e][corpus]") {
  auto dir = scratch_dir("corpus_sigint");
  std::string input;
  for (int i = 0; i < 400; ++i) input += "Once upon a time\n";
  write_file(dir / "in.txt", input);
  auto s = spawn(
      {"run", pipeline("lm-generate.yaml"), "-i", (dir / "in.txt").string(), "--unbuffered",
       "--set", "task.max_batch_size=1"},
      [](const std::string& out) { return std::count(out.begin(), out.end(), '\n') >= 3; },
      [](pid_t pid, int) {
        kill(pid, SIGINT);
        return false;
      });
  REQUIRE(WIFEXITED(s.status));
  CHECK(WEXITSTATUS(s.status) == 128 + SIGINT);
  REQUIRE(!s.out.empty());
  CHECK(s.out.back() == '\n');
  auto out = parse_jsonl(s.out);  // throws on a half-written record
  CHECK(out.size() >= 3);
  CHECK(out.size() < 400);
  for (std::size_t i = 0; i < out.size(); ++i) CHECK(out[i]["id"] == i);
  CHECK(s.err.find("interrupted after " + std::to_string(out.size()) + " complete records") !=
        std::string::npos);
}

TEST_CASE("corpus: a closed output stops the run cleanly", "[e2e][corpus]") {
  auto dir = scratch_dir("corpus_epipe");
  std::string input;
  for (int i = 0; i < 3000; ++i) input += "Once upon a time there was a girl.\n";
  write_file(dir / "in.txt", input);
  auto s = spawn(
      {"run", pipeline("lm-score.yaml"), "-i", (dir / "in.txt").string(), "--unbuffered"},
      [](const std::string& out) { return out.find('\n') != std::string::npos; },
      [](pid_t, int fd) {
        close(fd);  // like `| head -1`
        return true;
      });
  REQUIRE(WIFEXITED(s.status));  // not killed by SIGPIPE
  CHECK(WEXITSTATUS(s.status) == 3);
  CHECK(s.err.find("cannot write the output") != std::string::npos);
}

TEST_CASE("corpus: the summary of a stopped or empty run does not pass off its figures",
          "[e2e][corpus]") {
  const auto dir = scratch_dir("corpus_summary_counts");
  std::string input;
  for (int i = 0; i < 3000; ++i) input += "Once upon a time there was a girl.\n";
  write_file(dir / "in.txt", input);
  write_file(dir / "empty.txt", "\n");
  const auto err = dir / "err.txt";
  // `| head -1`: the task has processed records that were never written.
  auto closed = [&](const std::string& args) {
    std::filesystem::remove(err);
    const std::string cmd =
        binary().string() + " run " + args + " 2>" + err.string() + " | head -1 >/dev/null";
    CHECK(std::system(cmd.c_str()) == 0);
    return read_file(err);
  };
  const std::string scored =
      closed(pipeline("lm-score.yaml") + " --threads 2 -i " + (dir / "in.txt").string());
  CHECK_THAT(scored, Catch::Contains("masque: stopped early: the task's figures count every "
                                     "record processed, written or not"));
  CHECK_THAT(scored, Catch::Contains("complete records"));
  // A streamed story over several lines: its first line is out, the record is not complete.
  const std::string streamed =
      closed(pipeline("lm-generate.yaml") + " --stream -f text --threads 1 -i " +
             (dir / "empty.txt").string());
  CHECK_THAT(streamed, Catch::Contains("stopped after 0 complete records (--stream wrote part of "
                                       "record 0)"));
  // No input: no corpus perplexity of nothing.
  const auto summary = dir / "summary.json";
  auto none = run_masque({"run", pipeline("lm-score.yaml"), "--summary", summary.string()}, "");
  CHECK(none.exit_code == 0);
  CHECK(none.err.find("perplexity") == std::string::npos);
  const json figures = json::parse(read_file(summary));
  CHECK(figures["task"].is_null());
  CHECK(figures["complete"] == true);
}

TEST_CASE("corpus: progress on a terminal only and --quiet silences it", "[e2e][corpus]") {
  auto dir = scratch_dir("corpus_progress");
  std::string input;
  for (int i = 0; i < 200; ++i) input += "Once upon a time there was a girl.\n";
  write_file(dir / "in.txt", input);
  auto tty_run = [&](bool quiet) {
    int master = -1;
    pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::vector<std::string> all{
          binary().string(),         "run", pipeline("lm-score.yaml"),   "-i",
          (dir / "in.txt").string(), "-o",  (dir / "out.jsonl").string()};
      if (quiet) all.push_back("--quiet");
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    std::string seen;
    char buf[4096];
    ssize_t n;
    while ((n = read(master, buf, sizeof buf)) > 0) seen.append(buf, static_cast<std::size_t>(n));
    close(master);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WEXITSTATUS(status) == 0);
    return seen;
  };
  std::string shown = tty_run(false);
  CHECK(shown.find("\r\x1b[Kmasque: ") != std::string::npos);
  CHECK(shown.find("records") != std::string::npos);
  CHECK(shown.find("tokens/s") != std::string::npos);
  CHECK(shown.find("ETA") != std::string::npos);  // the input size is known
  std::string quiet = tty_run(true);
  CHECK(quiet.find("records") == std::string::npos);
  // Not a terminal: no progress line, only the summary.
  auto piped = run_masque({"run", pipeline("lm-score.yaml"), "-i", (dir / "in.txt").string()});
  CHECK(piped.err.find("\x1b[K") == std::string::npos);
  CHECK(piped.err.find("200 records") != std::string::npos);
}

TEST_CASE("corpus: formats - JSON-lines fields and TSV columns and --keep-fields",
          "[e2e][corpus]") {
  auto jl = run_masque({"run", pipeline("lm-score.yaml"), "-q", "--input-format", "jsonl",
                        "--field", "story", "--keep-fields"},
                       R"({"story": "Once upon a time.", "source": "a"})"
                       "\n"
                       R"({"other": 1})"
                       "\n");
  CHECK(jl.exit_code == 1);
  auto out = parse_jsonl(jl.out);
  REQUIRE(out.size() == 2);
  CHECK(out[0]["source"] == "a");
  CHECK(out[0]["story"] == "Once upon a time.");
  CHECK(out[1]["error"].get<std::string>().find("no 'story' field") == 0);

  // Fields the output writes or reserves are kept under input_NAME, never copied over or lost.
  auto clash = run_masque(
      {"run", pipeline("lm-score.yaml"), "-q", "--input-format", "jsonl", "--keep-fields"},
      R"({"text": "Once upon a time.", "error": "note", "id": "a7", )"
      R"("nll": 3, "input_id": "b"})"
      "\n");
  CHECK(clash.exit_code == 0);
  auto kept = parse_jsonl(clash.out).at(0);
  CHECK(!kept.contains("error"));
  CHECK(kept["id"] == 0);
  CHECK(kept["nll"] != 3);
  CHECK(kept["text"] == "Once upon a time.");
  CHECK(kept["input_error"] == "note");
  CHECK(kept["input_id"] == "b");
  CHECK(kept["input_input_id"] == "a7");
  CHECK(kept["input_nll"] == 3);

  auto tsv = run_masque(
      {"run", pipeline("lm-score.yaml"), "-q", "--input-format", "tsv", "--format", "tsv"},
      "text\tnote\nOnce upon a time.\tx\nThe end.\ty\n");
  CHECK(tsv.exit_code == 0);
  CHECK(std::count(tsv.out.begin(), tsv.out.end(), '\n') == 2);
  CHECK(tsv.out.rfind("0\t", 0) == 0);

  auto ids = run_masque({"run", pipeline("lm-score.yaml"), "-q", "--input-format", "ids"},
                        "1 403 407 261\n1 99999\n");
  auto ids_out = parse_jsonl(ids.out);
  CHECK(ids_out[0]["tokens"] == 4);
  CHECK(ids_out[1]["error"].get<std::string>().find("out of the model's vocabulary") !=
        std::string::npos);
}

TEST_CASE("corpus: output starts before the input ends (streaming)", "[e2e][corpus]") {
  // Feed one record, wait for its result while stdin stays open, then close.
  int in_pipe[2], out_pipe[2];
  REQUIRE(pipe(in_pipe) == 0);
  REQUIRE(pipe(out_pipe) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1]}) close(fd);
    std::string bin = binary().string(), run = "run", p = pipeline("lm-score.yaml"), q = "-q",
                u = "--unbuffered";
    char* argv[] = {bin.data(), run.data(), p.data(), q.data(), u.data(), nullptr};
    execv(argv[0], argv);
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  const char line[] = "Once upon a time.\n";
  REQUIRE(write(in_pipe[1], line, sizeof line - 1) == static_cast<ssize_t>(sizeof line - 1));
  std::string got;
  char buf[1024];
  auto start = std::chrono::steady_clock::now();
  fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  while (got.find('\n') == std::string::npos &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    ssize_t n = read(out_pipe[0], buf, sizeof buf);
    if (n > 0)
      got.append(buf, static_cast<std::size_t>(n));
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(got.find("\"id\":0") != std::string::npos);  // while stdin is still open
  close(in_pipe[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  close(out_pipe[0]);
  CHECK(WEXITSTATUS(status) == 0);
}
