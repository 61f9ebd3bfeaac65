// Pipelines built from a model folder (`masque run --task T --model DIR`) give what the ready
// pipelines give, --dump-config prints a pipeline that runs unchanged, and folders that match
// no plugin, two plugins, or no tokenizer are clear errors. `masque inspect DIR` describes the
// shared folders.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include "masque/transformer/model.hpp"
#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string model(const char* name) {
  return (shared_dir() / "models" / name).string();
}
std::string tokenizer(const char* name) {
  return (shared_dir() / "tokenizers" / name).string();
}
std::string ready(const char* name) {
  return (source_dir() / "pipelines" / name).string();
}

// Runs both argument lists on the same input; both must succeed with the same stdout.
void check_same_output(const std::vector<std::string>& from_folder,
                       const std::vector<std::string>& from_pipeline, const std::string& input) {
  const auto a = run_masque(from_folder, input);
  const auto b = run_masque(from_pipeline, input);
  INFO(a.err);
  INFO(b.err);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  CHECK(!a.out.empty());
  CHECK(a.out == b.out);
}

}  // namespace

TEST_CASE("model folder: stories260k lm-score equals pipelines/lm-score.yaml", "[e2e][folder]") {
  const std::string text = "Once upon a time\nthere was a little girl named Lily.\n";
  check_same_output({"run", "--task", "lm-score", "--model", model("stories260k"), "-q"},
                    {"run", ready("lm-score.yaml"), "-q"}, text);
}

TEST_CASE(
    "model folder: stories260k lm-generate takes generation_config.json and the task's "
    "decoder",
    "[e2e][folder]") {
  const auto dump = run_masque(
      {"run", "--task", "lm-generate", "--model", model("stories260k"), "--dump-config"});
  INFO(dump.err);
  REQUIRE(dump.exit_code == 0);
  CHECK_THAT(dump.out, Catch::Contains("plugin: llama") &&
                           Catch::Contains("plugin: sentencepiece") &&
                           Catch::Contains("plugin: causal") && Catch::Contains("plugin: greedy"));
  check_same_output(
      {"run", "--task", "lm-generate", "--model", model("stories260k"), "--set",
       "decoder.max_new_tokens=256", "--set", "decoder.end_tokens=1,2", "-q", "--format", "text"},
      {"run", ready("lm-generate.yaml"), "-q", "--format", "text"}, "Once upon a time\n");
}

TEST_CASE("model folder: every id of generation_config.json's eos_token_id list ends generation",
          "[e2e][folder]") {
  // stories260k's own config ends on eos 2 only; a copy whose list adds the id of "." stops at
  // the first full stop the same greedy run writes.
  const fs::path dir = scratch_dir("eos-list") / "stories260k";
  fs::copy(model("stories260k"), dir, fs::copy_options::recursive);
  const auto tokenized = run_masque(
      {"tokenize", "--tokenizer", "sentencepiece", "--set", "path=" + dir.string(), "-q"}, "a.\n");
  REQUIRE(tokenized.exit_code == 0);
  const int stop = json::parse(tokenized.out)["ids"].back().get<int>();
  const std::vector<std::string> generate = {"run",
                                             "--task",
                                             "lm-generate",
                                             "--model",
                                             dir.string(),
                                             "--set",
                                             "decoder.max_new_tokens=64",
                                             "-q",
                                             "--format",
                                             "text"};
  const auto plain = run_masque(generate, "Once upon a time\n");
  REQUIRE(plain.exit_code == 0);
  const std::size_t full_stop = plain.out.find('.');
  REQUIRE(full_stop != std::string::npos);
  REQUIRE(full_stop + 2 < plain.out.size());  // the plain run goes on after it
  write_file(dir / "generation_config.json",
             json{{"bos_token_id", 1}, {"eos_token_id", {2, stop}}}.dump());
  const auto listed = run_masque(generate, "Once upon a time\n");
  INFO(plain.out);
  INFO(listed.out);
  REQUIRE(listed.exit_code == 0);
  // The same text up to the full stop, and nothing after it.
  const std::string kept = listed.out.substr(0, listed.out.find_last_not_of("\n") + 1);
  CHECK(kept.size() <= full_stop + 1);
  CHECK(plain.out.compare(0, kept.size(), kept) == 0);
  CHECK(kept.size() + 8 < plain.out.size());
  const auto inspected = run_masque({"inspect", dir.string(), "--json"});
  REQUIRE(inspected.exit_code == 0);
  CHECK(json::parse(inspected.out)["special_tokens"]["end_1"]["id"] == stop);
}

TEST_CASE("model folder: --dump-config prints a pipeline that runs unchanged", "[e2e][folder]") {
  const auto dir = scratch_dir("folder_dump");
  const auto dump =
      run_masque({"run", "--task", "lm-score", "--model", model("stories260k"), "--dump-config"});
  INFO(dump.err);
  REQUIRE(dump.exit_code == 0);
  write_file(dir / "saved.yaml", dump.out);
  const std::string text = "Once upon a time\n";
  check_same_output({"run", (dir / "saved.yaml").string(), "-q"},
                    {"run", "--task", "lm-score", "--model", model("stories260k"), "-q"}, text);
  // Loaded back, it resolves to the same pipeline (the first line names where it came from).
  const auto again = run_masque({"run", (dir / "saved.yaml").string(), "--dump-config"});
  auto body = [](const std::string& s) { return s.substr(s.find('\n')); };
  CHECK(body(again.out) == body(dump.out));
}

TEST_CASE("model folder: tiny-gpt2 with the GPT-2 tokenizer folder equals an explicit pipeline",
          "[e2e][folder]") {
  const auto dir = scratch_dir("folder_gpt2");
  write_file(dir / "gpt2.yaml",
             "task: lm-score\nmodel: {plugin: gpt2, path: " + model("tiny-gpt2") +
                 "}\ntokenizer: {plugin: bpe, path: " + tokenizer("gpt2") +
                 "}\nmask: {plugin: causal}\n");
  check_same_output({"run", "--task", "lm-score", "--model", model("tiny-gpt2"), "--tokenizer",
                     tokenizer("gpt2"), "-q"},
                    {"run", (dir / "gpt2.yaml").string(), "-q"}, "Once upon a time\nHello world\n");
}

TEST_CASE("model folder: tiny-bert fill equals pipelines/fill.yaml", "[e2e][folder]") {
  check_same_output({"run", "--task", "fill", "--model", model("tiny-bert-uncased"), "--tokenizer",
                     tokenizer("bert-base-uncased"), "--set", "task.top_k=5", "-q"},
                    {"run", ready("fill.yaml"), "-q"},
                    "the capital of france is [MASK] .\nonce upon a [MASK]\n");
}

TEST_CASE("model folder: tiny-bert-chinese plm-score equals pipelines/plm-score.yaml",
          "[e2e][folder]") {
  check_same_output(
      {"run", "--task", "plm-score", "--model", model("tiny-bert-chinese"), "--tokenizer",
       tokenizer("bert-base-chinese"), "--set", "task.method=query-stream", "--set",
       "mask.stream=query", "--set", "tokenizer.lowercase=false", "-q"},
      {"run", ready("plm-score.yaml"), "-q"}, "北京欢迎你\n你想吃啥\n");
}

TEST_CASE(
    "model folder: the encoder-decoder folder equals pipelines/seq2seq-score.yaml and "
    "pipelines/translate.yaml",
    "[e2e][folder]") {
  const std::string folder = model("aren-transliteration");
  check_same_output({"run", "--task", "seq2seq-score", "--model", folder, "--input-format", "tsv",
                     "--columns", "text,target", "-q"},
                    {"run", ready("seq2seq-score.yaml"), "--input-format", "tsv", "--columns",
                     "text,target", "-q"},
                    "س م ي ر\ts a m i r\nن ا د ي ة\tn a d i a\n");
  check_same_output({"run", "--task", "seq2seq", "--model", folder, "--set", "decoder.plugin=beam",
                     "--set", "decoder.beam_size=2", "--set", "decoder.length_penalty=1.0", "--set",
                     "decoder.max_new_tokens=256", "--set", "decoder.min_new_tokens=1", "-q"},
                    {"run", ready("translate.yaml"), "-q"}, "س م ي ر\nن ا د ي ة\n");
}

TEST_CASE("model folder: a folder no plugin serves is a clear error listing the plugins",
          "[e2e][folder]") {
  const auto dir = scratch_dir("folder_unknown");
  write_file(dir / "config.json",
             R"({"model_type": "mamba", "architectures": ["MambaForCausalLM"]})");
  const auto r = run_masque({"run", "--task", "lm-score", "--model", dir.string()}, "x\n");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("model_type 'mamba'") && Catch::Contains("MambaForCausalLM") &&
                        Catch::Contains("no model plugin serves this folder") &&
                        Catch::Contains("llama (model_type=llama)") &&
                        Catch::Contains("gpt2 (model_type=gpt2)"));
  const auto empty = scratch_dir("folder_empty");
  write_file(empty / "weights.bin", "x");
  const auto e = run_masque({"run", "--task", "lm-score", "--model", empty.string()}, "x\n");
  CHECK(e.exit_code == 2);
  CHECK_THAT(e.err, Catch::Contains("no config.json (found: weights.bin)"));
}

TEST_CASE("model folder: two plugins serving one folder is a clear error naming both",
          "[e2e][folder]") {
  const auto extra = scratch_dir("folder_two_plugins");
  fs::copy_file(plugin_dir() / "libmasque-model-gpt2.so", extra / "libmasque-model-gpt2.so");
  const auto r = run_masque({"run", "--task", "lm-score", "--model", model("tiny-gpt2"),
                             "--tokenizer", tokenizer("gpt2"), "-q"},
                            "x\n", {{"MASQUE_PLUGIN_PATH", extra.string()}});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("several model plugins serve this folder") &&
                        Catch::Contains((extra / "libmasque-model-gpt2.so").string()));
}

TEST_CASE("model folder: no tokenizer files is a clear error naming what was found",
          "[e2e][folder]") {
  const auto r = run_masque({"run", "--task", "lm-score", "--model", model("tiny-gpt2")}, "x\n");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("no tokenizer files (found: README.md, config.json, "
                                    "model.safetensors, reference.json)") &&
                        Catch::Contains("--tokenizer DIR"));
  const auto both = run_masque({"run", ready("lm-score.yaml"), "--model", model("tiny-gpt2")});
  CHECK(both.exit_code == 2);
  const auto no_task = run_masque({"run", "--model", model("tiny-gpt2")});
  CHECK(no_task.exit_code == 2);
  CHECK_THAT(no_task.err, Catch::Contains("missing --task"));
}

TEST_CASE("model folder: a pipeline tokenizer that differs from the folder's own is named",
          "[e2e][folder]") {
  // tiny-bert-uncased with a vocab.txt of its own: the same as fill.yaml's, then one token
  // renamed (a checkpoint trained with another vocabulary).
  const auto dir = scratch_dir("folder_tokenizer") / "bert";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(fs::path(model("tiny-bert-uncased")) / f, dir / f,
                  fs::copy_options::overwrite_existing);
  std::string vocab = read_file(fs::path(tokenizer("bert-base-uncased")) / "vocab.txt");
  write_file(dir / "vocab.txt", vocab);
  const std::string input = "the capital of france is [MASK] .\n";
  const std::vector<std::string> args{"run", ready("fill.yaml"), "--set",
                                      "model.path=" + dir.string()};
  const auto same = run_masque(args, input);
  REQUIRE(same.exit_code == 0);
  CHECK(same.err.find("warning") == std::string::npos);
  vocab.replace(vocab.find("[unused5]\n"), 9, "zzzqqq");
  write_file(dir / "vocab.txt", vocab);
  const auto other = run_masque(args, input);
  CHECK(other.exit_code == 0);
  CHECK_THAT(
      other.err,
      Catch::Contains("warning: tokenizer 'wordpiece' (vocab ") &&
          Catch::Contains("differs from the tokenizer the model folder carries "
                          "(wordpiece, " +
                          dir.string() + "): id 6 is '[unused5]' here and 'zzzqqq' there") &&
          Catch::Contains("--set tokenizer.path=" + dir.string() + " --set tokenizer.vocab="));
  // The advice followed: the folder's own vocabulary, no warning.
  auto own = args;
  for (const std::string& set : {"tokenizer.path=" + dir.string(), std::string("tokenizer.vocab=")})
    own.insert(own.end(), {"--set", set});
  const auto fixed = run_masque(own, input);
  CHECK(fixed.exit_code == 0);
  CHECK(fixed.err.find("warning") == std::string::npos);
}

TEST_CASE("inspect: stories260k", "[e2e][inspect]") {
  const auto r = run_masque({"inspect", model("stories260k"), "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  const auto weights = masque::transformer::open_checkpoint(shared_dir() / "models/stories260k");
  std::uint64_t parameters = 0, bytes = 0;
  for (const auto& name : weights.names()) {
    std::uint64_t n = 1;
    for (auto d : weights.entry(name).shape) n *= static_cast<std::uint64_t>(d);
    parameters += n;
    bytes += weights.entry(name).size;
  }
  CHECK(j["plugin"] == "llama");
  CHECK(j["model_type"] == "llama");
  CHECK(j["architectures"] == json::array({"LlamaForCausalLM"}));
  CHECK(j["kind"] == "decoder-only");
  CHECK(j["weights"]["parameters"] == parameters);
  CHECK(j["weights"]["bytes"] == bytes);
  CHECK(j["weights"]["dtypes"].contains("F32"));
  CHECK(j["vocab_size"] == 512);
  CHECK(j["max_positions"] == 512);
  CHECK(j["special_tokens"]["bos"]["id"] == 1);
  CHECK(j["special_tokens"]["bos"]["piece"] == "<s>");
  CHECK(j["special_tokens"]["eos"]["id"] == 2);
  CHECK(j["tokenizer"]["plugin"] == "sentencepiece");
  CHECK(j["tokenizer"]["vocab_size"] == 512);
  const auto tasks = j["tasks"].get<std::vector<std::string>>();
  CHECK(std::count(tasks.begin(), tasks.end(), "lm-score") == 1);
  CHECK(std::count(tasks.begin(), tasks.end(), "lm-generate") == 1);
  CHECK(std::count(tasks.begin(), tasks.end(), "plm-score") == 0);
  // Listed means `run --task T --model DIR` configures; the rest say why not.
  for (const char* task : {"classify", "fill"}) {
    CHECK(std::count(tasks.begin(), tasks.end(), task) == 0);
    CHECK(j["unavailable_tasks"].contains(task));
  }
  CHECK_THAT(j["unavailable_tasks"]["fill"].get<std::string>(), Catch::Contains("[MASK]"));
  for (const auto& task : tasks) {
    const auto run =
        run_masque({"run", "--task", task, "--model", model("stories260k"), "-q"}, "Once upon\n");
    INFO(task << ": " << run.err);
    CHECK(run.exit_code != 2);
  }
  const auto text = run_masque({"inspect", model("stories260k")});
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("plugin          llama (decoder-only)") &&
                           Catch::Contains(std::to_string(parameters)) &&
                           Catch::Contains("max positions   512"));
}

TEST_CASE("inspect: the BERT and encoder-decoder folders", "[e2e][inspect]") {
  const auto bert = run_masque({"inspect", model("tiny-bert-uncased"), "--tokenizer",
                                tokenizer("bert-base-uncased"), "--json"});
  INFO(bert.err);
  REQUIRE(bert.exit_code == 0);
  const json b = json::parse(bert.out);
  CHECK(b["plugin"] == "bert");
  CHECK(b["kind"] == "encoder-only");
  CHECK(b["vocab_size"] == 30522);
  CHECK(b["max_positions"] == 128);
  CHECK(b["tokenizer"]["plugin"] == "wordpiece");
  CHECK(b["special_tokens"]["mask"]["piece"] == "[MASK]");
  const auto bt = b["tasks"].get<std::vector<std::string>>();
  CHECK(std::count(bt.begin(), bt.end(), "plm-score") == 1);
  CHECK(std::count(bt.begin(), bt.end(), "fill") == 1);
  const auto encdec = run_masque({"inspect", model("aren-transliteration"), "--json"});
  INFO(encdec.err);
  REQUIRE(encdec.exit_code == 0);
  const json e = json::parse(encdec.out);
  CHECK(e["plugin"] == "encoder-decoder");
  CHECK(e["kind"] == "encoder-decoder");
  CHECK(e["source_vocab_size"] == 51);
  CHECK(e["vocab_size"] == 43);
  CHECK(e["tokenizer"]["plugin"] == "vocab");
  const auto et = e["tasks"].get<std::vector<std::string>>();
  CHECK(std::count(et.begin(), et.end(), "seq2seq") == 1);
  CHECK(std::count(et.begin(), et.end(), "plm-score") == 0);
  CHECK(std::count(et.begin(), et.end(), "lm-score") == 0);
  // lm-score refuses an encoder-decoder before any record, as lm-generate does.
  const auto score =
      run_masque({"run", "--task", "lm-score", "--model", model("aren-transliteration")}, "a b\n");
  CHECK(score.exit_code == 2);
  CHECK_THAT(score.err, Catch::Contains("encoder-decoder"));
}

TEST_CASE("inspect: tasks that cannot run for one reason share a line", "[e2e][inspect]") {
  // stories260k's weights without its tokenizer: no task can run, all for that reason.
  const auto dir = scratch_dir("inspect_no_tokenizer");
  for (const char* file : {"config.json", "model.safetensors"})
    std::filesystem::create_symlink(std::filesystem::path(model("stories260k")) / file, dir / file);
  const auto r = run_masque({"inspect", dir.string()});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto count = [&](const std::string& text) {
    std::size_t n = 0;
    for (auto at = r.out.find(text); at != std::string::npos; at = r.out.find(text, at + 1)) ++n;
    return n;
  };
  CHECK(
      count("not runnable    classify, diffusion-generate, embed, fill, forward, lm-generate, ") ==
      1);
  CHECK(count("(found: config.json, model.safetensors)") == 1);
  CHECK_THAT(r.out, Catch::Contains("tasks           (none)"));
}

TEST_CASE("inspect: a bad folder is a clear error", "[e2e][inspect]") {
  const auto missing = run_masque({"inspect", (scratch_dir("inspect_bad") / "nope").string()});
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("no such directory"));
  const auto dir = scratch_dir("inspect_bad_json");
  write_file(dir / "config.json", "{\"model_type\": ");
  const auto bad = run_masque({"inspect", dir.string()});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("config.json: not valid JSON"));
}
