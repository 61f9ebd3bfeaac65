// bf16 training (NetworkOptions::matmul_dtype = bf16): the linear layers' products take bfloat16
// operands (about 3 significant digits) with f32 accumulation, master weights and optimizer
// state, so its loss trajectory follows the f32 one (itself exact against PyTorch, see
// trajectory_test.cpp) within a loose tolerance rather than to the last bits. Where the CPU has
// no bf16 instructions the network refuses bf16 with a ConfigError, and the trajectory test is
// skipped with a message.
#include <catch2/catch.hpp>

#include "masque/error.hpp"
#include "masque/train/linear.hpp"
#include "masque/train/trainer.hpp"
#include "test_support.hpp"
#include "trainer_support.hpp"

using namespace masque;
using namespace masque::train;
using namespace masque::test::trainer;

namespace {

constexpr int kSteps = 50;
// bf16 rounds every product's operands to 8 significant bits; over 50 AdamW steps of a tiny
// BERT (lr 2e-3, loss 9.9 -> 7.1) the per-step loss stays within 2 % of f32's (measured on a
// Zen 4: 2.3e-4 at worst).
constexpr double kTolerance = 2e-2;

std::vector<double> losses(const Case& c, DType matmul_dtype) {
  LoadedModel m = load_model(c.plugin, c.folder);
  CaseObjective o = make_objective(c, m.model->info());
  TrainableTransformer net(m.spec, m.params, {.matmul_dtype = matmul_dtype});
  TrainerOptions options{.batch_size = 2,
                         .accumulation = 2,
                         .shuffle = false,
                         .schedule = {.kind = ScheduleKind::linear,
                                      .base_lr = 2e-3,
                                      .warmup_steps = 5,
                                      .total_steps = kSteps},
                         .max_grad_norm = 1.0};
  Trainer trainer(net, m.params, *o.objective, c.examples, options);
  std::vector<double> out;
  for (int s = 0; s < kSteps; ++s) out.push_back(trainer.step().loss);
  return out;
}

}  // namespace

TEST_CASE("bf16 training follows the f32 loss trajectory (UniLM BERT, 50 steps)") {
  if (!bf16_matmul_supported()) {
    WARN("skipped: this CPU has no AVX-512 BF16 or AMX instructions, so bf16 training is refused");
    return;
  }
  const Case c = unilm_case("seq2seq", 7);
  const std::vector<double> f32 = losses(c, DType::f32);
  const std::vector<double> bf16 = losses(c, DType::bf16);
  double worst = 0;
  for (int s = 0; s < kSteps; ++s) {
    INFO("step " << s + 1 << ": f32 " << f32[s] << ", bf16 " << bf16[s]);
    const double rel = std::abs(bf16[s] - f32[s]) / std::abs(f32[s]);
    worst = std::max(worst, rel);
    CHECK(rel <= kTolerance);
  }
  // The products really ran in bf16: the trajectories are close, not equal.
  CHECK(worst > 0.0);
  // And the run learned: the loss fell as f32's does.
  CHECK(bf16.back() < 0.9 * bf16.front());
  WARN("bf16 vs f32 over " << kSteps << " steps: largest relative loss difference " << worst
                           << "; loss " << bf16.front() << " -> " << bf16.back());
}

TEST_CASE("a matmul_dtype other than f32 or bf16 is a ConfigError") {
  const Case c = unilm_case("seq2seq", 1);
  LoadedModel m = load_model(c.plugin, c.folder);
  CHECK_THROWS_AS(TrainableTransformer(m.spec, m.params, {.matmul_dtype = DType::f16}),
                  ConfigError);
  if (!bf16_matmul_supported())
    CHECK_THROWS_WITH(TrainableTransformer(m.spec, m.params, {.matmul_dtype = DType::bf16}),
                      Catch::Contains("bf16"));
}
