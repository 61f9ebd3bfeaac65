// Bad inputs from docs/errors.md that no other test folder covers: hostile corpus records and
// streams, pipeline files, deeply nested JSON in model files, and plugins that throw.
#include <catch2/catch.hpp>

#include <cstdio>

#include "hardening_support.hpp"
#include "masque/config_json.hpp"
#include "masque/error.hpp"
#include "masque/safetensors.hpp"
#include "test_support.hpp"
#include "tokenizer_loader.hpp"

using namespace masque;
using namespace masque::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::string nested(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

std::map<std::string, std::string> throwing_plugin_env() {
  return {{"MASQUE_PLUGIN_PATH", HARDENING_PLUGIN_DIR}};
}

std::string error_of(const nlohmann::json& record) {
  return record.contains("error") ? record["error"].get<std::string>() : "";
}

}  // namespace

TEST_CASE("records: JSON nested deeper than 256 levels fails its record, not the run",
          "[hardening][records]") {
  // Parsing alone would succeed; copying the record's fields would recurse 100000 levels.
  const std::string input = R"({"text": "a", "x": )" + nested(100000) + "}\n" +
                            R"({"text": "b", "x": )" + nested(200) + "}\n";
  auto r = run_masque(
      {"run", ready_pipeline("lm-score.yaml"), "-q", "--input-format", "jsonl", "--keep-fields"},
      input);
  CHECK(r.exit_code == 1);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 2);
  CHECK(error_of(out[0]) == "invalid JSON: JSON nested more than 256 levels deep");
  CHECK(error_of(out[1]).empty());
  CHECK(out[1]["x"].dump() == nested(200));  // kept fields are copied and printed whole
}

TEST_CASE("records: a TSV header over the record limit ends the run with exit 2, not an abort",
          "[hardening][records]") {
  auto r = run_masque({"run", ready_pipeline("lm-score.yaml"), "-q", "--input-format", "tsv",
                       "--set", "task.max_record_bytes=8"},
                      "text\tanother_column\nhello\tx\n");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("masque: error: the TSV header line is 20 bytes, longer than the "
                             "limit of 8 (task.max_record_bytes)"));
  CHECK(r.out.empty());
}

TEST_CASE("records: ids outside the model's vocabulary fail their record", "[hardening][records]") {
  auto r = run_masque({"run", ready_pipeline("lm-score.yaml"), "-q", "--input-format", "ids"},
                      "1 600 3\n1 2 3\n");
  CHECK(r.exit_code == 1);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 2);
  CHECK(error_of(out[0]) == "token id 600 is out of the model's vocabulary (512 ids)");
  CHECK(error_of(out[1]).empty());
}

TEST_CASE("input and output streams that fail are reported with exit codes 2 and 3",
          "[hardening][streams]") {
  auto dir = run_masque({"run", ready_pipeline("lm-score.yaml"), "-i", "/tmp"});
  CHECK(dir.exit_code == 2);
  CHECK_THAT(dir.err, Contains("/tmp: is a directory, not an input file"));

  // /proc/self/mem opens but every read at offset 0 fails with EIO.
  auto eio = run_masque({"run", ready_pipeline("lm-score.yaml"), "-q", "-i", "/proc/self/mem"});
  CHECK(eio.exit_code == 3);
  CHECK_THAT(eio.err, Contains("cannot read the input: Input/output error"));

  auto full = run_masque({"run", ready_pipeline("lm-score.yaml"), "-q", "-o", "/dev/full"},
                         "Once upon a time.\n");
  CHECK(full.exit_code == 3);
  CHECK_THAT(full.err, Contains("cannot write the output (No space left on device)"));

  auto missing = run_masque({"run", ready_pipeline("lm-score.yaml"), "-i", "/no/such/corpus"});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains("/no/such/corpus: cannot open the input file"));
}

TEST_CASE("an output or summary naming the input file is refused before the input is touched",
          "[hardening][streams]") {
  const auto dir = scratch_dir("same_file");
  const auto input = dir / "corpus.txt";
  write_file(input, "Once upon a time.\nThe end.\n");
  std::filesystem::remove(dir / "link.txt");
  std::filesystem::create_symlink(input, dir / "link.txt");
  for (const auto& out : {input, dir / "link.txt"}) {
    auto r = run_masque(
        {"run", ready_pipeline("lm-score.yaml"), "-q", "-i", input.string(), "-o", out.string()});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("is the input file"));
    CHECK(read_file(input) == "Once upon a time.\nThe end.\n");
  }
  auto summary = run_masque({"run", ready_pipeline("lm-score.yaml"), "-q", "-i", input.string(),
                             "--summary", input.string()});
  CHECK(summary.exit_code == 2);
  CHECK(read_file(input) == "Once upon a time.\nThe end.\n");
  auto unwritable =
      run_masque({"run", ready_pipeline("lm-score.yaml"), "-q", "--summary", "/no/such/dir/s.json"},
                 "Once upon a time.\n");
  CHECK(unwritable.exit_code == 2);
  CHECK(unwritable.out.empty());
  CHECK_THAT(unwritable.err,
             Contains("--summary /no/such/dir/s.json: cannot write in /no/such/dir"));
}

TEST_CASE("fail-fast: the run stops at the first failed record with exit 1",
          "[hardening][records]") {
  auto r = run_masque({"run", ready_pipeline("lm-score.yaml"), "--fail-fast", "-q"},
                      "Once upon a time.\n\xff\nThe end.\n");
  CHECK(r.exit_code == 1);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 2);
  CHECK(error_of(out[0]).empty());
  CHECK_THAT(error_of(out[1]), Contains("invalid UTF-8 at byte 0"));
  CHECK_THAT(r.err, Contains("stopped at the first failed record (--fail-fast)"));
}

TEST_CASE("plugins: a plugin that throws anything but RecordError fails only its records",
          "[hardening][plugins]") {
  const fs::path dir = scratch_dir("throwing");
  const std::string input = "ab\nlogic\nint\nconfig\nrecord\ncd\n";
  const std::vector<std::string> expected = {
      "",
      "internal error: the plugin's own bug",
      "internal error: an exception that is not a std::exception",
      "a setting the plugin only checks late",
      "this record cannot be tokenized",
      ""};
  // The tokenize task calls the tokenizer while processing a batch (all six records are one
  // batch); lm-score while preparing each record.
  write_file(dir / "tokenize.yaml", "task: tokenize\ntokenizer: test-throwing\n");
  write_file(
      dir / "score.yaml",
      "task: lm-score\ntokenizer: test-throwing\nmask: causal\nmodel: {plugin: llama, path: " +
          (shared_dir() / "models/stories260k").string() + "}\n");
  for (const char* pipeline : {"tokenize.yaml", "score.yaml"}) {
    INFO(pipeline);
    auto r = run_masque({"run", (dir / pipeline).string(), "-q"}, input, throwing_plugin_env());
    CHECK(r.exit_code == 1);
    const auto out = parse_jsonl(r.out);
    REQUIRE(out.size() == expected.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      CHECK(out[i]["id"] == i);
      CHECK(error_of(out[i]) == expected[i]);
    }
  }
}

TEST_CASE("plugins: a factory that returns nothing, the wrong kind or throws is reported",
          "[hardening][plugins]") {
  const fs::path dir = scratch_dir("factory");
  write_file(dir / "p.yaml", "task: tokenize\ntokenizer: test-throwing\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"nothing", "libmasque-tokenizer-test-throwing.so: the plugin factory returned nothing"},
      {"wrong-kind",
       "libmasque-tokenizer-test-throwing.so: the plugin says it is a tokenizer "
       "but created something else"}};
  for (const auto& [factory, message] : cases) {
    auto r = run_masque({"run", (dir / "p.yaml").string(), "--set", "tokenizer.factory=" + factory},
                        "a\n", throwing_plugin_env());
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(message));
  }
  auto thrown = run_masque({"run", (dir / "p.yaml").string(), "--set", "tokenizer.factory=int"},
                           "a\n", throwing_plugin_env());
  CHECK(thrown.exit_code == 3);
  CHECK_THAT(thrown.err, Contains("masque: error: an exception that is not a std::exception"));
}

TEST_CASE("pipeline: deep nesting, a key given twice, an empty file and empty choices are errors",
          "[hardening][pipeline]") {
  const fs::path dir = scratch_dir("pipeline_inputs");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"task: tokenize\ntokenizer: {plugin: vocab, vocab: " + nested(100000) + "}\n",
       "invalid YAML"},
      {"task: tokenize\ntokenizer:\n  plugin: vocab\n  add_bos: true\n  add_bos: false\n",
       "p.yaml:5:3: tokenizer.add_bos: given twice"},
      {"", "p.yaml: the pipeline is empty"},
      {"# only a comment\n", "p.yaml: the pipeline is empty"},
      {"- task\n- tokenizer\n", "p.yaml:1:1: a pipeline is a mapping of sections"},
      // An empty value of a parameter with choices is not a way around them.
      {"task: {name: tokenize, invalid_utf8: ~}\ntokenizer: {plugin: vocab, vocab: p.yaml}\n",
       "task.invalid_utf8: expected one of error, replace, got ''"}};
  for (const auto& [yaml, message] : cases) {
    INFO(yaml.substr(0, 80));
    write_file(dir / "p.yaml", yaml);
    auto r = run_masque({"run", (dir / "p.yaml").string()}, "a\n");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(message));
  }
}

TEST_CASE(
    "pipeline: YAML that cannot be parsed through, control characters, aliases past the node "
    "limit and oversized files are errors naming the place",
    "[hardening][pipeline]") {
  const fs::path dir = scratch_dir("pipeline_bounds");
  // Each level names the one before ten times: 10^6 nodes once the aliases are expanded.
  std::string laughs = "task: tokenize\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level <= 6; ++level) {
    const std::string prev = "*l" + std::to_string(level - 1);
    laughs += "l" + std::to_string(level) + ": &l" + std::to_string(level) + " [";
    for (int i = 0; i < 10; ++i) laughs += (i ? ", " : "") + prev;
    laughs += "]\n";
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      // yaml-cpp 0.7's LoadAll looped forever on these, growing without bound.
      {",a\n", "p.yaml:1:1: invalid YAML: the parser cannot go on at ','"},
      {"task: tokenize\n---\n,a\n", "p.yaml:3:1: invalid YAML: the parser cannot go on at ','"},
      {"task: tokenize\ntoken\x01izer: {plugin: vocab}\n",
       "p.yaml:2:6: invalid YAML: control character U+0001"},
      {"task: tokenize\n# \xff\n", "p.yaml:2:3: invalid YAML: not UTF-8"},
      {laughs, "invalid YAML: more than 100000 nodes (aliases counted as what they name)"},
      {"# " + std::string(2 << 20, 'x') + "\n",
       "p.yaml: invalid YAML: 2097155 bytes, more than the 1048576 a pipeline file may hold"}};
  for (const auto& [yaml, message] : cases) {
    INFO(yaml.substr(0, 80));
    write_file(dir / "p.yaml", yaml);
    auto r = run_masque({"run", (dir / "p.yaml").string()}, "a\n");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(message));
  }
  // Aliases within the limit still work.
  write_file(dir / "vocab.txt", "<unk>\na\nb\n");
  write_file(dir / "p.yaml",
             "task: tokenize\nrun: {max_batch_size: &n 4, read_ahead: *n}\n"
             "tokenizer: {plugin: vocab, vocab: vocab.txt}\n");
  CHECK(run_masque({"run", (dir / "p.yaml").string(), "-q"}, "a\n").exit_code == 0);
}

TEST_CASE("config.json and safetensors headers nested too deeply are configuration errors",
          "[hardening][models]") {
  CHECK_THROWS_WITH(JsonConfig::parse(R"({"rope_scaling": )" + nested(100000) + "}", "c.json"),
                    "c.json: invalid JSON: JSON nested more than 256 levels deep");
  CHECK(JsonConfig::parse(R"({"x": )" + nested(100) + "}", "c.json").has("x"));

  const fs::path dir = scratch_dir("deep_safetensors");
  const std::string header = R"({"__metadata__": )" + nested(100000) + "}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>(header.size() >> (8 * i));
  write_file(dir / "model.safetensors", file + header);
  CHECK_THROWS_WITH(SafeTensors::open(dir / "model.safetensors"),
                    Contains("invalid JSON header: JSON nested more than 256 levels deep"));
  write_file(dir / "model.safetensors.index.json", R"({"weight_map": )" + nested(100000) + "}");
  CHECK_THROWS_WITH(SafeTensors::open(dir), Contains("invalid JSON: JSON nested more than 256"));
}

TEST_CASE("tokenizer files: a broken tokenizer.model or tokenizer_config.json names the file",
          "[hardening][tokenizers]") {
  const fs::path dir = scratch_dir("broken_tokenizer_files");
  const std::string model = read_file(shared_dir() / "models/stories260k/tokenizer.model");
  const std::vector<std::pair<std::string, std::string>> models = {
      {"text", "not a model\n"}, {"empty", ""}, {"truncated", model.substr(0, model.size() / 3)}};
  for (const auto& [name, bytes] : models) {
    INFO(name);
    write_file(dir / name / "tokenizer.model", bytes);
    CHECK_THROWS_WITH(
        make_tokenizer("sentencepiece", {{"path", (dir / name).string()}}, plugin_dir()),
        Contains((dir / name / "tokenizer.model").string() + ": not a SentencePiece model"));
  }
  write_file(dir / "bert" / "vocab.txt", "[UNK]\na\n");
  write_file(dir / "bert" / "tokenizer_config.json", "{\"do_lower_case\": tru");
  CHECK_THROWS_WITH(make_tokenizer("wordpiece", {{"path", (dir / "bert").string()}}, plugin_dir()),
                    Contains((dir / "bert" / "tokenizer_config.json").string() + ": invalid JSON"));
}

TEST_CASE("records: a record that breaks its batch fails alone", "[hardening][records]") {
  // The permutation mask checks a record's order only when the batch is built.
  const fs::path dir = scratch_dir("batch_isolation");
  write_file(dir / "forward.yaml",
             "task: forward\nmodel: {plugin: bert, path: " +
                 (shared_dir() / "models/tiny-bert-chinese").string() +
                 "}\ntokenizer: {plugin: wordpiece, vocab: " +
                 (shared_dir() / "tokenizers/bert-base-chinese/vocab.txt").string() +
                 "}\nmask: permutation\n");
  auto r = run_masque({"run", (dir / "forward.yaml").string(), "-q", "--input-format", "jsonl"},
                      "{\"text\": \"北京\"}\n{\"text\": \"欢迎\", \"order\": [9, 9]}\n"
                      "{\"text\": \"你\"}\n");
  CHECK(r.exit_code == 1);
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == 3);
  CHECK(error_of(out[0]).empty());
  CHECK_THAT(error_of(out[1]), Contains("order"));
  CHECK(error_of(out[2]).empty());
}

TEST_CASE("config.json integers beyond 64 bits are errors, not wrapped or undefined",
          "[hardening][models]") {
  // Found by the config_json fuzz target: 3e59 was converted to int64 unchecked.
  const JsonConfig c = JsonConfig::parse(
      R"({"a": 3.05e59, "b": 18446744073709551615, "c": -9.3e18, "d": 12.0, "e": [1, 1e300]})",
      "c.json");
  CHECK_THROWS_WITH(c.get_int("a"), "c.json: key 'a': expected an integer, got 3.05e+59");
  CHECK_THROWS_WITH(c.get_int("b"),
                    "c.json: key 'b': the integer 18446744073709551615 is too large");
  CHECK_THROWS_WITH(c.get_int("c", 1), Contains("expected an integer"));
  CHECK(c.get_int("d") == 12);
  CHECK_THROWS_WITH(c.get_int_list("e"), Contains("expected an integer, got 1e+300"));
}

TEST_CASE("records: per-record fields out of range fail their record", "[hardening][records]") {
  // A target prefix with an id beyond the target vocabulary (aren-transliteration: 43 ids).
  auto translate = run_masque(
      {"run", ready_pipeline("translate.yaml"), "-q", "--input-format", "jsonl"},
      "{\"text\": \"س م ي ر\", \"prefix\": [1000]}\n{\"text\": \"س م ي ر\", \"prefix\": [-1]}\n"
      "{\"text\": \"س م ي ر\"}\n");
  CHECK(translate.exit_code == 1);
  auto out = parse_jsonl(translate.out);
  REQUIRE(out.size() == 3);
  CHECK(error_of(out[0]) == "'prefix' must be text or an array of ids in 0..42");
  CHECK(error_of(out[1]) == "'prefix' must be text or an array of ids in 0..42");
  CHECK(error_of(out[2]).empty());

  // An order entry beyond 32 bits is refused rather than wrapped to a valid position.
  auto plm = run_masque({"run", ready_pipeline("plm-score.yaml"), "-q", "--input-format", "jsonl"},
                        "{\"text\": \"北京\", \"order\": [4294967296, 1]}\n"
                        "{\"text\": \"北京\", \"order\": [1, 0]}\n");
  CHECK(plm.exit_code == 1);
  out = parse_jsonl(plm.out);
  REQUIRE(out.size() == 2);
  CHECK(error_of(out[0]) == "'order' must be an array of 32-bit integers");
  CHECK(error_of(out[1]).empty());
}

TEST_CASE("command line values out of range are usage errors", "[hardening][cli]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--threads", "0"}, "--threads: expected 1..256"},
      {{"--threads", "300"}, "--threads: expected 1..256"},
      {{"--intra-threads", "0"}, "--intra-threads: expected 1..256"},
      {{"--input-format", "xml"}, "--input-format: expected text, tsv, jsonl or ids, got 'xml'"},
      {{"--format", "yaml"}, "--format: expected jsonl, text, tsv or nbest, got 'yaml'"},
      {{"--threads", "many"}, "the argument ('many') for option '--threads' is invalid"}};
  for (const auto& [extra, message] : cases) {
    INFO(extra[0] << " " << extra[1]);
    std::vector<std::string> args = {"run", ready_pipeline("lm-score.yaml")};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_masque(args, "a\n");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(message));
    CHECK(r.out.empty());
  }
}

TEST_CASE("records: TSV columns without the --field column, or naming one twice, stop the run",
          "[hardening][records]") {
  const std::vector<std::string> run = {
      "run", ready_pipeline("lm-score.yaml"), "-q", "--threads", "1", "--input-format", "tsv"};
  auto with = [&](std::vector<std::string> extra, const std::string& input) {
    std::vector<std::string> args = run;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_masque(args, input);
  };
  // It used to score the first column.
  auto missing = with({"--field", "c"}, "a\tb\nOnce upon\tx\n");
  CHECK(missing.exit_code == 2);
  CHECK(missing.out.empty());
  CHECK_THAT(missing.err, Contains("the TSV columns (a, b) have no 'c' column (choose the text "
                                   "column with --field)"));
  auto given = with({"--columns", "a,b"}, "Once upon\tx\n");
  CHECK(given.exit_code == 2);
  CHECK_THAT(given.err, Contains("the TSV columns (a, b) have no 'text' column"));
  // It used to score the last of the two.
  auto twice = with({}, "text\ttext\nOnce upon\ta time\n");
  CHECK(twice.exit_code == 2);
  CHECK(twice.out.empty());
  CHECK_THAT(twice.err, Contains("the TSV columns (text, text) name 'text' twice"));
  // A file run (resumable, sharded) finds it before it makes its output or parts folder.
  const auto dir = scratch_dir("tsv_columns");
  write_file(dir / "in.tsv", "text\ttext\nOnce upon\ta time\n");
  fs::remove_all(dir / "out.jsonl");
  auto file = with({"-i", (dir / "in.tsv").string(), "-o", (dir / "out.jsonl").string()}, "");
  CHECK(file.exit_code == 2);
  CHECK(!fs::exists(dir / "out.jsonl"));
  CHECK(!fs::exists(dir / "out.jsonl.parts"));
  auto shard = with({"-i", (dir / "in.tsv").string(), "--shard", "0/2"}, "");
  CHECK(shard.exit_code == 2);
  CHECK_THAT(shard.err, Contains("name 'text' twice"));
  auto chosen = with({"--field", "b"}, "a\tb\nx\tOnce upon a time\n");
  CHECK(chosen.exit_code == 0);
  CHECK(parse_jsonl(chosen.out).at(0)["tokens"] == 5);  // BOS and the four words of b
}

TEST_CASE("records: --format text with -q still names a failed record on stderr",
          "[hardening][records]") {
  auto r = run_masque({"run", ready_pipeline("lm-generate.yaml"), "-q", "--threads", "1", "-f",
                       "text", "--set", "decoder.max_new_tokens=5"},
                      "Once\n\xff\n");
  CHECK(r.exit_code == 1);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 2);  // the failed record's empty line
  CHECK_THAT(r.err, Contains("masque: record 1: invalid UTF-8 at byte 0"));
  CHECK_THAT(r.err, !Contains("records,"));  // -q still drops the summary
}

TEST_CASE("an unwritable --summary is exit 2 up front, or exit 3 when its write fails",
          "[hardening][streams]") {
  const auto dir = scratch_dir("summary_unwritable");
  auto folder = run_masque(
      {"run", ready_pipeline("lm-score.yaml"), "-q", "--summary", dir.string()}, "Once upon\n");
  CHECK(folder.exit_code == 2);
  CHECK(folder.out.empty());
  CHECK_THAT(folder.err, Contains("is a directory"));
  // Found only at the end: the records are written, the exit code says the summary is not.
  auto full = run_masque({"run", ready_pipeline("lm-score.yaml"), "-q", "--summary", "/dev/full"},
                         "Once upon\n");
  CHECK(full.exit_code == 3);
  CHECK(parse_jsonl(full.out).size() == 1);
  CHECK_THAT(full.err, Contains("cannot write the summary to /dev/full: No space left on device"));
}
