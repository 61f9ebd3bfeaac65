#include "test_support.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "registry.hpp"

extern char** environ;

namespace masque::test {

namespace fs = std::filesystem;

fs::path shared_dir() {
  return MASQUE_SHARED_DIR;
}
fs::path source_dir() {
  return MASQUE_SOURCE_DIR;
}
fs::path binary() {
  return MASQUE_BINARY;
}
fs::path plugin_dir() {
  return MASQUE_BUILD_PLUGIN_DIR;
}

const Registry& build_registry() {
  static const Registry* registry = new Registry({plugin_dir()});  // plugins stay loaded
  return *registry;
}

namespace {

// The running test case's name as one path component. CTest runs every test case in its own
// process, so test cases of one file run in parallel and must not share scratch directories;
// one test case never runs twice at once, so its name keeps reruns in the same place.
std::string test_case_component() {
  std::string name;
  try {
    name = Catch::getResultCapture().getCurrentTestName();
  } catch (const std::exception&) {
    return "pid_" + std::to_string(::getpid());  // outside a test case
  }
  std::string out;
  for (char c : name) {
    const bool plain = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
    out += plain ? c : '_';
  }
  if (out.size() > 80)
    out = out.substr(0, 80) + "_" + std::to_string(std::hash<std::string>{}(name));
  return out;
}

}  // namespace

fs::path scratch_dir(const std::string& name) {
  fs::path dir = fs::path(MASQUE_TEST_OUTPUT_DIR) / "scratch" / test_case_component() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

fs::path own_scratch_dir(const std::string& name) {
  static std::atomic<int> count{0};
  return scratch_dir(name + "_" + std::to_string(++count));
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::vector<nlohmann::json> parse_jsonl(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  return parse_jsonl(read_file(path));
}

RunResult run_masque(const std::vector<std::string>& args, const std::string& input,
                     const std::map<std::string, std::string>& env) {
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe(in_pipe) || pipe(out_pipe) || pipe(err_pipe)) throw std::runtime_error("pipe failed");
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (env.count(key)) continue;
    env_strings.push_back(kv);
  }
  for (const auto& [k, v] : env)
    if (!v.empty()) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings{binary().string()};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]})
      close(fd);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  signal(SIGPIPE, SIG_IGN);
  RunResult result;
  std::size_t written = 0;
  if (input.empty()) {
    close(in_pipe[1]);
    in_pipe[1] = -1;
  } else {
    fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  }
  bool out_open = true, err_open = true;
  char buf[65536];
  while (out_open || err_open) {
    std::vector<pollfd> fds;
    if (out_open) fds.push_back({out_pipe[0], POLLIN, 0});
    if (err_open) fds.push_back({err_pipe[0], POLLIN, 0});
    if (in_pipe[1] >= 0) fds.push_back({in_pipe[1], POLLOUT, 0});
    poll(fds.data(), fds.size(), -1);
    for (auto& p : fds) {
      if (p.fd == in_pipe[1] && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
        ssize_t n = write(in_pipe[1], input.data() + written, input.size() - written);
        if (n > 0) written += static_cast<std::size_t>(n);
        if (n < 0 || written == input.size()) {
          close(in_pipe[1]);
          in_pipe[1] = -1;
        }
      } else if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
        ssize_t n = read(p.fd, buf, sizeof buf);
        if (n <= 0) {
          close(p.fd);
          (p.fd == out_pipe[0] ? out_open : err_open) = false;
        } else {
          (p.fd == out_pipe[0] ? result.out : result.err).append(buf, static_cast<std::size_t>(n));
        }
      }
    }
  }
  if (in_pipe[1] >= 0) close(in_pipe[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

Batch source_batch(const std::vector<std::vector<TokenId>>& rows, TokenId pad) {
  Batch batch;
  batch.batch = static_cast<std::int32_t>(rows.size());
  for (const auto& r : rows)
    batch.length = std::max(batch.length, static_cast<std::int32_t>(r.size()));
  const auto n = static_cast<std::size_t>(batch.batch) * batch.length;
  batch.ids.assign(n, pad);
  batch.positions.assign(n, 0);
  batch.attention.reset(batch.batch, batch.length);
  for (std::int32_t b = 0; b < batch.batch; ++b) {
    SequenceMask mask;
    for (std::size_t t = 0; t < rows[b].size(); ++t) {
      batch.ids[b * batch.length + t] = rows[b][t];
      batch.positions[b * batch.length + t] = static_cast<std::int32_t>(t);
      mask.rank.push_back(0);
      mask.role.push_back(TokenRole::content);
    }
    batch.attention.set_row(b, mask);
  }
  return batch;
}

bool cpu_has_bf16_matmuls() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core:
    case dnnl::cpu_isa::avx512_core_vnni:
    case dnnl::cpu_isa::avx512_core_bf16:
    case dnnl::cpu_isa::avx512_core_amx:
      return true;
    default:
      return false;
  }
}

}  // namespace masque::test
