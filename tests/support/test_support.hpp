// Helpers shared by the tests: paths to ../shared and the build, running the real binary.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "masque/model.hpp"

namespace masque {
class Registry;
}

namespace masque::test {

std::filesystem::path shared_dir();  // ../shared (models, tokenizers, references)
std::filesystem::path source_dir();  // the project root
std::filesystem::path binary();      // the built masque executable
std::filesystem::path plugin_dir();  // the build's plugin directory
// The host over the build's plugins, opened once per test process.
const Registry& build_registry();
// A fresh, empty scratch directory, private to the running test case (CTest runs the test
// cases of one file in parallel processes, which must not clear each other's directories).
std::filesystem::path scratch_dir(const std::string& name);
// The same, and also distinct from every earlier call in this process.
std::filesystem::path own_scratch_dir(const std::string& name);

std::string read_file(const std::filesystem::path& path);
void write_file(const std::filesystem::path& path, const std::string& text);
std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path);
std::vector<nlohmann::json> parse_jsonl(const std::string& text);

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// An encoder's input batch: each row's tokens (right-padded with `pad`), positions 0.., every
// real token visible to every other (what the seq2seq task's source batch is).
Batch source_batch(const std::vector<std::vector<TokenId>>& rows, TokenId pad = 0);

// Whether oneDNN 2.6 has bf16 matmuls on this CPU (AVX-512 and newer: avx512_core and up).
bool cpu_has_bf16_matmuls();

// Runs the masque binary with `args` (no shell), feeding `input` on stdin.
// `env` entries are added to (or, with an empty value, removed from) the environment.
RunResult run_masque(const std::vector<std::string>& args, const std::string& input = "",
                     const std::map<std::string, std::string>& env = {});

}  // namespace masque::test
