// Helpers of the hardening tests: running masque in a chosen folder with its input from a file,
// measuring its peak memory and time.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace masque::test {

struct Measured {
  int exit_code = -1;  // 128 + N when killed by signal N
  std::string out, err;
  long peak_rss_kb = 0;  // the child's maximum resident set size
  double seconds = 0;
};

// Runs the masque binary with `args`, stdin from `input` (a file; empty = /dev/null), in
// `cwd` (empty = the test's own), with `env` changes as in run_masque. Output goes through
// files in `scratch`, so a large output does not need a reader thread.
Measured run_measured(const std::vector<std::string>& args, const std::filesystem::path& input,
                      const std::filesystem::path& scratch,
                      const std::map<std::string, std::string>& env = {},
                      const std::filesystem::path& cwd = {});

// The pipeline file `name` of pipelines/ as an absolute path.
std::string ready_pipeline(const char* name);

// Writes `lines` lines made by `line(i)` to `file`.
template <class Line>
void write_lines(const std::filesystem::path& file, std::size_t lines, Line line) {
  std::ofstream out(file, std::ios::binary);
  for (std::size_t i = 0; i < lines; ++i) out << line(i) << '\n';
}

}  // namespace masque::test
