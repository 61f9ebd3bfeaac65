// Where plugins come from: only the plugin directories, never the current directory; library
// files named in a pipeline only with --allow-plugin-file; broken files reported, not loaded.
#include <catch2/catch.hpp>

#include <cstring>

#include "hardening_support.hpp"
#include "test_support.hpp"

using namespace masque::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const char* kTestPlugin = "libmasque-tokenizer-test-chars.so";

fs::path test_plugin() {
  return fs::path(TEST_PLUGIN_DIR) / kTestPlugin;
}

}  // namespace

TEST_CASE("plugins: a plugin in the current directory is never loaded by accident",
          "[hardening][plugins]") {
  const fs::path cwd = scratch_dir("plugin_cwd");
  fs::copy_file(test_plugin(), cwd / kTestPlugin);
  write_file(cwd / "p.yaml", "task: tokenize\ntokenizer: test-chars\n");
  // Unset, empty, ':' and '.' all leave the current directory out of the search.
  for (const char* path : {"", ":", ".", "::.:"}) {
    INFO("MASQUE_PLUGIN_PATH='" << path << "'");
    const std::map<std::string, std::string> env = {{"MASQUE_PLUGIN_PATH", path}};
    const Measured listed = run_measured({"plugins"}, {}, cwd, env, cwd);
    CHECK(listed.exit_code == 0);
    CHECK(listed.out.find("test-chars") == std::string::npos);
    const Measured used = run_measured({"run", "p.yaml"}, {}, cwd, env, cwd);
    CHECK(used.exit_code == 2);
    CHECK_THAT(used.err, Contains("unknown tokenizer plugin 'test-chars'"));
  }
}

TEST_CASE(
    "plugins: a library file named in a pipeline is refused unless allowed, and then "
    "resolves against the pipeline's folder",
    "[hardening][plugins]") {
  const fs::path cwd = scratch_dir("plugin_file_cwd");
  const fs::path pipelines = scratch_dir("plugin_file_pipelines");
  fs::copy_file(test_plugin(), cwd / kTestPlugin);
  write_file(pipelines / "p.yaml",
             std::string("task: tokenize\ntokenizer: {plugin: ") + kTestPlugin + "}\n");
  write_file(cwd / "in.txt", "a\n");
  const std::vector<std::string> run = {"run", (pipelines / "p.yaml").string(), "-q"};

  const Measured refused = run_measured(run, cwd / "in.txt", cwd, {}, cwd);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Contains("names a library file; plugins are loaded only from the plugin "
                                   "directories"));
  CHECK_THAT(refused.err, Contains("--allow-plugin-file"));

  // Allowed: the name means pipelines/libmasque-...so, which does not exist; the copy in the
  // current directory is not taken instead.
  auto allowed = run;
  allowed.push_back("--allow-plugin-file");
  const Measured missing = run_measured(allowed, cwd / "in.txt", cwd, {}, cwd);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains((pipelines / kTestPlugin).string() + ": no such plugin file"));

  fs::copy_file(test_plugin(), pipelines / kTestPlugin);
  const Measured loaded = run_measured(allowed, cwd / "in.txt", cwd, {}, cwd);
  CHECK(loaded.exit_code == 0);
  CHECK(parse_jsonl(loaded.out).at(0)["ids"] == nlohmann::json::array({1, 97}));  // <s> a

  // --set values name files relative to the working directory, and need the flag as well.
  const Measured by_set = run_measured({"run", (pipelines / "p.yaml").string(), "-q", "--set",
                                        std::string("tokenizer.plugin=./") + kTestPlugin},
                                       cwd / "in.txt", cwd, {}, cwd);
  CHECK(by_set.exit_code == 2);
  CHECK_THAT(by_set.err, Contains("--allow-plugin-file"));
}

TEST_CASE("plugins: files that are not plugins are reported and skipped, never run",
          "[hardening][plugins]") {
  const fs::path dir = scratch_dir("plugin_junk");
  const std::string real = read_file(test_plugin());
  const std::vector<std::pair<std::string, std::string>> files = {
      {"empty", ""},
      {"text", "not a library\n"},
      {"elf-magic",
       "\x7f"
       "ELF"},
      {"truncated", real.substr(0, 64)},
      {"half", real.substr(0, real.size() / 2)},
      {"garbled-header",
       [&] {
         std::string s = real;
         for (std::size_t i = 0x20; i < 0x40; ++i) s[i] = '\xff';  // e_shoff, e_shnum, ...
         return s;
       }()},
      // Intact but for one section name index far outside the name table: Boost.DLL alone
      // would read there.
      {"bad-name-index", [&] {
         std::string s = real;
         std::uint64_t shoff = 0;
         std::memcpy(&shoff, s.data() + 0x28, sizeof shoff);
         const std::uint32_t far = 0x7fffffff;
         std::memcpy(s.data() + shoff + 64, &far, sizeof far);  // section 1's sh_name
         return s;
       }()}};
  for (const auto& [name, bytes] : files)
    write_file(dir / ("libmasque-tokenizer-junk-" + name + ".so"), bytes);
  const std::map<std::string, std::string> env = {{"MASQUE_PLUGIN_PATH", dir.string()}};
  // `masque plugins` lists broken files as errors (exit 2); other commands warn and go on.
  auto listed = run_masque({"plugins"}, "", env);
  CHECK(listed.exit_code == 2);
  CHECK_THAT(listed.out, Contains("causal"));
  auto masked = run_masque({"mask", "--strategy", "causal", "a", "b"}, "", env);
  CHECK(masked.exit_code == 0);
  for (const auto& [name, bytes] : files) {
    INFO(name);
    const std::string file = (dir / ("libmasque-tokenizer-junk-" + name + ".so")).string();
    CHECK_THAT(listed.err, Contains(file + ": not a loadable shared library ("));
    CHECK_THAT(masked.err,
               Contains("warning: skipping " + file + ": not a loadable shared library"));
  }
  auto used = run_masque({"tokenize", "--tokenizer", "junk-half"}, "a\n", env);
  CHECK(used.exit_code == 2);
  CHECK_THAT(used.err, Contains("tokenizer plugin 'junk-half' cannot be used"));
}
