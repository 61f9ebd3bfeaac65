// Tasks `classify` and `embed` through the CLI on random-weight BertForSequenceClassification and
// GPT2ForSequenceClassification folders, against the float64 plain-torch references of
// classify_reference.py (written at test time into the build tree), in batches of records of
// different lengths.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "test_support.hpp"

using namespace masque::test;
using nlohmann::json;

namespace {

constexpr double kTol = 1e-4;

std::filesystem::path fixture(const std::string& name = "") {
  return std::filesystem::path(MASQUE_CLASSIFY_FIXTURE) / name;
}

const json& reference() {
  static const json r = json::parse(read_file(fixture("reference.json")));
  return r;
}

std::vector<json> run_ok(std::vector<std::string> args, const std::string& input) {
  args.insert(args.begin(), "run");
  args.push_back("-q");
  const RunResult r = run_masque(args, input);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return parse_jsonl(r.out);
}

// A pipeline running `task` on a fixture folder with no tokenizer (records are ids).
std::string ids_pipeline(const std::string& task, const std::string& folder) {
  const auto file = own_scratch_dir("pipeline_" + task + "_" + folder) / "pipeline.yaml";
  const std::string plugin = folder.rfind("gpt2", 0) == 0 ? "gpt2" : "bert";
  write_file(file, "task: " + task + "\nmodel: {plugin: " + plugin +
                       ", path: " + fixture(folder).string() + "}\n");
  return file.string();
}

// The reference cases of `family` as JSON-lines records of ids (and token types).
std::string id_records(const std::string& family) {
  std::string input;
  for (const auto& c : reference()[family]) {
    json record = {{"ids", c["ids"]}};
    if (c.contains("token_type_ids")) record["token_type_ids"] = c["token_type_ids"];
    input += record.dump() + "\n";
  }
  return input;
}

void check_close(const json& got, const json& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(got[i].get<double>() - want[i].get<double>()) <= kTol);
  }
}

std::vector<double> softmax(const json& logits) {
  double m = -1e300, sum = 0;
  for (const auto& v : logits) m = std::max(m, v.get<double>());
  std::vector<double> p;
  for (const auto& v : logits) sum += std::exp(v.get<double>() - m);
  for (const auto& v : logits) p.push_back(std::exp(v.get<double>() - m) / sum);
  return p;
}

const std::vector<std::string> kBertLabels = {"negative", "neutral", "positive"};

}  // namespace

TEST_CASE("classify: BertForSequenceClassification logits, labels and scores match torch",
          "[classify]") {
  const auto out = run_ok({"--task", "classify", "--model", fixture("bert-cls"), "--input-format",
                           "jsonl", "--set", "task.return_logits=true", "--set", "task.top_k=2"},
                          id_records("bert"));
  const json& cases = reference()["bert"];
  REQUIRE(out.size() == cases.size());
  // `scores` is in order, best first: read the lines keeping their keys' order.
  const RunResult raw = run_masque({"run", "--task", "classify", "--model", fixture("bert-cls"),
                                    "--input-format", "jsonl", "-q"},
                                   id_records("bert"));
  std::vector<nlohmann::ordered_json> ordered;
  std::istringstream lines(raw.out);
  for (std::string line; std::getline(lines, line);)
    ordered.push_back(nlohmann::ordered_json::parse(line));
  REQUIRE(ordered.size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("record " << i << ": " << out[i].dump());
    CHECK(out[i]["id"] == i);
    double previous = 2;
    for (const auto& [label, score] : ordered[i]["scores"].items()) {
      CHECK(score.get<double>() <= previous);
      previous = score.get<double>();
    }
    check_close(out[i]["logits"], cases[i]["logits"]);
    const std::vector<double> p = softmax(cases[i]["logits"]);
    const auto best = static_cast<std::size_t>(std::max_element(p.begin(), p.end()) - p.begin());
    CHECK(out[i]["label"] == kBertLabels[best]);
    CHECK(std::abs(out[i]["score"].get<double>() - p[best]) <= kTol);
    REQUIRE(out[i]["scores"].size() == 2);  // top_k: the two best
    std::vector<std::size_t> best_first = {0, 1, 2};
    std::sort(best_first.begin(), best_first.end(),
              [&](std::size_t a, std::size_t b) { return p[a] > p[b]; });
    for (std::size_t j = 0; j < 2; ++j) {
      const std::string& label = kBertLabels[best_first[j]];
      REQUIRE(out[i]["scores"].contains(label));
      CHECK(std::abs(out[i]["scores"][label].get<double>() - p[best_first[j]]) <= kTol);
    }
    CHECK_FALSE(out[i].contains("labels"));  // single-label
  }
}

TEST_CASE("classify: sentence pairs from TSV columns and JSON fields get token types 1",
          "[classify]") {
  const json& cases = reference()["bert_pairs"];
  std::string tsv = "text\tpair\n", jsonl;
  for (const auto& c : cases) {
    tsv += c["text"].get<std::string>() + "\t" + c["pair"].get<std::string>() + "\n";
    jsonl += json({{"premise", c["text"]}, {"hypothesis", c["pair"]}}).dump() + "\n";
  }
  const auto from_tsv =
      run_ok({"--task", "classify", "--model", fixture("bert-cls"), "--input-format", "tsv",
              "--set", "task.pair_field=pair", "--set", "task.return_logits=true"},
             tsv);
  const auto from_json = run_ok(
      {"--task", "classify", "--model", fixture("bert-cls"), "--input-format", "jsonl", "--field",
       "premise", "--set", "task.pair_field=hypothesis", "--set", "task.return_logits=true"},
      jsonl);
  REQUIRE(from_tsv.size() == cases.size());
  REQUIRE(from_json.size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("pair " << i);
    check_close(from_tsv[i]["logits"], cases[i]["logits"]);
    check_close(from_json[i]["logits"], cases[i]["logits"]);
    CHECK(from_tsv[i]["scores"].size() == 3);  // top_k 0: every label
  }
  // Without the pair field the second text is missing: other numbers.
  const auto single = run_ok({"--task", "classify", "--model", fixture("bert-cls"),
                              "--input-format", "tsv", "--set", "task.return_logits=true"},
                             tsv);
  CHECK(std::abs(single[0]["logits"][0].get<double>() - cases[0]["logits"][0].get<double>()) >
        1e-3);
}

TEST_CASE("classify: problem_type multi_label_classification scores with sigmoids", "[classify]") {
  const auto out = run_ok({"--task", "classify", "--model", fixture("bert-multilabel"),
                           "--input-format", "jsonl", "--set", "task.threshold=0.6"},
                          id_records("bert"));
  const json& cases = reference()["bert"];
  REQUIRE(out.size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("record " << i << ": " << out[i].dump());
    std::vector<std::string> above;
    for (std::size_t l = 0; l < 3; ++l) {
      const double p = 1.0 / (1.0 + std::exp(-cases[i]["logits"][l].get<double>()));
      CHECK(std::abs(out[i]["scores"][kBertLabels[l]].get<double>() - p) <= kTol);
      if (p >= 0.6) above.push_back(kBertLabels[l]);
    }
    REQUIRE(out[i]["labels"].size() == above.size());
    for (const auto& l : above)
      CHECK(std::find(out[i]["labels"].begin(), out[i]["labels"].end(), json(l)) !=
            out[i]["labels"].end());
  }
}

TEST_CASE("classify: GPT2ForSequenceClassification reads the last token's score", "[classify]") {
  const auto out = run_ok({ids_pipeline("classify", "gpt2-cls"), "--input-format", "jsonl", "--set",
                           "task.return_logits=true", "--set", "task.top_k=1"},
                          id_records("gpt2"));
  const json& cases = reference()["gpt2"];
  const std::vector<std::string> labels = {"de", "en", "fr", "nl"};
  REQUIRE(out.size() == cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("record " << i << ": " << out[i].dump());
    check_close(out[i]["logits"], cases[i]["logits"]);
    const std::vector<double> p = softmax(cases[i]["logits"]);
    const auto best = static_cast<std::size_t>(std::max_element(p.begin(), p.end()) - p.begin());
    CHECK(out[i]["label"] == labels[best]);
    CHECK(out[i]["scores"].size() == 1);
  }
}

TEST_CASE("classify: gold labels give the accuracy, a record without one is an error record",
          "[classify]") {
  std::string input;
  const json& cases = reference()["gpt2"];
  for (const auto& c : cases) input += json({{"ids", c["ids"]}, {"lang", "fr"}}).dump() + "\n";
  input += json({{"ids", {1, 2}}}).dump() + "\n";  // no gold label
  const auto summary = own_scratch_dir("classify_gold") / "summary.json";
  const RunResult r =
      run_masque({"run", ids_pipeline("classify", "gpt2-cls"), "--input-format", "jsonl", "--set",
                  "task.label_field=lang", "--summary", summary.string(), "-q"},
                 input);
  INFO(r.err);
  CHECK(r.exit_code == 1);  // one error record
  const auto out = parse_jsonl(r.out);
  REQUIRE(out.size() == cases.size() + 1);
  CHECK(out.back()["error"].get<std::string>().find("'lang'") != std::string::npos);
  std::size_t correct = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) correct += out[i]["label"] == "fr";
  const json s = json::parse(read_file(summary));
  INFO(s.dump());
  const json& task = s["task"];
  CHECK(task["labeled"] == cases.size());
  CHECK(task["correct"] == correct);
}

TEST_CASE("classify: label names that do not fit the model's labels are a configuration error",
          "[classify]") {
  const RunResult r = run_masque({"run", "--task", "classify", "--model", fixture("bert-cls"),
                                  "--input-format", "jsonl", "--set", "task.labels=[a, b]", "-q"},
                                 id_records("bert"));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("task.labels: 2 names for a model with 3 labels") != std::string::npos);
  INFO(r.err);
  // A language model's folder: no labels in its config.json, and the message says so.
  const RunResult lm = run_masque({"run", "--task", "classify", "--model",
                                   (shared_dir() / "models/stories260k").string(), "-q"},
                                  "hi\n");
  CHECK(lm.exit_code == 2);
  CHECK(lm.err.find("config.json has no id2label or num_labels") != std::string::npos);
}

TEST_CASE("embed: cls / mean / last pooling, raw and L2-normalised, match torch", "[embed]") {
  for (const std::string family : {"bert", "gpt2"}) {
    const auto pipeline = ids_pipeline("embed", family == "bert" ? "bert-cls" : "gpt2-cls");
    for (const std::string pooling : {"cls", "mean", "last"})
      for (const bool normalize : {false, true}) {
        INFO(family << " " << pooling << (normalize ? " normalised" : ""));
        const auto out =
            run_ok({pipeline, "--input-format", "jsonl", "--set", "task.pooling=" + pooling,
                    "--set", std::string("task.normalize=") + (normalize ? "true" : "false")},
                   id_records(family));
        const json& cases = reference()[family];
        REQUIRE(out.size() == cases.size());
        for (std::size_t i = 0; i < cases.size(); ++i) {
          INFO("record " << i);
          CHECK(out[i]["tokens"] == cases[i]["ids"].size());
          check_close(out[i]["embedding"],
                      cases[i]["pooled"][pooling + (normalize ? "_normalized" : "")]);
        }
      }
  }
}

TEST_CASE("embed: auto pooling is [CLS] for BERT and the last token for GPT-2", "[embed]") {
  for (const std::string family : {"bert", "gpt2"}) {
    const auto out = run_ok({ids_pipeline("embed", family == "bert" ? "bert-cls" : "gpt2-cls"),
                             "--input-format", "jsonl"},
                            id_records(family));
    const json& cases = reference()[family];
    for (std::size_t i = 0; i < cases.size(); ++i)
      check_close(out[i]["embedding"], cases[i]["pooled"][family == "bert" ? "cls" : "last"]);
  }
}

TEST_CASE("embed: the .npy numpy loads equals the JSON-lines output, in input order", "[embed]") {
  // Many records of different lengths over two workers and small batches: rows finish out of
  // order; an empty record fails and its row is NaN.
  const json& cases = reference()["gpt2"];
  std::string input;
  const std::size_t count = 500, failed = 123;
  for (std::size_t i = 0; i < count; ++i)
    input += (i == failed ? json({{"ids", json::array()}})
                          : json({{"ids", cases[i % cases.size()]["ids"]}}))
                 .dump() +
             "\n";
  const auto dir = own_scratch_dir("embed_npy");
  const auto npy = dir / "vectors.npy";
  std::vector<std::string> base = {"run",
                                   ids_pipeline("embed", "gpt2-cls"),
                                   "--input-format",
                                   "jsonl",
                                   "--threads",
                                   "2",
                                   "--set",
                                   "run.max_batch_size=7",
                                   "--set",
                                   "task.pooling=mean",
                                   "-q"};
  const RunResult lines = run_masque(base, input);
  CHECK(lines.exit_code == 1);
  auto with_npy = base;
  with_npy.insert(with_npy.end(), {"--set", "task.npy=" + npy.string()});
  const RunResult written = run_masque(with_npy, input);
  CHECK(written.exit_code == 1);
  INFO(written.err);
  const auto out = parse_jsonl(lines.out);
  REQUIRE(out.size() == count);
  // numpy reads the file as it is, with no hint about its layout.
  const std::string script =
      "import json, sys, numpy\n"
      "a = numpy.load(sys.argv[1])\n"
      "print(json.dumps({'shape': list(a.shape), 'dtype': str(a.dtype),\n"
      "                  'rows': [[None if x != x else float(x) for x in r] for r in a]}))\n";
  write_file(dir / "load.py", script);
  const std::string command = std::string(MASQUE_TORCH_PYTHON) + " " + (dir / "load.py").string() +
                              " " + npy.string() + " > " + (dir / "loaded.json").string();
  REQUIRE(std::system(command.c_str()) == 0);
  const json loaded = json::parse(read_file(dir / "loaded.json"));
  CHECK(loaded["shape"] == json({count, 16}));
  CHECK(loaded["dtype"] == "float32");
  for (std::size_t i = 0; i < count; ++i) {
    INFO("row " << i);
    const json& row = loaded["rows"][i];
    if (i == failed) {
      CHECK(out[i].contains("error"));
      CHECK(row[0].is_null());  // NaN
      continue;
    }
    REQUIRE(out[i]["embedding"].size() == 16);
    for (std::size_t j = 0; j < 16; ++j)
      CHECK(row[j].get<double>() == out[i]["embedding"][j].get<double>());  // the same floats
  }
}

TEST_CASE("embed: task.npy holds every row with -o and after --resume, and is never a run file",
          "[embed]") {
  // 3000 records; record 1700 is not UTF-8 (an error record, its row NaN) and --fail-fast stops
  // the first run there, the rows after it half written: --resume finishes both files.
  const std::size_t count = 3000, bad = 1700;
  std::string input;
  for (std::size_t i = 0; i < count; ++i)
    input += i == bad ? std::string("\xff\n") : "hello world line " + std::to_string(i) + "\n";
  const auto dir = own_scratch_dir("embed_npy_runs");
  write_file(dir / "in.txt", input);
  auto run = [&](const std::string& name, std::vector<std::string> more) {
    std::vector<std::string> args = {"run",
                                     "--task",
                                     "embed",
                                     "--model",
                                     fixture("bert-cls").string(),
                                     "-i",
                                     (dir / "in.txt").string(),
                                     "-q",
                                     "--set",
                                     "task.npy=" + (dir / (name + ".npy")).string()};
    args.insert(args.end(), more.begin(), more.end());
    return run_masque(args);
  };
  const auto whole = run("whole", {"-o", (dir / "whole.jsonl").string()});
  INFO(whole.err);
  CHECK(whole.exit_code == 1);
  const std::string npy = read_file(dir / "whole.npy");
  CHECK(npy.size() == 128 + count * 16 * sizeof(float));
  CHECK_THAT(npy.substr(0, 128), Catch::Contains("'shape': (3000, 16)"));

  const auto part = (dir / "part.jsonl").string();
  const auto stopped = run("part", {"-o", part, "--fail-fast"});
  CHECK(stopped.exit_code == 1);
  const auto resumed = run("part", {"-o", part, "--resume"});
  INFO(resumed.err);
  CHECK(resumed.exit_code == 0);
  CHECK(read_file(part) == read_file(dir / "whole.jsonl"));
  CHECK(read_file(dir / "part.npy") == npy);

  // Never the input, the output or the summary; not split over processes.
  const auto in = run("in", {"--set", "task.npy=" + (dir / "in.txt").string()});
  CHECK(in.exit_code == 2);
  CHECK_THAT(in.err, Catch::Contains("is the run's -i file"));
  CHECK(read_file(dir / "in.txt") == input);
  const auto out = run("out", {"-o", (dir / "out.npy").string()});
  CHECK(out.exit_code == 2);
  CHECK_THAT(out.err, Catch::Contains("is the run's -o file"));
  const auto shard = run("shard", {"-o", (dir / "shard.jsonl").string(), "--shard", "1/2"});
  CHECK(shard.exit_code == 2);
  CHECK_THAT(shard.err, Catch::Contains("this run is split over 2 (--shard or mpirun)"));
  // Refused before the run makes any file.
  for (const char* left :
       {"in.npy", "out.npy", "out.npy.parts", "shard.npy", "shard.jsonl", "shard.jsonl.masque-tmp"})
    CHECK_FALSE(std::filesystem::exists(dir / left));
}

TEST_CASE(
    "train: objective classify follows the float64 torch trainer for 100 steps, and "
    "classify loads what it writes",
    "[train]") {
  const auto dir = own_scratch_dir("classify_train");
  const json settings = json::parse(read_file(fixture("train/final.json")))["settings"];
  const std::string yaml =
      "task:\n"
      "  name: train\n"
      "  objective: classify\n"
      "  train_file: " +
      fixture("train/train.tsv").string() +
      "\n"
      "  output: " +
      (dir / "run").string() +
      "\n"
      "  batch_size: " +
      settings["batch_size"].dump() +
      "\n"
      "  steps: " +
      settings["steps"].dump() +
      "\n"
      "  lr: " +
      settings["lr"].dump() +
      "\n"
      "  warmup_steps: " +
      settings["warmup_steps"].dump() +
      "\n"
      "  weight_decay: " +
      settings["weight_decay"].dump() +
      "\n"
      "  max_grad_norm: " +
      settings["max_grad_norm"].dump() +
      "\n"
      "  schedule: linear\n"
      "  shuffle: false\n"
      "  dropout: 0\n"
      "  log_every: 0\n"
      "model: {plugin: bert, path: " +
      fixture("bert-cls").string() +
      "}\n"
      "tokenizer: {plugin: wordpiece, vocab: " +
      fixture("bert-cls/vocab.txt").string() +
      "}\n"
      "mask: {plugin: bidirectional}\n";
  write_file(dir / "train.yaml", yaml);
  const RunResult r = run_masque({"train", (dir / "train.yaml").string(), "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);

  const auto got = read_jsonl(dir / "run" / "metrics.jsonl");
  const auto want = read_jsonl(fixture("train/losses.jsonl"));
  REQUIRE(want.size() == 100);
  std::size_t step = 0;
  double worst = 0;
  for (const auto& line : got) {
    if (!line.contains("loss")) continue;
    INFO("step " << line["step"]);
    const json& w = want.at(step++);
    REQUIRE(line["step"] == w["step"]);
    CHECK(line["lr"].get<double>() == Approx(w["lr"].get<double>()).epsilon(1e-12));
    const double rel = std::abs(line["loss"].get<double>() - w["loss"].get<double>()) /
                       std::abs(w["loss"].get<double>());
    worst = std::max(worst, rel);
    CHECK(rel <= 1e-4);
  }
  CHECK(step == want.size());
  WARN("largest relative loss difference over 100 steps: " << worst);

  // The checkpoint is a BertForSequenceClassification folder that `classify` runs unchanged;
  // its logits are the trained reference network's.
  const auto out = run_ok({"--task", "classify", "--model", (dir / "run" / "last").string(),
                           "--input-format", "tsv", "--set", "task.return_logits=true"},
                          read_file(fixture("train/train.tsv")));
  const json final = json::parse(read_file(fixture("train/final.json")))["logits"];
  REQUIRE(out.size() == final.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    INFO("record " << i);
    for (std::size_t l = 0; l < 3; ++l)
      CHECK(std::abs(out[i]["logits"][l].get<double>() - final[i][l].get<double>()) <= 1e-3);
  }
}

TEST_CASE("train: objective classify refuses unknown labels and models without a label head",
          "[train]") {
  const auto dir = own_scratch_dir("classify_train_errors");
  write_file(dir / "train.tsv", "text\tlabel\nthe cat\tpositive\nthe dog\tmaybe\n");
  auto yaml = [&](const std::string& model, const std::string& extra) {
    return "task:\n  name: train\n  objective: classify\n  train_file: " +
           (dir / "train.tsv").string() + "\n  output: " + (dir / "run").string() +
           "\n  steps: 1\n  batch_size: 1\n  dropout: 0\n  log_every: 0\n" + extra +
           "model: {plugin: bert, path: " + model +
           "}\ntokenizer: {plugin: wordpiece, vocab: " + fixture("bert-cls/vocab.txt").string() +
           "}\nmask: {plugin: bidirectional}\n";
  };
  write_file(dir / "bad_label.yaml", yaml(fixture("bert-cls"), "  max_bad_records: 0\n"));
  RunResult r = run_masque({"train", (dir / "bad_label.yaml").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("unknown label 'maybe'") != std::string::npos);
  INFO(r.err);

  // A label index written as text (a TSV column) is the label at that index, as a JSON number.
  write_file(dir / "index.tsv", "text\tlabel\nthe cat\t0\nthe dog\t2\nthe bird\t7\n");
  write_file(dir / "index.yaml", yaml(fixture("bert-cls"), ""));
  r = run_masque({"train", (dir / "index.yaml").string(), "--set",
                  "task.train_file=" + (dir / "index.tsv").string(), "--set",
                  "task.output=" + (dir / "index_run").string()});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("2 usable records of 3") != std::string::npos);
  CHECK(r.err.find("unknown label '7'") != std::string::npos);

  // An MLM folder: its head is the vocabulary, not labels.
  std::filesystem::create_directories(dir / "mlm");
  json config = json::parse(read_file(fixture("bert-cls/config.json")));
  config["architectures"] = {"BertForMaskedLM"};
  write_file(dir / "mlm" / "config.json", config.dump());
  std::filesystem::remove_all(dir / "run");
  write_file(dir / "mlm.yaml", yaml((dir / "mlm").string(), ""));
  r = run_masque({"train", (dir / "mlm.yaml").string(), "-q"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("*ForSequenceClassification") != std::string::npos);
  INFO(r.err);
}
