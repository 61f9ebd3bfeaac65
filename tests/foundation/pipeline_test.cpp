// Pipeline files through the real binary: validation errors name file:line:column, the key
// path and what was expected; --set, ${VAR} and relative paths behave as documented.
#include <catch2/catch.hpp>

#include "test_support.hpp"

using namespace masque::test;
namespace fs = std::filesystem;

namespace {

struct Case {
  fs::path file;
  RunResult result;
};

// Writes `yaml` as a pipeline and runs `masque run --dump-config` on it with the test plugin
// directory on MASQUE_PLUGIN_PATH.
Case dump(const std::string& name, const std::string& yaml, std::vector<std::string> extra = {},
          std::map<std::string, std::string> env = {}) {
  auto dir = scratch_dir("pipeline_" + name);
  Case c;
  c.file = dir / "p.yaml";
  write_file(c.file, yaml);
  std::vector<std::string> args{"run", c.file.string(), "--dump-config"};
  args.insert(args.end(), extra.begin(), extra.end());
  env["MASQUE_PLUGIN_PATH"] = (fs::path(TEST_PLUGIN_ROOT) / "good").string();
  c.result = run_masque(args, "", env);
  return c;
}

bool has(const std::string& haystack, const std::string& needle) {
  if (haystack.find(needle) != std::string::npos) return true;
  UNSCOPED_INFO("missing: " << needle << "\nin: " << haystack);
  return false;
}

const char* kBase = "task: tokenize\ntokenizer:\n  plugin: test-chars\n";

}  // namespace

TEST_CASE("pipeline: unknown key", "[pipeline]") {
  auto c = dump("unknown_key", std::string(kBase) + "  limt: 3\n");
  CHECK(c.result.exit_code == 2);
  CHECK(has(c.result.err, c.file.string() + ":4:3: tokenizer.limt: unknown parameter of tokenizer "
                                            "plugin 'test-chars' (did you mean 'limit'?)"));
  CHECK(has(c.result.err, "its parameters: vocab, uppercase, limit"));
}

TEST_CASE("pipeline: wrong type", "[pipeline]") {
  auto c = dump("wrong_type", std::string(kBase) + "  uppercase: maybe\n  limit: [1, 2]\n");
  CHECK(c.result.exit_code == 2);
  CHECK(has(c.result.err,
            c.file.string() + ":4:3: tokenizer.uppercase: expected true or false, got 'maybe'"));
  CHECK(
      has(c.result.err,
          c.file.string() + ":5:3: tokenizer.limit: expected an integer in [1, 100], got a list"));
}

TEST_CASE("pipeline: value out of range", "[pipeline]") {
  auto c = dump("range", std::string(kBase) + "  limit: 101\n");
  CHECK(c.result.exit_code == 2);
  CHECK(has(c.result.err,
            c.file.string() + ":4:3: tokenizer.limit: expected an integer in [1, 100], got 101"));
  auto task =
      dump("range_task", "task:\n  name: tokenize\n  max_batch_size: 0\ntokenizer: test-chars\n");
  CHECK(task.result.exit_code == 2);
  CHECK(
      has(task.result.err, ":3:3: task.max_batch_size: expected an integer in [1, 65536], got 0"));
}

TEST_CASE("pipeline: missing file", "[pipeline]") {
  auto c = dump("missing_file", std::string(kBase) + "  vocab: no/such/vocab.txt\n");
  CHECK(c.result.exit_code == 2);
  CHECK(has(c.result.err, c.file.string() + ":4:3: tokenizer.vocab: no such file or directory: " +
                              (c.file.parent_path() / "no/such/vocab.txt").string()));
}

TEST_CASE("pipeline: structural errors", "[pipeline]") {
  auto unknown_section = dump("section", std::string(kBase) + "decodr:\n  plugin: greedy\n");
  CHECK(unknown_section.result.exit_code == 2);
  CHECK(
      has(unknown_section.result.err, ":4:1: unknown section 'decodr' (did you mean 'decoder'?)"));

  auto no_task = dump("no_task", "tokenizer:\n  plugin: test-chars\n");
  CHECK(no_task.result.exit_code == 2);
  CHECK(has(no_task.result.err, "missing 'task:'"));

  auto bad_task = dump("bad_task", "task: tokenise\ntokenizer: test-chars\n");
  CHECK(bad_task.result.exit_code == 2);
  CHECK(has(bad_task.result.err, ":1:7: task: unknown task 'tokenise' (did you mean 'tokenize'?)"));

  auto no_plugin = dump("no_plugin", "task: tokenize\ntokenizer:\n  limit: 3\n");
  CHECK(no_plugin.result.exit_code == 2);
  CHECK(has(no_plugin.result.err, ":2:1: tokenizer: missing 'plugin:'"));

  auto bad_yaml = dump("bad_yaml", "task: tokenize\ntokenizer: [unclosed\n");
  CHECK(bad_yaml.result.exit_code == 2);
  CHECK(has(bad_yaml.result.err, "invalid YAML"));

  auto missing_section = dump("missing_section", "task: tokenize\n");
  CHECK(missing_section.result.exit_code == 2);
  CHECK(has(missing_section.result.err, "the task 'tokenize' needs a 'tokenizer:' section"));
}

TEST_CASE("pipeline: all problems are reported at once", "[pipeline]") {
  auto c = dump("many", std::string(kBase) + "  limit: 0\n  uppercase: 3\n  nope: 1\n");
  CHECK(c.result.exit_code == 2);
  CHECK(has(c.result.err, ":4:3: tokenizer.limit"));
  CHECK(has(c.result.err, ":5:3: tokenizer.uppercase"));
  CHECK(has(c.result.err, ":6:3: tokenizer.nope"));
}

TEST_CASE("pipeline: --set sets any declared parameter, including ones the file omits",
          "[pipeline]") {
  auto c = dump("set", kBase, {"--set", "tokenizer.limit=7", "--set", "task.add_special=false"});
  REQUIRE(c.result.exit_code == 0);
  CHECK(has(c.result.out, "tokenizer:\n  plugin: test-chars\n"));
  CHECK(has(c.result.out, "  limit: 7\n"));
  CHECK(has(c.result.out, "  add_special: false\n"));

  auto bad = dump("set_bad", kBase, {"--set", "tokenizer.lim=7"});
  CHECK(bad.result.exit_code == 2);
  CHECK(has(bad.result.err,
            "--set tokenizer.lim=7: tokenizer.lim: unknown parameter of tokenizer plugin "
            "'test-chars' (did you mean 'limit'?)"));
  auto bad_value = dump("set_value", kBase, {"--set", "tokenizer.limit=lots"});
  CHECK(bad_value.result.exit_code == 2);
  CHECK(has(
      bad_value.result.err,
      "--set tokenizer.limit=lots: tokenizer.limit: expected an integer in [1, 100], got 'lots'"));
  auto no_eq = dump("set_noeq", kBase, {"--set", "tokenizer.limit"});
  CHECK(no_eq.result.exit_code == 2);
  CHECK(has(no_eq.result.err, "expected section.key=value"));
}

TEST_CASE("pipeline: --set plugin switches plugins, later --set values apply to the new one",
          "[pipeline]") {
  auto dir = scratch_dir("pipeline_switch");
  auto file = dir / "p.yaml";
  write_file(file,
             "task: tokenize\ntokenizer: test-chars\nmask:\n  plugin: permutation\n  seed: 5\n  "
             "order: random\n");
  auto r = run_masque({"run", file.string(), "--dump-config", "--set", "mask.plugin=causal"}, "",
                      {{"MASQUE_PLUGIN_PATH", (fs::path(TEST_PLUGIN_ROOT) / "good").string()}});
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.out, "mask:\n  plugin: causal\n"));
  CHECK(r.out.find("seed") == std::string::npos);
  CHECK(has(r.err, "mask.seed is not a parameter of mask plugin 'causal'; dropped"));

  auto back =
      run_masque({"run", file.string(), "--dump-config", "--set", "mask.plugin=causal", "--set",
                  "mask.plugin=permutation", "--set", "mask.stream=query"},
                 "", {{"MASQUE_PLUGIN_PATH", (fs::path(TEST_PLUGIN_ROOT) / "good").string()}});
  REQUIRE(back.exit_code == 0);
  CHECK(has(back.out, "  stream: query\n"));
  auto strict =
      run_masque({"run", file.string(), "--dump-config", "--set", "mask.plugin=causal", "--set",
                  "mask.seed=3"},
                 "", {{"MASQUE_PLUGIN_PATH", (fs::path(TEST_PLUGIN_ROOT) / "good").string()}});
  CHECK(strict.exit_code == 2);
  CHECK(has(strict.err, "--set mask.seed=3: mask.seed: unknown parameter of mask plugin 'causal'"));
}

TEST_CASE("pipeline: ${VAR} expansion and relative paths", "[pipeline]") {
  auto dir = scratch_dir("pipeline_env");
  write_file(dir / "data" / "vocab.txt", "a\nb\n");
  write_file(
      dir / "p.yaml",
      "task: tokenize\ntokenizer:\n  plugin: test-chars\n  vocab: ${MASQUE_TEST_SUB}/vocab.txt\n");
  auto env = std::map<std::string, std::string>{
      {"MASQUE_PLUGIN_PATH", (fs::path(TEST_PLUGIN_ROOT) / "good").string()},
      {"MASQUE_TEST_SUB", "data"}};
  // Run from another directory: the path resolves against the pipeline file's folder.
  auto r = run_masque({"run", (dir / "p.yaml").string(), "--dump-config"}, "", env);
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.out, "  vocab: " + (dir / "data" / "vocab.txt").string() + "\n"));

  env.erase("MASQUE_TEST_SUB");
  env["MASQUE_TEST_SUB"] = "";
  auto unset = run_masque({"run", (dir / "p.yaml").string(), "--dump-config"}, "", env);
  CHECK(unset.exit_code == 2);
  CHECK(has(unset.err, ":4:3: tokenizer.vocab: environment variable MASQUE_TEST_SUB is not set"));
}

TEST_CASE("pipeline: the dumped configuration loads back to itself", "[pipeline]") {
  auto first = dump("roundtrip", std::string(kBase) +
                                     "  limit: 9\nmask:\n  plugin: permutation\n  order: 2,0,1\n");
  REQUIRE(first.result.exit_code == 0);
  auto dir = scratch_dir("pipeline_roundtrip2");
  write_file(dir / "p.yaml", first.result.out);
  auto second =
      run_masque({"run", (dir / "p.yaml").string(), "--dump-config"}, "",
                 {{"MASQUE_PLUGIN_PATH", (fs::path(TEST_PLUGIN_ROOT) / "good").string()}});
  REQUIRE(second.exit_code == 0);
  auto strip_comment = [](const std::string& s) { return s.substr(s.find('\n') + 1); };
  CHECK(strip_comment(second.out) == strip_comment(first.result.out));
  CHECK(has(first.result.out, "  max_batch_size: 32\n"));  // defaults are filled in
  CHECK(has(first.result.out, "  order: \"2,0,1\"\n"));
}

TEST_CASE("pipeline: run settings have their own section, and old task: keys still work",
          "[pipeline][run]") {
  auto run = dump("run_section", std::string(kBase) + "run:\n  max_batch_size: 4\n",
                  {"--set", "run.read_ahead=9"});
  REQUIRE(run.result.exit_code == 0);
  CHECK(has(run.result.out,
            "run:\n  max_batch_size: 4\n  max_batch_tokens: 16384\n"
            "  read_ahead: 9\n"));
  CHECK(run.result.err.find("note:") == std::string::npos);

  // Written under task: as before the section existed: read as run settings, with a note.
  auto old =
      dump("run_old", "task:\n  name: tokenize\n  max_batch_size: 5\ntokenizer: test-chars\n",
           {"--set", "task.invalid_utf8=replace"});
  REQUIRE(old.result.exit_code == 0);
  CHECK(has(old.result.err,
            "masque: note: task.max_batch_size is a run setting: read as "
            "run.max_batch_size\n"));
  CHECK(has(old.result.err,
            "masque: note: task.invalid_utf8 is a run setting: read as "
            "run.invalid_utf8\n"));
  CHECK(has(old.result.out, "run:\n  max_batch_size: 5\n"));
  CHECK(has(old.result.out, "  invalid_utf8: replace\n"));
  CHECK(has(old.result.out,
            "task:\n  name: tokenize\n  add_special: true\n"
            "  max_record_tokens: 0\nrun:\n"));

  // Both places: run: wins, and the note says so.
  auto both = dump("run_both",
                   "task:\n  name: tokenize\n  max_batch_size: 5\nrun:\n  max_batch_size: 6\n"
                   "tokenizer: test-chars\n");
  REQUIRE(both.result.exit_code == 0);
  CHECK(has(both.result.out, "run:\n  max_batch_size: 6\n"));
  CHECK(has(both.result.err, "run.max_batch_size was given too and is used"));

  auto bad = dump("run_bad", std::string(kBase) + "run:\n  max_batch_sise: 4\n");
  CHECK(bad.result.exit_code == 2);
  CHECK(has(bad.result.err,
            ":5:3: run.max_batch_sise: unknown parameter of the run settings "
            "(did you mean 'max_batch_size'?)"));
  auto scalar = dump("run_scalar", std::string(kBase) + "run: fast\n");
  CHECK(scalar.result.exit_code == 2);
  CHECK(has(scalar.result.err, "run: expected a mapping of run settings"));
}

TEST_CASE("pipeline: without a task, task parameters are refused and run settings read",
          "[pipeline]") {
  const std::map<std::string, std::string> env{
      {"MASQUE_PLUGIN_PATH", (fs::path(TEST_PLUGIN_ROOT) / "good").string()}};
  // `masque tokenize --tokenizer` builds its pipeline from the command line, with no task.
  auto bogus = run_masque({"tokenize", "--tokenizer", "test-chars", "--set", "task.bogus=1", "-q"},
                          "ab\n", env);
  CHECK(bogus.exit_code == 2);
  CHECK(has(bogus.err, "task.bogus: nothing here reads task parameters"));
  auto replaced = run_masque(
      {"tokenize", "--tokenizer", "test-chars", "--set", "task.invalid_utf8=replace", "-q"},
      "a\xff\n", env);
  INFO(replaced.err);
  CHECK(replaced.exit_code == 0);
  CHECK(has(replaced.out, "\"ids\""));
}

TEST_CASE("pipeline: a required path set empty or to a missing file is one error", "[pipeline]") {
  const std::string pipeline = (source_dir() / "pipelines/lm-score.yaml").string();
  auto empty = run_masque({"run", pipeline, "--set", "model.path=", "--dump-config"});
  CHECK(empty.exit_code == 2);
  CHECK(has(empty.err, "--set model.path=: model.path: expected a path, got an empty value"));
  auto missing =
      run_masque({"run", pipeline, "--set", "model.path=/no/such/model", "--dump-config"});
  CHECK(missing.exit_code == 2);
  CHECK(has(missing.err, "model.path: no such file or directory: /no/such/model"));
  CHECK(missing.err.find("missing required") == std::string::npos);
}

TEST_CASE("pipeline: a second YAML document is an error, not dropped", "[pipeline]") {
  auto c = dump("two_documents", std::string(kBase) + "---\ntask: lm-score\n");
  CHECK(c.result.exit_code == 2);
  CHECK(has(c.result.err, "2 YAML documents"));
}
