// SIGTERM, like SIGINT (tests/e2e), stops a run with only complete records written; so do the
// other signals whose default action would end the process (HUP, QUIT, USR1, USR2).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "hardening_support.hpp"
#include "test_support.hpp"

using namespace masque::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::size_t lines_in(const fs::path& file) {
  const std::string text = read_file(file);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

// Runs a generation into a file, sends `sig` once a few records are written and checks that
// the run ended with 128+sig, only complete records and the message saying how many.
void check_stopped_by(int sig) {
  const fs::path dir = scratch_dir("signal_" + std::to_string(sig));
  write_lines(dir / "in.txt", 400, [](std::size_t) { return "Once upon a time"; });
  const std::string out = (dir / "out.jsonl").string(), err = (dir / "err.txt").string();
  const std::vector<std::string> args = {binary().string(),
                                         "run",
                                         ready_pipeline("lm-generate.yaml"),
                                         "-i",
                                         (dir / "in.txt").string(),
                                         "-o",
                                         out,
                                         "--unbuffered",
                                         "--set",
                                         "task.max_batch_size=1"};
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!freopen(err.c_str(), "w", stderr)) _exit(126);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // Wait for a few records (the output is flushed per record), then stop the run.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while ((!fs::exists(out) || lines_in(out) < 3) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  INFO("signal " << sig << ", stderr: " << read_file(err));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + sig);
  const std::string text = read_file(out);
  REQUIRE(!text.empty());
  CHECK(text.back() == '\n');
  const auto records = parse_jsonl(text);  // throws on a half-written record
  CHECK(records.size() >= 3);
  CHECK(records.size() < 400);
  for (std::size_t i = 0; i < records.size(); ++i) CHECK(records[i]["id"] == i);
  CHECK_THAT(read_file(err),
             Contains("interrupted after " + std::to_string(records.size()) + " complete records"));
}

}  // namespace

TEST_CASE("signals: SIGTERM leaves only complete records", "[hardening][signals]") {
  check_stopped_by(SIGTERM);
}

TEST_CASE("signals: SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 stop a run like SIGTERM",
          "[hardening][signals]") {
  check_stopped_by(GENERATE(SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2));
}
