// `masque train` on the rnn-seq2seq fixtures against the plain-torch f32 reference trainer
// (reference_rnn.py --trajectory): from the same weights, with shuffle off and no dropout,
// AdamW with weight decay, 10 warmup steps then linear decay and clipping at 1, the loss of every
// one of 100 steps agrees within 1e-4 relative, for LSTM and GRU, Bahdanau and Luong.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>

#include "rnn_support.hpp"
#include "test_support.hpp"

using namespace masque::test;
using namespace masque::test::rnn;

namespace {

constexpr int kSteps = 100;

std::vector<nlohmann::json> reference_steps(const std::string& name,
                                            const std::filesystem::path& dir) {
  const auto out = dir / "reference.jsonl";
  // Appended piece by piece: GCC 12 at -O2 warns falsely (-Warray-bounds) on this chain of +.
  std::string command = MASQUE_TORCH_PYTHON;
  for (const std::string& part :
       {(source_dir() / "tests/rnn/reference_rnn.py").string(), std::string("--trajectory"), name,
        std::to_string(kSteps), out.string()})
    command += " " + part;
  REQUIRE(std::system(command.c_str()) == 0);
  return read_jsonl(out);
}

std::string train_pipeline(const std::string& name, const std::filesystem::path& dir) {
  const auto fixture = fixture_dir(name);
  const auto file = dir / "train.yaml";
  write_file(file,
             "task:\n"
             "  name: train\n"
             "  objective: seq2seq\n"
             "  init: pretrained\n"
             "  train_file: " +
                 (fixture / "train.tsv").string() +
                 "\n"
                 "  columns: [source, target]\n"
                 "  output: " +
                 (dir / "run").string() +
                 "\n"
                 "  batch_size: 2\n"
                 "  shuffle: false\n"
                 "  steps: " +
                 std::to_string(kSteps) +
                 "\n"
                 "  lr: 3e-3\n"
                 "  warmup_steps: 10\n"
                 "  schedule: linear\n"
                 "  weight_decay: 0.01\n"
                 "  max_grad_norm: 1.0\n"
                 "  save_every: 0\n"
                 "model:\n  plugin: rnn-seq2seq\n  path: " +
                 fixture.string() +
                 "\n"
                 "tokenizer:\n  plugin: vocab\n  vocab: " +
                 (fixture / "source_vocab.txt").string() +
                 "\n"
                 "target_tokenizer:\n  plugin: vocab\n  vocab: " +
                 (fixture / "target_vocab.txt").string() +
                 "\n"
                 "mask:\n  plugin: causal\n");
  return file.string();
}

}  // namespace

TEST_CASE("trajectory: rnn-seq2seq, 100 steps of masque train equal the torch trainer",
          "[rnn][trajectory]") {
  for (const std::string& name : fixture_names()) {
    DYNAMIC_SECTION(name) {
      const auto dir = own_scratch_dir("rnn-trajectory-" + name);
      std::filesystem::remove_all(dir / "run");
      const std::vector<nlohmann::json> want = reference_steps(name, dir);
      REQUIRE(want.size() == kSteps);
      const auto run = run_masque({"train", train_pipeline(name, dir), "-q", "--threads", "1"});
      INFO(run.err);
      REQUIRE(run.exit_code == 0);
      std::vector<nlohmann::json> got;
      for (const auto& line : read_jsonl(dir / "run" / "metrics.jsonl"))
        if (line.contains("loss")) got.push_back(line);
      REQUIRE(got.size() == kSteps);
      double worst = 0;
      for (int s = 0; s < kSteps; ++s) {
        INFO(name << " step " << s + 1);
        CHECK(got[s].at("tokens") == want[s].at("tokens"));
        CHECK(got[s].at("lr").get<double>() ==
              Approx(want[s].at("lr").get<double>()).epsilon(1e-9));
        const double loss = got[s].at("loss").get<double>();
        const double expected_loss = want[s].at("loss").get<double>();
        worst = std::max(worst, std::abs(loss - expected_loss) / std::abs(expected_loss));
        CHECK(loss == Approx(expected_loss).epsilon(1e-4));
        CHECK(got[s].at("grad_norm").get<double>() ==
              Approx(want[s].at("grad_norm").get<double>()).epsilon(1e-3));
      }
      WARN(name << ": largest relative loss difference over " << kSteps << " steps: " << worst
                << "; loss " << want.front().at("loss").get<double>() << " -> "
                << want.back().at("loss").get<double>());
    }
  }
}
