#include "hardening_support.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>

#include "test_support.hpp"

extern char** environ;

namespace masque::test {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> child_environment(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (!env.count(kv.substr(0, kv.find('=')))) out.push_back(kv);
  }
  for (const auto& [k, v] : env)
    if (!v.empty()) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// In the child: stdin, stdout and stderr from/to the given files.
void redirect(const fs::path& input, const fs::path& out, const fs::path& err) {
  const int in_fd = ::open(input.empty() ? "/dev/null" : input.c_str(), O_RDONLY);
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in_fd < 0 || out_fd < 0 || err_fd < 0) _exit(126);
  dup2(in_fd, 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
}

}  // namespace

Measured run_measured(const std::vector<std::string>& args, const fs::path& input,
                      const fs::path& scratch, const std::map<std::string, std::string>& env,
                      const fs::path& cwd) {
  std::vector<std::string> argv_strings{binary().string()};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<std::string> env_strings = child_environment(env);
  std::vector<char*> argv = pointers(argv_strings), envp = pointers(env_strings);
  const fs::path out = scratch / "measured.out", err = scratch / "measured.err";

  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    redirect(input, out, err);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(125);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid) throw std::runtime_error("wait4 failed");
  Measured m;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  m.peak_rss_kb = usage.ru_maxrss;
  m.out = read_file(out);
  m.err = read_file(err);
  return m;
}

std::string ready_pipeline(const char* name) {
  return (source_dir() / "pipelines" / name).string();
}

}  // namespace masque::test
