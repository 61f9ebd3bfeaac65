// `masque train` from the shell: what a user relies on — a trained folder `masque run` loads and
// scores as the trainer reported, an interrupted run that resumes to the same losses, SIGINT
// leaving a whole checkpoint, bad records skipped and reported by line, clear errors.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

#include "masque/safetensors.hpp"
#include "test_support.hpp"

using namespace masque;
using namespace masque::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// Chinese characters of bert-base-chinese's vocabulary: one token each.
const char* const kChars[] = {"北", "京", "欢", "迎", "你", "我", "们", "的", "天", "安",
                              "门", "上", "太", "阳", "升", "大", "家", "好", "学", "生"};

std::string chars(int n, int seed) {
  std::string s;
  for (int i = 0; i < n; ++i) s += std::string(i ? " " : "") + kChars[(seed * 7 + i * 3) % 20];
  return s;
}

// `n` TSV records `source<TAB>target` (the target copies the source backwards: learnable).
void write_pairs(const fs::path& file, int n, int first_seed = 0) {
  std::ofstream out(file, std::ios::binary);
  out << "source\ttarget\n";
  for (int i = 0; i < n; ++i) {
    const int len = 2 + (i * 5 + first_seed) % 5;
    const std::string src = chars(len, i + first_seed);
    std::string tgt;
    for (int k = len - 1; k >= 0; --k)
      tgt += std::string(k == len - 1 ? "" : " ") + kChars[((i + first_seed) * 7 + k * 3) % 20];
    out << src << '\t' << tgt << '\n';
  }
}

// A UniLM pipeline on tiny-bert-chinese writing into `out`.
fs::path unilm_pipeline(const fs::path& dir, const fs::path& out, const std::string& extra = "") {
  const fs::path shared = shared_dir();
  const std::string yaml =
      "task:\n  name: train\n  objective: seq2seq\n  train_file: " + (dir / "train.tsv").string() +
      "\n  output: " + out.string() + "\n  batch_size: 4\n  lr: 1e-3\n  shuffle: false\n" + extra +
      "model:\n  plugin: bert\n  path: " + (shared / "models/tiny-bert-chinese").string() +
      "\ntokenizer:\n  plugin: wordpiece\n  vocab: " +
      (shared / "tokenizers/bert-base-chinese/vocab.txt").string() +
      "\n  lowercase: \"false\"\nmask:\n  plugin: seq2seq\n";
  write_file(dir / "train.yaml", yaml);
  return dir / "train.yaml";
}

std::vector<double> losses(const fs::path& metrics) {
  std::vector<double> out;
  for (const auto& j : read_jsonl(metrics))
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  return out;
}

// Runs masque with stderr into a file, in the background.
pid_t start_masque(const std::vector<std::string>& args, const fs::path& err) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(err.c_str(), "w", stderr)) _exit(126);
    std::vector<char*> argv;
    std::string bin = binary().string();
    argv.push_back(bin.data());
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::size_t metric_lines(const fs::path& file) {
  if (!fs::exists(file)) return 0;
  const std::string text = read_file(file);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST_CASE("train: a Llama fine-tuned by masque train loads in masque run and scores as reported",
          "[train][cli]") {
  const fs::path dir = scratch_dir("train_cli_lm");
  {
    std::ofstream train(dir / "train.txt"), valid(dir / "valid.txt");
    for (int i = 0; i < 24; ++i) train << "Once upon a time there was a cat number " << i << "\n";
    for (int i = 0; i < 5; ++i) valid << "A dog and a cat met on day " << i * 3 << " of May\n";
  }
  const fs::path out = dir / "run";
  const RunResult r =
      run_masque({"train", (source_dir() / "pipelines/train-causal-lm.yaml").string(), "--set",
                  "task.train_file=" + (dir / "train.txt").string(), "--set",
                  "task.valid_file=" + (dir / "valid.txt").string(), "--set",
                  "task.output=" + out.string(), "--set", "task.steps=6", "--set",
                  "task.batch_size=4", "--set", "task.lr=1e-3", "--set", "task.warmup_ratio=0"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("24 usable records of 24"));
  // The run folder: the checkpoint is a model folder with the tokenizer's files.
  const fs::path last = fs::read_symlink(out / "last");
  CHECK(last == "checkpoint-000006");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.model", "optimizer.bin",
                        "trainer_state.json"})
    CHECK(fs::is_regular_file(out / "last" / f));
  CHECK(fs::is_regular_file(out / "pipeline.yaml"));
  const auto metrics = read_jsonl(out / "metrics.jsonl");
  REQUIRE(metrics.size() == 7);  // 6 steps and the validation at the end
  for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens", "seconds"})
    CHECK(metrics[0].contains(key));
  CHECK(metrics[0]["lr"] == 1e-3);  // linear schedule, no warmup: full lr at step 0
  CHECK(losses(out / "metrics.jsonl").back() < losses(out / "metrics.jsonl").front());
  REQUIRE(metrics.back().contains("valid_loss"));
  const double reported = metrics.back()["valid_loss"].get<double>();
  CHECK(metrics.back()["valid_ppl"].get<double>() == Approx(std::exp(reported)));

  // masque run, pointed at the checkpoint, gives the same mean NLL over the validation file.
  const RunResult scored =
      run_masque({"run", (source_dir() / "pipelines/train-causal-lm.yaml").string()}, "");
  CHECK(scored.exit_code == 2);  // a training pipeline is not a run pipeline ...
  write_file(dir / "score.yaml",
             "task: lm-score\nmodel:\n  plugin: llama\n  path: " + (out / "last").string() +
                 "\ntokenizer:\n  path: " + (out / "last").string() +
                 "\nmask:\n  plugin: causal\n");
  const RunResult s =
      run_masque({"run", (dir / "score.yaml").string(), "-i", (dir / "valid.txt").string()});
  INFO(s.err);
  REQUIRE(s.exit_code == 0);
  double nll = 0, tokens = 0;
  for (const auto& j : parse_jsonl(s.out)) {
    nll += j["nll"].get<double>();
    tokens += static_cast<double>(j["tokens"].get<std::int64_t>() - 1);
  }
  CHECK(nll / tokens == Approx(reported).epsilon(1e-5));
}

TEST_CASE("train: from config.json alone, a BERT learns a UniLM task and runs in masque run",
          "[train][cli]") {
  const fs::path dir = scratch_dir("train_cli_scratch");
  fs::create_directories(dir / "model");
  fs::copy_file(shared_dir() / "models/tiny-bert-chinese/config.json", dir / "model/config.json");
  write_pairs(dir / "train.tsv", 16);
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 5\n  seed: 3\n");
  const RunResult r =
      run_masque({"train", pipeline.string(), "--set", "model.path=" + (dir / "model").string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("from scratch"));
  // Seeded: a second run from scratch gives the same losses; another seed others.
  const RunResult again =
      run_masque({"train", pipeline.string(), "--set", "model.path=" + (dir / "model").string(),
                  "--set", "task.output=" + (dir / "run2").string()});
  REQUIRE(again.exit_code == 0);
  CHECK(losses(dir / "run/metrics.jsonl") == losses(dir / "run2/metrics.jsonl"));
  const RunResult other =
      run_masque({"train", pipeline.string(), "--set", "model.path=" + (dir / "model").string(),
                  "--set", "task.output=" + (dir / "run3").string(), "--set", "task.seed=4"});
  REQUIRE(other.exit_code == 0);
  CHECK(losses(dir / "run/metrics.jsonl") != losses(dir / "run3/metrics.jsonl"));
  // Initialised as BERT is: matrices ~ normal(0, 0.02), zero biases, unit LayerNorm weights
  // (one Adam step moves each by at most lr, so the initial law still shows after 5 steps).
  const SafeTensors st = SafeTensors::open(dir / "run/last/model.safetensors");
  CHECK(st.contains("bert.embeddings.word_embeddings.weight"));
  // The trained folder runs in the seq2seq task unchanged.
  write_file(
      dir / "run.yaml",
      "task: seq2seq\nmodel:\n  plugin: bert\n  path: " + (dir / "run/last").string() +
          "\ntokenizer:\n  plugin: wordpiece\n  vocab: " + (dir / "run/last/vocab.txt").string() +
          "\n  lowercase: \"false\"\nmask:\n  plugin: seq2seq\n"
          "decoder:\n  plugin: greedy\n  max_new_tokens: 4\n");
  const RunResult g = run_masque({"run", (dir / "run.yaml").string()}, "北 京\n欢 迎 你\n");
  INFO(g.err);
  CHECK(g.exit_code == 0);
  CHECK(parse_jsonl(g.out).size() == 2);
}

TEST_CASE(
    "train: SIGINT leaves a whole checkpoint and exit 130, --resume ends with the same "
    "losses as an uninterrupted run",
    "[train][cli][signals]") {
  const fs::path dir = scratch_dir("train_cli_sigint");
  write_pairs(dir / "train.tsv", 40);
  constexpr int kSteps = 60;
  const std::string extra = "  steps: " + std::to_string(kSteps) + "\n  warmup_steps: 5\n";
  const fs::path whole_pipeline = unilm_pipeline(dir, dir / "whole", extra);
  const RunResult whole = run_masque({"train", whole_pipeline.string(), "-q"});
  INFO(whole.err);
  REQUIRE(whole.exit_code == 0);
  const std::vector<double> expected = losses(dir / "whole/metrics.jsonl");
  REQUIRE(expected.size() == kSteps);

  const fs::path pipeline = unilm_pipeline(dir, dir / "cut", extra);
  const pid_t pid = start_masque({"train", pipeline.string(), "-q"}, dir / "err.txt");
  REQUIRE(pid > 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (metric_lines(dir / "cut/metrics.jsonl") < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  kill(pid, SIGINT);
  const int code = wait_exit(pid);
  INFO(read_file(dir / "err.txt"));
  // A run too fast to catch ends normally; then there is nothing to resume.
  if (code == 0) {
    WARN("the run finished before SIGINT arrived");
    CHECK(losses(dir / "cut/metrics.jsonl") == expected);
    return;
  }
  REQUIRE(code == 130);
  CHECK_THAT(read_file(dir / "err.txt"), Contains("stopped by signal 2"));
  // The checkpoint of the last finished step is whole: a model folder and the trainer's state.
  const fs::path last = dir / "cut/last";
  REQUIRE(fs::exists(last));
  const auto state = nlohmann::json::parse(read_file(last / "trainer_state.json"));
  const auto done = state["step"].get<std::int64_t>();
  CHECK(done >= 3);
  CHECK(done < kSteps);
  CHECK(SafeTensors::open(last / "model.safetensors").size() > 0);
  CHECK(losses(dir / "cut/metrics.jsonl").size() == static_cast<std::size_t>(done));

  const RunResult resumed =
      run_masque({"train", pipeline.string(), "-q", "--resume", (dir / "cut").string()});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.err, Contains("resuming from"));
  CHECK(losses(dir / "cut/metrics.jsonl") == expected);  // bit for bit
  CHECK(SafeTensors::open(dir / "cut/last/model.safetensors").size() ==
        SafeTensors::open(dir / "whole/last/model.safetensors").size());
}

TEST_CASE("train: --threads 2 sums its parts' gradients to the one-thread losses", "[train][cli]") {
  const fs::path dir = scratch_dir("train_cli_threads");
  write_pairs(dir / "train.tsv", 24);
  const fs::path pipeline = unilm_pipeline(dir, dir / "one", "  steps: 12\n");
  REQUIRE(run_masque({"train", pipeline.string(), "-q"}).exit_code == 0);
  REQUIRE(run_masque({"train", pipeline.string(), "-q", "--threads", "2", "--set",
                      "task.output=" + (dir / "two").string()})
              .exit_code == 0);
  REQUIRE(run_masque({"train", pipeline.string(), "-q", "--threads", "2", "--set",
                      "task.output=" + (dir / "two_again").string()})
              .exit_code == 0);
  const auto one = losses(dir / "one/metrics.jsonl"), two = losses(dir / "two/metrics.jsonl");
  REQUIRE(one.size() == 12);
  REQUIRE(two.size() == 12);
  for (std::size_t i = 0; i < one.size(); ++i) CHECK(two[i] == Approx(one[i]).epsilon(1e-5));
  CHECK(two == losses(dir / "two_again/metrics.jsonl"));  // reproducible per thread count
}

TEST_CASE("train: bad records are skipped and reported by line, and too many stop the run",
          "[train][cli][errors]") {
  const fs::path dir = scratch_dir("train_cli_bad");
  {
    std::ofstream out(dir / "train.jsonl", std::ios::binary);
    out << R"({"source": "北 京", "target": "京 北"})"
        << "\n";                                                // 1 good
    out << "{\"source\": \"\xff\xfe\", \"target\": \"北\"}\n";  // 2 invalid UTF-8
    out << R"({"source": "欢 迎", "target": ""})"
        << "\n";                 // 3 empty target
    out << "not json at all\n";  // 4 not JSON
    std::string long_source;
    for (int i = 0; i < 200; ++i) long_source += "北 ";
    out << R"({"source": ")" << long_source << R"(", "target": "京"})"
        << "\n";  // 5 too long
    out << R"({"source": "你 好", "target": "好 你"})"
        << "\n";  // 6 good
  }
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 2\n");
  const RunResult r = run_masque(
      {"train", pipeline.string(), "--set", "task.train_file=" + (dir / "train.jsonl").string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("2 usable records of 6"));
  for (const char* line : {"train.jsonl:2:", "train.jsonl:3:", "train.jsonl:4:", "train.jsonl:5:"})
    CHECK_THAT(r.err, Contains(line));
  CHECK_THAT(r.err, Contains("4 of 6 records skipped"));

  const RunResult strict = run_masque(
      {"train", pipeline.string(), "--set", "task.train_file=" + (dir / "train.jsonl").string(),
       "--set", "task.output=" + (dir / "strict").string(), "--set", "task.max_bad_records=2"});
  CHECK(strict.exit_code == 2);
  CHECK_THAT(strict.err, Contains("train.jsonl"));
  CHECK_FALSE(fs::exists(dir / "strict/last"));
}

// A plm (or causal-lm) pipeline on tiny-bert-chinese: unilm_pipeline's with another objective
// and mask.
fs::path objective_pipeline(const fs::path& dir, const std::string& objective,
                            const std::string& mask) {
  std::string yaml = read_file(unilm_pipeline(dir, dir / "run", "  steps: 2\n"));
  yaml.replace(yaml.find("objective: seq2seq"), 18, "objective: " + objective);
  yaml.replace(yaml.find("plugin: seq2seq"), 15, mask);
  write_file(dir / (objective + ".yaml"), yaml);
  return dir / (objective + ".yaml");
}

TEST_CASE("train: a record a step could not lay out is skipped by line when the data is loaded",
          "[train][cli][errors]") {
  const fs::path dir = scratch_dir("train_cli_step_records");
  std::string good;
  for (int i = 0; i < 6; ++i) good += "{\"text\": \"" + chars(4, i) + "\"}\n";
  write_file(dir / "train.jsonl", good);
  // Orders of the wrong length, repeating a position, out of range, negative; one good.
  write_file(dir / "valid.jsonl", good +
                                      R"({"text": "北 京 欢 迎", "order": [1, 0]})"
                                      "\n" +
                                      R"({"text": "北 京 欢 迎", "order": [0, 0, 1, 2, 3, 4]})"
                                      "\n" +
                                      R"({"text": "北 京 欢 迎", "order": [0, 1, 2, 3, 4, 9]})"
                                      "\n" +
                                      R"({"text": "北 京 欢 迎", "order": [0, 1, 2, 3, 4, -1]})"
                                      "\n" +
                                      R"({"text": "北 京 欢 迎", "order": [5, 1, 2, 3, 4, 0]})"
                                      "\n");
  const fs::path plm =
      objective_pipeline(dir, "plm", "plugin: permutation\n  stream: query\n  order: random");
  const RunResult r = run_masque({"train", plm.string(), "--set",
                                  "task.train_file=" + (dir / "train.jsonl").string(), "--set",
                                  "task.valid_file=" + (dir / "valid.jsonl").string()});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  for (const char* line :
       {"valid.jsonl:7: skipped: bad order", "valid.jsonl:8: skipped: bad order",
        "valid.jsonl:9: skipped: bad order", "valid.jsonl:10: skipped: bad order"})
    CHECK_THAT(r.err, Contains(line));
  CHECK_THAT(r.err, Contains("7 usable records of 11"));
  CHECK(fs::exists(dir / "run/last/model.safetensors"));

  // ids outside the embedding table, in the training file: skipped and counted.
  write_file(dir / "ids.jsonl", good + "{\"ids\": [101, 30000000, 102]}\n");
  const fs::path lm = objective_pipeline(dir, "causal-lm", "plugin: causal");
  const RunResult ids = run_masque(
      {"train", lm.string(), "--set", "task.train_file=" + (dir / "ids.jsonl").string(), "--set",
       "task.output=" + (dir / "ids").string(), "--set", "task.max_bad_records=0"});
  INFO(ids.err);
  CHECK(ids.exit_code == 2);
  CHECK_THAT(ids.err, Contains("ids.jsonl:7: skipped: id outside the model's vocabulary"));
}

TEST_CASE("train: configuration mistakes are exit 2 with a message naming the key or folder",
          "[train][cli][errors]") {
  const fs::path dir = scratch_dir("train_cli_errors");
  write_pairs(dir / "train.tsv", 8);
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 2\n");
  REQUIRE(run_masque({"train", pipeline.string(), "-q"}).exit_code == 0);

  const RunResult again = run_masque({"train", pipeline.string(), "-q"});
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.err, Contains("already holds a run"));
  CHECK_THAT(again.err, Contains("--resume"));

  const RunResult no_ckpt =
      run_masque({"train", pipeline.string(), "--resume", (dir / "nowhere").string()});
  CHECK(no_ckpt.exit_code == 2);
  CHECK_THAT(no_ckpt.err, Contains("nowhere"));

  const RunResult bad_key = run_masque({"train", pipeline.string(), "--set", "task.lr=fast"});
  CHECK(bad_key.exit_code == 2);
  CHECK_THAT(bad_key.err, Contains("lr"));

  const RunResult bad_objective =
      run_masque({"train", pipeline.string(), "--set", "task.objective=translate"});
  CHECK(bad_objective.exit_code == 2);
  CHECK_THAT(bad_objective.err, Contains("objective"));

  const RunResult pretrained =
      run_masque({"train", pipeline.string(), "--set", "task.init=pretrained", "--set",
                  "model.path=" + dir.string(), "--set", "task.output=" + (dir / "x").string()});
  CHECK(pretrained.exit_code == 2);

  const RunResult help = run_masque({"train", "--help"});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Contains("--resume"));
  const RunResult listing = run_masque({"tasks", "train"});
  CHECK(listing.exit_code == 0);
  CHECK_THAT(listing.out, Contains("max_bad_records"));
}

TEST_CASE("train: a resumed run keeps saving after the checkpoint it resumed from is pruned",
          "[train][cli]") {
  const fs::path dir = scratch_dir("train_cli_prune");
  write_pairs(dir / "train.tsv", 24);
  const std::string extra = "  steps: 10\n  save_every: 2\n  keep_last: 2\n";
  const fs::path whole_pipeline = unilm_pipeline(dir, dir / "whole", extra);
  REQUIRE(run_masque({"train", whole_pipeline.string(), "-q"}).exit_code == 0);

  // A time budget far below one step stops the run after its first step, with a checkpoint.
  const fs::path pipeline = unilm_pipeline(dir, dir / "cut", extra);
  const RunResult first =
      run_masque({"train", pipeline.string(), "-q", "--set", "task.max_minutes=1e-9"});
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  REQUIRE(fs::exists(dir / "cut/checkpoint-000001"));
  // The resumed run saves 2, 4 (pruning 1), 6, 8, 10: each save still has config.json.
  const RunResult resumed =
      run_masque({"train", pipeline.string(), "-q", "--resume", (dir / "cut").string()});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK_FALSE(fs::exists(dir / "cut/checkpoint-000001"));
  CHECK(losses(dir / "cut/metrics.jsonl") == losses(dir / "whole/metrics.jsonl"));
  CHECK(read_file(dir / "cut/last/config.json") == read_file(dir / "whole/last/config.json"));
  // The run's pipeline.yaml names the model folder of the pipeline, not a pruned checkpoint.
  CHECK_THAT(read_file(dir / "cut/pipeline.yaml"), Contains("models/tiny-bert-chinese"));
  CHECK_THAT(read_file(dir / "cut/pipeline.yaml"), !Contains("checkpoint-000001"));
}

TEST_CASE("train: resuming before the last checkpoint drops the abandoned ones and their best",
          "[train][cli]") {
  const fs::path dir = scratch_dir("train_cli_resume_earlier");
  write_pairs(dir / "train.tsv", 24);
  write_pairs(dir / "valid.tsv", 6, 100);
  const fs::path pipeline = unilm_pipeline(
      dir, dir / "run",
      "  steps: 6\n  save_every: 2\n  valid_every: 2\n  keep_last: 10\n  valid_file: " +
          (dir / "valid.tsv").string() + "\n");
  REQUIRE(run_masque({"train", pipeline.string(), "-q"}).exit_code == 0);
  REQUIRE(fs::exists(dir / "run/checkpoint-000006"));
  const auto best_step = [&](const fs::path& checkpoint) {
    return nlohmann::json::parse(read_file(checkpoint / "trainer_state.json"))["best_step"];
  };
  REQUIRE(best_step(dir / "run/checkpoint-000002") == 2);
  // Resumed at step 2, stopped after step 3 (a tiny time budget), without validation.
  const RunResult r = run_masque(
      {"train", pipeline.string(), "-q", "--resume", (dir / "run/checkpoint-000002").string(),
       "--set", "task.max_minutes=1e-9", "--set", "task.valid_file=", "--set", "task.keep_last=1"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(fs::equivalent(dir / "run/last", dir / "run/checkpoint-000003"));
  CHECK_FALSE(fs::exists(dir / "run/checkpoint-000004"));
  CHECK_FALSE(fs::exists(dir / "run/checkpoint-000006"));
  // `best` is the resumed state's best, kept by the pruning.
  REQUIRE(fs::exists(dir / "run/best"));
  CHECK(fs::equivalent(dir / "run/best", dir / "run/checkpoint-000002"));
  CHECK(best_step(dir / "run/last") == 2);
}

TEST_CASE("train: --resume refuses a run whose data order changed", "[train][cli][errors]") {
  const fs::path dir = scratch_dir("train_cli_resume_changed");
  write_pairs(dir / "train.tsv", 8);
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 2\n");
  REQUIRE(run_masque({"train", pipeline.string(), "-q"}).exit_code == 0);
  for (const std::string set :
       {"task.seed=7", "task.batch_size=8", "task.shuffle=true", "task.accumulation=2"}) {
    const RunResult r = run_masque(
        {"train", pipeline.string(), "-q", "--resume", (dir / "run").string(), "--set", set});
    INFO(set << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(set.substr(0, set.find('='))));
  }
  CHECK(run_masque({"train", pipeline.string(), "-q", "--resume", (dir / "run").string()})
            .exit_code == 0);
}

TEST_CASE("train: --resume refuses settings that change the steps, naming the old and new value",
          "[train][cli][errors]") {
  const fs::path dir = scratch_dir("train_cli_resume_settings");
  write_pairs(dir / "train.tsv", 8);
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 4\n  save_every: 1\n");
  REQUIRE(run_masque({"train", pipeline.string(), "-q"}).exit_code == 0);
  const std::string from = (dir / "run/checkpoint-000003").string();
  for (const auto& [set, says] : std::vector<std::pair<std::string, std::string>>{
           {"task.lr=0.5", "task.lr 0.001, this one 0.5"},
           {"task.schedule=cosine", "task.schedule \"linear\", this one \"cosine\""},
           {"task.warmup_steps=3", "task.warmup_steps"},
           {"task.weight_decay=0.5", "task.weight_decay"},
           {"task.label_smoothing=0.1", "task.label_smoothing"},
           {"task.max_grad_norm=0", "task.max_grad_norm"},
           {"mask.plugin=causal", "mask.plugin \"seq2seq\", this one \"causal\""}}) {
    const RunResult r =
        run_masque({"train", pipeline.string(), "-q", "--resume", from, "--set", set});
    INFO(set << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(says));
  }
  // Other records, as many as before: refused by their content; the same content is not.
  write_pairs(dir / "other.tsv", 8, 3);
  const RunResult other = run_masque({"train", pipeline.string(), "-q", "--resume", from, "--set",
                                      "task.train_file=" + (dir / "other.tsv").string()});
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err, Contains("task.train_file"));
  fs::copy_file(dir / "train.tsv", dir / "same.tsv");
  const RunResult same = run_masque({"train", pipeline.string(), "-q", "--resume", from, "--set",
                                     "task.train_file=" + (dir / "same.tsv").string(), "--set",
                                     "task.max_minutes=30"});
  INFO(same.err);
  CHECK(same.exit_code == 0);
}

TEST_CASE("train: --resume refuses a trainer state with values out of range or missing",
          "[train][cli][errors]") {
  const fs::path dir = scratch_dir("train_cli_resume_state");
  write_pairs(dir / "train.tsv", 8);
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 4\n  save_every: 2\n");
  REQUIRE(run_masque({"train", pipeline.string(), "-q"}).exit_code == 0);
  const nlohmann::json good =
      nlohmann::json::parse(read_file(dir / "run/checkpoint-000002/trainer_state.json"));
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"step", 100},
                                                           {"step", -3},
                                                           {"batch_in_epoch", 999999},
                                                           {"epoch", -1},
                                                           {"best_step", 3},
                                                           {"examples", nullptr}}) {
    const fs::path bad = dir / "bad";
    fs::remove_all(bad);
    fs::copy(dir / "run/checkpoint-000002", bad);
    nlohmann::json state = good;
    if (value.is_null())
      state.erase(key);
    else
      state[key] = value;
    write_file(bad / "trainer_state.json", state.dump());
    const RunResult r = run_masque({"train", pipeline.string(), "-q", "--resume", bad.string()});
    INFO(key << " = " << value.dump() << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("trainer_state.json: " + key + ": "));
  }
}

TEST_CASE("train: an objective under a mask that shows what it predicts is refused before training",
          "[train][cli][errors]") {
  const fs::path dir = scratch_dir("train_cli_mask_mismatch");
  write_pairs(dir / "train.tsv", 8);
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 2\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"mask.plugin=bidirectional"}, "would learn to copy"},
      {{"task.objective=causal-lm", "mask.plugin=bidirectional"}, "would learn to copy"},
      {{"task.objective=plm"}, "objective plm"},
  };
  for (const auto& [sets, message] : cases) {
    std::vector<std::string> args{"train", pipeline.string(), "-q"};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    const RunResult r = run_masque(args);
    INFO(sets.back() << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(message));
    CHECK_FALSE(fs::exists(dir / "run/last"));
  }
  // The masks the objectives are made for still train.
  CHECK(run_masque({"train", pipeline.string(), "-q", "--set", "mask.plugin=causal"}).exit_code ==
        0);
}

TEST_CASE("train: mlm steps that mask no token make no update and are counted, blank texts skip",
          "[train][cli]") {
  const fs::path dir = scratch_dir("train_cli_mlm_empty");
  {
    std::ofstream out(dir / "train.txt", std::ios::binary);
    for (int i = 0; i < 12; ++i) out << chars(1 + i % 2, i) << "\n";
    out << "\n";  // line 13: nothing to predict
  }
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 24\n");
  const RunResult r =
      run_masque({"train", pipeline.string(), "--set", "task.objective=mlm", "--set",
                  "mask.plugin=bidirectional", "--set",
                  "task.train_file=" + (dir / "train.txt").string(), "--set", "task.batch_size=1"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("train.txt:13: skipped: empty text"));
  std::int64_t empty = 0, steps = 0;
  for (const auto& j : read_jsonl(dir / "run/metrics.jsonl"))
    if (j.contains("loss")) ++steps, empty += j["tokens"].get<std::int64_t>() == 0;
  CHECK(steps == 24);
  REQUIRE(empty > 0);  // 1-2 tokens at p = 0.15: most steps choose none
  CHECK_THAT(r.err, Contains(std::to_string(empty) + " of 24 steps had no token to predict"));
}

TEST_CASE("train: with a token budget and shuffling, one epoch trains every record once",
          "[train][cli]") {
  const fs::path dir = scratch_dir("train_cli_budget_epoch");
  std::int64_t targets = 0;  // predicted tokens of one epoch: each target and its [SEP]
  {
    std::ofstream out(dir / "train.tsv", std::ios::binary);
    out << "source\ttarget\n";
    for (int i = 0; i < 20; ++i) {
      const int n = i < 10 ? 1 : 12;
      out << chars(n, i) << '\t' << chars(n, i + 3) << '\n';
      targets += n + 1;
    }
  }
  const fs::path pipeline = unilm_pipeline(dir, dir / "run");
  const RunResult r =
      run_masque({"train", pipeline.string(), "-q", "--set", "task.max_tokens=70", "--set",
                  "task.batch_size=100", "--set", "task.shuffle=true", "--set", "task.epochs=1"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::int64_t predicted = 0;
  for (const auto& j : read_jsonl(dir / "run/metrics.jsonl"))
    if (j.contains("loss")) predicted += j["tokens"].get<std::int64_t>();
  CHECK(predicted == targets);
}

TEST_CASE("train: empty sources are skipped, a byte order mark is not part of a column name",
          "[train][cli][errors]") {
  const fs::path dir = scratch_dir("train_cli_empty_source");
  write_file(dir / "train.tsv",
             "\xEF\xBB\xBFsource\ttarget\n北 京\t京 北\n\t北\n   \t京\n你 好\t好 你\n");
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 2\n");
  const RunResult r = run_masque({"train", pipeline.string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("2 usable records of 4"));
  CHECK_THAT(r.err, Contains("train.tsv:3: skipped: empty source"));
  CHECK_THAT(r.err, Contains("train.tsv:4: skipped: empty source"));
}

TEST_CASE("train: a bad run folder, training file or AdamW beta fails before training",
          "[train][cli][errors]") {
  const fs::path dir = scratch_dir("train_cli_early_errors");
  write_pairs(dir / "train.tsv", 8);
  write_file(dir / "a_file", "x");
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 2\n");
  const RunResult file_output =
      run_masque({"train", pipeline.string(), "--set", "task.output=" + (dir / "a_file").string()});
  CHECK(file_output.exit_code == 2);
  CHECK_THAT(file_output.err, Contains("task.output"));
  const RunResult folder_data =
      run_masque({"train", pipeline.string(), "--set", "task.train_file=" + dir.string()});
  CHECK(folder_data.exit_code == 2);
  CHECK_THAT(folder_data.err, Contains(dir.string() + ": is a folder"));
  const RunResult beta = run_masque({"train", pipeline.string(), "--set", "task.adam_beta2=1"});
  CHECK(beta.exit_code == 2);
  CHECK_THAT(beta.err, Contains("task.adam_beta2"));
}

TEST_CASE("train: adam_epsilon 0 is refused, and a NaN validation loss is divergence, never saved",
          "[train][cli][errors]") {
  const fs::path dir = scratch_dir("train_cli_nan");
  write_pairs(dir / "train.tsv", 8);
  write_pairs(dir / "valid.tsv", 4, 50);
  const fs::path pipeline = unilm_pipeline(
      dir, dir / "run", "  steps: 1\n  valid_file: " + (dir / "valid.tsv").string() + "\n");
  const RunResult eps = run_masque({"train", pipeline.string(), "--set", "task.adam_epsilon=0"});
  CHECK(eps.exit_code == 2);
  CHECK_THAT(eps.err, Contains("task.adam_epsilon: must be > 0"));
  // The step's loss is computed before its update: only the validation sees the blown weights.
  const RunResult nan = run_masque({"train", pipeline.string(), "--set", "task.lr=1e38"});
  INFO(nan.err);
  CHECK(nan.exit_code == 3);
  CHECK_THAT(nan.err, Contains("training diverged: the validation loss at step 1"));
  CHECK_FALSE(fs::exists(dir / "run/checkpoint-000001"));
  CHECK_FALSE(fs::exists(dir / "run/best"));
}

TEST_CASE("train: the run section's record limits read the training data, its batching is refused",
          "[train][cli][errors]") {
  const fs::path dir = scratch_dir("train_cli_run_settings");
  write_pairs(dir / "train.tsv", 8);
  std::string data = read_file(dir / "train.tsv");
  data += "北 \xff 京\t京 北\n";  // line 10: invalid UTF-8
  write_file(dir / "train.tsv", data);
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 1\n");
  const RunResult plain = run_masque({"train", pipeline.string()});
  INFO(plain.err);
  CHECK(plain.exit_code == 0);
  CHECK_THAT(plain.err, Contains("train.tsv:10: skipped: invalid UTF-8"));
  CHECK_THAT(plain.err, Contains("8 usable records of 9"));
  const RunResult replaced =
      run_masque({"train", pipeline.string(), "--set", "task.output=" + (dir / "replaced").string(),
                  "--set", "task.invalid_utf8=replace"});
  INFO(replaced.err);
  CHECK(replaced.exit_code == 0);
  CHECK_THAT(replaced.err, Contains("9 usable records of 9"));
  const RunResult limited =
      run_masque({"train", pipeline.string(), "--set", "task.output=" + (dir / "limited").string(),
                  "--set", "task.max_record_bytes=16"});
  INFO(limited.err);
  CHECK(limited.exit_code == 0);
  CHECK_THAT(limited.err, Contains("longer than the limit of 16"));
  CHECK_THAT(limited.err, Contains(" the record is N bytes, longer than the limit of N"));
  const RunResult batching =
      run_masque({"train", pipeline.string(), "--set", "task.output=" + (dir / "batching").string(),
                  "--set", "run.max_batch_size=4"});
  CHECK(batching.exit_code == 2);
  CHECK_THAT(batching.err, Contains("run.max_batch_size: masque train does not use it"));
}

TEST_CASE("train: a checkpoint tokenizes as the training did (wordpiece settings are carried)",
          "[train][cli]") {
  const fs::path dir = scratch_dir("train_cli_tokenizer_settings");
  write_pairs(dir / "train.tsv", 8);
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 1\n");  // lowercase false
  REQUIRE(run_masque({"train", pipeline.string(), "-q"}).exit_code == 0);
  const nlohmann::json config =
      nlohmann::json::parse(read_file(dir / "run/last/tokenizer_config.json"));
  CHECK(config["do_lower_case"] == false);
  const std::string text = "北京 ABC Führer\n";
  const RunResult trained =
      run_masque({"tokenize", "--tokenizer", "wordpiece", "--set",
                  "vocab=" + (shared_dir() / "tokenizers/bert-base-chinese/vocab.txt").string(),
                  "--set", "lowercase=false"},
                 text);
  const RunResult folder = run_masque(
      {"tokenize", "--tokenizer", "wordpiece", "--set", "path=" + (dir / "run/last").string()},
      text);
  REQUIRE(trained.exit_code == 0);
  REQUIRE(folder.exit_code == 0);
  CHECK(nlohmann::json::parse(folder.out)["ids"] == nlohmann::json::parse(trained.out)["ids"]);
}

TEST_CASE("train: small mistakes say what they are (another model's checkpoint, mlm_probability 0)",
          "[train][cli][errors]") {
  const fs::path dir = scratch_dir("train_cli_small_mistakes");
  write_pairs(dir / "train.tsv", 8);
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 1\n");
  REQUIRE(run_masque({"train", pipeline.string(), "-q"}).exit_code == 0);
  const RunResult other = run_masque({"train", pipeline.string(), "-q", "--resume",
                                      (dir / "run").string(), "--set", "model.plugin=gpt2"});
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.err, Contains("a checkpoint of model plugin 'bert', but the pipeline's "
                                 "model.plugin is 'gpt2'"));
  const fs::path mlm = objective_pipeline(dir, "mlm", "plugin: bidirectional");
  const RunResult zero = run_masque({"train", mlm.string(), "--set", "task.mlm_probability=0"});
  CHECK(zero.exit_code == 2);
  CHECK_THAT(zero.err, Contains("task.mlm_probability: must be in (0, 1]"));
}

TEST_CASE("train: progress lines show a rate from the first step, a byte order mark is not data",
          "[train][cli]") {
  const fs::path dir = scratch_dir("train_cli_progress_bom");
  std::string lines = "\xEF\xBB\xBF";
  for (int i = 0; i < 8; ++i)
    lines += "{\"source\": \"" + chars(3, i) + "\", \"target\": \"" + chars(2, i) + "\"}\n";
  write_file(dir / "train.jsonl", lines);
  const fs::path pipeline = unilm_pipeline(dir, dir / "run", "  steps: 2\n  log_every: 1\n");
  const RunResult r = run_masque(
      {"train", pipeline.string(), "--set", "task.train_file=" + (dir / "train.jsonl").string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("8 usable records of 8"));
  CHECK_THAT(r.err, Contains("step 1/2"));
  CHECK_THAT(r.err, !Contains(" 0 tok/s"));
}
