// The plugin host through the real binary: discovery, ABI checks, broken and duplicate files.
#include <catch2/catch.hpp>

#include "masque/abi.hpp"
#include "test_support.hpp"

using namespace masque::test;
namespace fs = std::filesystem;

namespace {
std::string dir(const char* scenario) {
  return (fs::path(TEST_PLUGIN_ROOT) / scenario).string();
}
std::map<std::string, std::string> path_env(const std::string& value) {
  return {{"MASQUE_PLUGIN_PATH", value}};
}
}  // namespace

TEST_CASE("masque plugins lists the built-in plugins grouped by kind", "[plugins]") {
  auto r = run_masque({"plugins"}, "", path_env(""));
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("KIND") == 0);
  for (const char* name : {"bidirectional", "causal", "seq2seq", "permutation"})
    CHECK(r.out.find(name) != std::string::npos);
  // Grouped: every mask line comes before any model/decoder line and after any tokenizer line.
  auto first_mask = r.out.find("\nmask ");
  auto last_tokenizer = r.out.rfind("\ntokenizer ");
  REQUIRE(first_mask != std::string::npos);
  if (last_tokenizer != std::string::npos) CHECK(last_tokenizer < first_mask);
  CHECK(r.out.find("test-chars") == std::string::npos);  // only via MASQUE_PLUGIN_PATH
}

TEST_CASE("masque plugins NAME prints every parameter with type, default and help", "[plugins]") {
  auto r = run_masque({"plugins", "permutation"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("mask plugin 'permutation'") != std::string::npos);
  CHECK(r.out.find("libmasque-mask-permutation.so") != std::string::npos);
  CHECK(r.out.find("order") != std::string::npos);
  CHECK(r.out.find("type string, default left-to-right") != std::string::npos);
  CHECK(r.out.find("type int, default 0, range >= 0") != std::string::npos);
  CHECK(r.out.find("one of {content,query}") != std::string::npos);
  CHECK(r.out.find("factorization order") != std::string::npos);  // help text

  auto j = run_masque({"plugins", "mask/permutation", "--json"});
  REQUIRE(j.exit_code == 0);
  auto parsed = nlohmann::json::parse(j.out);
  CHECK(parsed["kind"] == "mask");
  CHECK(parsed["parameters"].size() == 3);
}

TEST_CASE("a plugin outside the plugin directory is found only through MASQUE_PLUGIN_PATH",
          "[plugins]") {
  auto scratch = scratch_dir("plugin_path");
  write_file(scratch / "p.yaml", "task: tokenize\ntokenizer:\n  plugin: test-chars\n");
  auto without = run_masque({"run", (scratch / "p.yaml").string()}, "ab\n", path_env(""));
  CHECK(without.exit_code == 2);
  CHECK(without.err.find("unknown tokenizer plugin 'test-chars'") != std::string::npos);

  auto with =
      run_masque({"run", (scratch / "p.yaml").string(), "-q"}, "ab\n", path_env(dir("good")));
  REQUIRE(with.exit_code == 0);
  auto lines = parse_jsonl(with.out);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["ids"] == nlohmann::json::array({1, 97, 98}));
  CHECK(lines[0]["offsets"] == nlohmann::json::parse("[[0,0],[0,1],[1,2]]"));

  auto listed = run_masque({"plugins"}, "", path_env(dir("good")));
  CHECK(listed.exit_code == 0);
  CHECK(listed.out.find("test-chars") != std::string::npos);
  auto shown = run_masque({"plugins", "test-chars"}, "", path_env(dir("good")));
  CHECK(shown.out.find("limit") != std::string::npos);
  CHECK(shown.out.find("range [1, 100]") != std::string::npos);
}

TEST_CASE("a plugin built for another ABI major version is rejected", "[plugins]") {
  // The test plugin takes this masque's minor version with major 99.
  const std::string future = "ABI 99." + std::to_string(masque::kAbiMinor);
  auto env = path_env(dir("abi"));
  auto listed = run_masque({"plugins"}, "", env);
  CHECK(listed.exit_code == 2);
  CHECK(listed.err.find("libmasque-tokenizer-future.so") != std::string::npos);
  CHECK(listed.err.find("built for masque plugin " + future) != std::string::npos);
  CHECK(listed.err.find("this masque has ABI " + std::to_string(masque::kAbiMajor) + ".") !=
        std::string::npos);

  auto used = run_masque({"tokenize", "--tokenizer", "future"}, "x\n", env);
  CHECK(used.exit_code == 2);
  CHECK(used.err.find("tokenizer plugin 'future' cannot be used") != std::string::npos);
  CHECK(used.err.find(future) != std::string::npos);
}

TEST_CASE("a library without the descriptor is reported, not loaded as a plugin", "[plugins]") {
  auto env = path_env(dir("nodesc"));
  auto listed = run_masque({"plugins"}, "", env);
  CHECK(listed.exit_code == 2);
  CHECK(listed.err.find("libmasque-tokenizer-nodesc.so: not a masque plugin") != std::string::npos);
  CHECK(listed.err.find("masque_plugin_descriptor") != std::string::npos);

  auto used = run_masque({"tokenize", "--tokenizer", "nodesc"}, "x\n", env);
  CHECK(used.exit_code == 2);
  CHECK(used.err.find("tokenizer plugin 'nodesc' cannot be used") != std::string::npos);
}

TEST_CASE("two plugins with the same kind and name are an error naming both files", "[plugins]") {
  auto env = path_env(dir("good") + ":" + dir("dup"));
  auto used = run_masque({"tokenize", "--tokenizer", "test-chars"}, "x\n", env);
  CHECK(used.exit_code == 2);
  CHECK(used.err.find("two plugins provide tokenizer 'test-chars'") != std::string::npos);
  CHECK(used.err.find(dir("good") + "/libmasque-tokenizer-test-chars.so") != std::string::npos);
  CHECK(used.err.find(dir("dup") + "/libmasque-tokenizer-test-chars.so") != std::string::npos);
  auto listed = run_masque({"plugins"}, "", env);
  CHECK(listed.exit_code == 2);
  CHECK(listed.err.find("two plugins provide tokenizer/test-chars") != std::string::npos);
}

TEST_CASE("an unknown plugin name lists the available names of that kind", "[plugins]") {
  auto r = run_masque({"mask", "--strategy", "diagonal", "a", "b"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("unknown mask plugin 'diagonal'") != std::string::npos);
  CHECK(r.err.find("available: bidirectional, block-causal, causal, permutation, seq2seq") !=
        std::string::npos);
}

TEST_CASE("plugin search path: empty and relative entries never mean the current directory",
          "[plugins]") {
  auto r = run_masque({"plugins", "--paths"}, "", path_env("::relative/dir:" + dir("good") + ":"));
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("relative") == std::string::npos);
  CHECK(r.out.find(dir("good")) != std::string::npos);
  auto warn = run_masque({"mask", "--strategy", "causal", "a"}, "", path_env("relative/dir"));
  CHECK(warn.err.find("ignoring the relative directory 'relative/dir'") != std::string::npos);
}

TEST_CASE("a pipeline naming a library file needs --allow-plugin-file", "[plugins]") {
  auto scratch = scratch_dir("plugin_file");
  std::string lib = dir("good") + "/libmasque-tokenizer-test-chars.so";
  write_file(scratch / "p.yaml", "task: tokenize\ntokenizer:\n  plugin: " + lib + "\n");
  auto refused = run_masque({"run", (scratch / "p.yaml").string()}, "a\n", path_env(""));
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("p.yaml:3:3: tokenizer.plugin: '" + lib + "' names a library file") !=
        std::string::npos);
  CHECK(refused.err.find("--allow-plugin-file") != std::string::npos);
  auto allowed = run_masque({"run", (scratch / "p.yaml").string(), "--allow-plugin-file", "-q"},
                            "a\n", path_env(""));
  CHECK(allowed.exit_code == 0);
  CHECK(parse_jsonl(allowed.out).at(0)["ids"] == nlohmann::json::array({1, 97}));
}
