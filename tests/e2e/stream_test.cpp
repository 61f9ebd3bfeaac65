// --stream: lm-generate and seq2seq text written as the tokens are chosen, in input order, and
// byte for byte what a run without --stream writes.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "test_support.hpp"

using namespace masque::test;

namespace {

std::string ready(const char* name) {
  return (source_dir() / "pipelines" / name).string();
}

struct Child {
  pid_t pid = -1;
  int in = -1, out = -1;
};

// masque with its stdin and stdout on pipes (stderr dropped).
Child spawn(const std::vector<std::string>& args) {
  int in[2], out[2];
  REQUIRE(::pipe(in) == 0);
  REQUIRE(::pipe(out) == 0);
  Child c;
  c.pid = ::fork();
  REQUIRE(c.pid >= 0);
  if (c.pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 2);
    for (int fd : {in[0], in[1], out[0], out[1], null}) ::close(fd);
    std::vector<char*> argv;
    std::string exe = binary().string();
    argv.push_back(exe.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  c.in = in[1];
  c.out = out[0];
  return c;
}

// What arrives on `fd` within `seconds` (stops early once `enough` bytes are there).
std::string read_for(int fd, double seconds, std::size_t enough) {
  std::string got;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (got.size() < enough) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          end - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    char buffer[4096];
    const auto n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    got.append(buffer, static_cast<std::size_t>(n));
  }
  return got;
}

}  // namespace

TEST_CASE("stream: lm-generate text equals a run without --stream, in input order",
          "[e2e][stream]") {
  const std::string input = "Once upon a time\nThe little dog\n\nOne day, Lily\nTom and Sam\n";
  const std::vector<std::string> args{
      "run",   ready("lm-generate.yaml"), "--format", "text", "-q", "--threads", "2",
      "--set", "run.max_batch_size=2"};
  auto streamed = args;
  streamed.push_back("--stream");
  const auto plain = run_masque(args, input);
  const auto with = run_masque(streamed, input);
  INFO(with.err);
  REQUIRE(plain.exit_code == 0);
  REQUIRE(with.exit_code == 0);
  CHECK(plain.out.size() > 1000);  // five stories (a story may hold line breaks of its own)
  CHECK(with.out == plain.out);
}

TEST_CASE("stream: seq2seq greedy text equals a run without --stream, beam is refused",
          "[e2e][stream]") {
  const std::string input = "س م ي ر\nن ا د ي ة\nم ح م د\n";
  const std::vector<std::string> args{"run",   ready("translate.yaml"), "--format", "text", "-q",
                                      "--set", "decoder.plugin=greedy"};
  auto streamed = args;
  streamed.push_back("--stream");
  const auto plain = run_masque(args, input);
  const auto with = run_masque(streamed, input);
  INFO(with.err);
  REQUIRE(with.exit_code == 0);
  CHECK(with.out == plain.out);
  const auto beam =
      run_masque({"run", ready("translate.yaml"), "--format", "text", "--stream"}, input);
  CHECK(beam.exit_code == 2);
  CHECK_THAT(beam.err, Catch::Contains("--stream needs a decoder that keeps one hypothesis"));
  const auto jsonl = run_masque({"run", ready("lm-generate.yaml"), "--stream"}, "x\n");
  CHECK(jsonl.exit_code == 2);
  CHECK_THAT(jsonl.err, Catch::Contains("--stream needs --format text"));
  for (const char* option : {"task.replace_unknowns=true", "task.return_attention=true"}) {
    auto settled = streamed;
    settled.insert(settled.end(), {"--set", option});
    const auto refused = run_masque(settled, input);
    CHECK(refused.exit_code == 2);
    CHECK_THAT(refused.err, Catch::Contains("the text is settled only after the search"));
  }
}

TEST_CASE("stream: the story reaches a pipe while it is being generated", "[e2e][stream]") {
  // Without --stream a pipe gets stdout's 4 KiB blocks: a 256-token story (about 1 KiB) arrives
  // only when masque exits. With --stream its text arrives token by token, before the record's
  // line is complete and while stdin is still open.
  Child c =
      spawn({"run", ready("lm-generate.yaml"), "--format", "text", "--stream", "--threads", "1"});
  const std::string prompt = "Once upon a time\n";
  REQUIRE(::write(c.in, prompt.data(), prompt.size()) == static_cast<ssize_t>(prompt.size()));
  const std::string first = read_for(c.out, 30, 40);
  CHECK(first.size() >= 40);
  ::close(c.in);  // now the run can end
  const std::string rest = read_for(c.out, 60, SIZE_MAX);
  ::close(c.out);
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  const auto plain =
      run_masque({"run", ready("lm-generate.yaml"), "--format", "text", "-q"}, prompt);
  CHECK(first + rest == plain.out);
}
