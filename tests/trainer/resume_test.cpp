// What a checkpoint holds is enough to continue exactly, and what it writes is a model folder
// the inference side loads unchanged.
#include <catch2/catch.hpp>

#include <fstream>

#include "masque/decoding.hpp"
#include "masque/train/checkpoint.hpp"
#include "masque/train/trainer.hpp"
#include "masque/transformer/model.hpp"
#include "test_support.hpp"
#include "trainer_support.hpp"

using namespace masque;
using namespace masque::train;
using namespace masque::test::trainer;
namespace fs = std::filesystem;

namespace {

TrainerOptions options(std::int64_t total) {
  return {
      .batch_size = 2,
      .accumulation = 2,
      .shuffle = true,
      .seed = 5,
      .schedule = {
          .kind = ScheduleKind::linear, .base_lr = 1e-3, .warmup_steps = 3, .total_steps = total}};
}

// A checkpoint as the trainer writes one: the model folder, its optimizer and its cursor.
void save_checkpoint(const fs::path& dir, const Case& c, const ParameterSet& params,
                     const Trainer& trainer) {
  fs::copy_file(c.folder / "config.json", dir / "config.json");
  params.save(dir / "model.safetensors");
  trainer.save_optimizer(dir / "optimizer.bin");
  test::write_file(dir / "trainer_state.json", trainer.state().dump());
}

// Trains 12 steps whole, and 5 + a resume from a checkpoint + 7 (the network's dropout on or
// off); returns the whole run's losses.
std::vector<double> check_resume(const NetworkOptions& net_options, const std::string& name,
                                 const Case& c = unilm_case("seq2seq", 9)) {
  // 9 examples: epochs end inside steps
  constexpr int kSteps = 12, kFirst = 5;

  LoadedModel whole = load_model(c.plugin, c.folder);
  CaseObjective o = make_objective(c, whole.model->info());
  TrainableTransformer whole_net(whole.spec, whole.params, net_options);
  Trainer uninterrupted(whole_net, whole.params, *o.objective, c.examples, options(kSteps));
  std::vector<double> expected;
  for (int s = 0; s < kSteps; ++s) expected.push_back(uninterrupted.step().loss);

  LoadedModel first = load_model(c.plugin, c.folder);
  TrainableTransformer first_net(first.spec, first.params, net_options);
  Trainer interrupted(first_net, first.params, *o.objective, c.examples, options(kSteps));
  for (int s = 0; s < kFirst; ++s) CHECK(interrupted.step().loss == expected[s]);
  CheckpointStore store(test::scratch_dir("resume_exact_" + name), 2);
  store.save(kFirst,
             [&](const fs::path& dir) { save_checkpoint(dir, c, first.params, interrupted); });

  // A new process: the model from the checkpoint folder, the cursor and moments restored.
  const fs::path checkpoint = CheckpointStore::resolve_resume(store.root());
  LoadedModel resumed = load_model(c.plugin, checkpoint);
  TrainableTransformer resumed_net(resumed.spec, resumed.params, net_options);
  Trainer continued(resumed_net, resumed.params, *o.objective, c.examples, options(kSteps));
  continued.restore(nlohmann::json::parse(test::read_file(checkpoint / "trainer_state.json")),
                    checkpoint / "optimizer.bin");
  CHECK(continued.steps_done() == kFirst);
  for (int s = kFirst; s < kSteps; ++s) {
    INFO("step " << s + 1);
    CHECK(continued.step().loss == expected[s]);  // bit for bit: same data, same arithmetic
  }

  // Other data is refused, naming what differs.
  std::vector<Example> fewer(c.examples.begin(), c.examples.end() - 1);
  Trainer other(resumed_net, resumed.params, *o.objective, fewer, options(kSteps));
  CHECK_THROWS_WITH(
      other.restore(nlohmann::json::parse(test::read_file(checkpoint / "trainer_state.json")),
                    checkpoint / "optimizer.bin"),
      Catch::Contains("trained on 9 usable records, the data has 8"));
  return expected;
}

}  // namespace

TEST_CASE("resume: a run continued from a checkpoint equals an uninterrupted one, step for step") {
  const std::vector<double> plain = check_resume({}, "plain");
  // With dropout (seeded by step and record) a resumed run draws the same masks.
  const std::vector<double> dropped = check_resume(
      {.dropout = {.embedding = 0.1f, .residual = 0.1f, .attention = 0.1f}}, "dropout");
  CHECK(dropped != plain);
}

// The diffusion noise is a function of (seed, epoch, line): a resumed run draws it again.
TEST_CASE("resume: a diffusion run under block-causal continues step for step") {
  check_resume({}, "diffusion", diffusion_case("block-causal", 9, 4));
}

TEST_CASE("resume: a trained folder loads in the model plugin and scores as the trainer said") {
  const Case c = unilm_case("seq2seq", 6);
  LoadedModel m = load_model(c.plugin, c.folder);
  CaseObjective o = make_objective(c, m.model->info());
  TrainableTransformer net(m.spec, m.params);
  Trainer trainer(net, m.params, *o.objective, c.examples, options(4));
  for (int s = 0; s < 4; ++s) trainer.step();
  const EvalResult reported = trainer.evaluate(c.examples, 4);

  const fs::path dir = test::scratch_dir("trained_folder");
  save_checkpoint(dir, c, m.params, trainer);
  LoadedModel loaded = load_model(c.plugin, dir);  // the inference plugin, as masque run loads it
  double loss_sum = 0;
  std::int64_t tokens = 0;
  const TrainingBatch batch = o.objective->lay_out(pointers(c.examples), 0);
  Batch inputs = batch.inputs;
  inputs.output_rows = batch.rows;
  const ForwardResult out = loaded.model->forward(inputs);
  for (std::size_t i = 0; i < batch.rows.size(); ++i) {
    const std::int64_t vocab = out.logits.dim(-1);
    const std::span<const float> row(out.logits.f32() + static_cast<std::int64_t>(i) * vocab,
                                     static_cast<std::size_t>(vocab));
    loss_sum += decoding::log_sum_exp(row) - row[batch.labels[i]];
    ++tokens;
  }
  CHECK(tokens == reported.tokens);
  CHECK(loss_sum / static_cast<double>(tokens) == Approx(reported.loss).epsilon(1e-5));
  CHECK(reported.loss < trainer.evaluate(c.examples, 4).loss + 1e-12);  // evaluation is pure
}

TEST_CASE("resume: a step that throws leaves the data cursor and the parameters as they were") {
  Case c = unilm_case("seq2seq", 4);
  c.examples[2].ids[1] = 1 << 24;  // no embedding row: only the step finds it (prepare would)
  LoadedModel m = load_model(c.plugin, c.folder);
  CaseObjective o = make_objective(c, m.model->info());
  TrainableTransformer net(m.spec, m.params);
  TrainerOptions plain = options(4);
  plain.accumulation = 1;
  plain.shuffle = false;
  Trainer trainer(net, m.params, *o.objective, c.examples, plain);
  trainer.step();
  const nlohmann::json before = trainer.state();
  const std::vector<float> weights(m.params[0].value.f32(),
                                   m.params[0].value.f32() + m.params[0].value.numel());
  CHECK_THROWS(trainer.step());
  // A checkpoint written now is step 1's: resuming from it would not skip the batch.
  CHECK(trainer.state() == before);
  CHECK(std::equal(weights.begin(), weights.end(), m.params[0].value.f32()));
  CHECK_THROWS(trainer.step());
  CHECK(trainer.state() == before);
}
