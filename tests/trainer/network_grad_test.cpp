// Every parameter's gradient after one step equals float64 PyTorch autograd
// (tests/trainer/reference_trainer.py, plain torch written from the upstream models) within
// 1e-5 relative, for every trainable model of ../shared under every mask it supports. The
// reference lays out its batches itself from the raw token lists, so the objectives' layouts are
// checked on the way (mlm's random corruption is handed to it as a given layout).
#include <catch2/catch.hpp>

#include <cmath>

#include "masque/train/loss.hpp"
#include "masque/train/network.hpp"
#include "masque/train/objective.hpp"
#include "test_support.hpp"
#include "trainer_support.hpp"

using namespace masque;
using namespace masque::train;
using namespace masque::test::trainer;
using Json = nlohmann::json;

namespace {

// masque's loss and gradients for `batch`, against one float64 step of the reference on `plan`.
void check_gradients(LoadedModel& m, const TrainingBatch& batch, Json plan,
                     const std::string& name) {
  plan["dtype"] = "float64";
  plan["steps"] = 1;
  plan["lr"] = 0.0;
  plan["max_grad_norm"] = 0.0;
  if (!plan.contains("batch_size")) plan["batch_size"] = plan["examples"].size();
  const ReferenceRun ref = run_reference(plan, "grad_" + name, true);

  TrainableTransformer net(m.spec, m.params);
  auto tape = net.make_tape();
  Tensor logits;
  net.forward(batch.inputs, batch.source.batch > 0 ? &batch.source : nullptr, batch.rows, *tape,
              logits);
  Tensor dlogits;
  const CrossEntropyResult ce =
      cross_entropy(logits, batch.labels, static_cast<double>(batch.count()),
                    {.weights = batch.weights}, &dlogits);
  CHECK(ce.loss == Approx(ref.steps.at(0).at("loss").get<double>()).epsilon(1e-6));
  m.params.zero_grads();
  net.backward(*tape, dlogits);

  // Each tensor within 1e-5 of its own largest gradient; a gradient that is zero in exact
  // arithmetic (a key bias: softmax ignores a constant added to all of a query's scores) is held
  // to 1e-7 of the model's largest gradient instead, f32 rounding being all that is left of it.
  double global = 0;
  for (const auto& e : m.params.entries()) {
    const Tensor expected = ref.grads.get_f32(e.name);
    for (std::int64_t i = 0; i < expected.numel(); ++i)
      global = std::max(global, std::abs(double{expected.f32()[i]}));
  }
  for (const auto& e : m.params.entries()) {
    const Tensor expected = ref.grads.get_f32(e.name);
    REQUIRE(expected.numel() == e.grad.numel());
    double worst = 0, scale = 0;
    for (std::int64_t i = 0; i < expected.numel(); ++i) {
      worst = std::max(worst, std::abs(double{e.grad.f32()[i]} - expected.f32()[i]));
      scale = std::max(scale, std::abs(double{expected.f32()[i]}));
    }
    INFO(e.name << ": max |masque - torch| = " << worst << ", max |torch| = " << scale
                << ", model's max |torch| = " << global);
    CHECK(worst <= 1e-5 * scale + 1e-7 * global);
  }
}

void check_case(const Case& c) {
  LoadedModel m = load_model(c.plugin, c.folder);
  CaseObjective o = make_objective(c, m.model->info());
  check_gradients(m, o.objective->lay_out(pointers(c.examples), 0), c.plan, c.name);
}

}  // namespace

TEST_CASE("gradients: BERT under the seq2seq (UniLM) and causal masks, objective seq2seq") {
  check_case(unilm_case("seq2seq"));
  check_case(unilm_case("causal"));
}

TEST_CASE("gradients: BERT under the permutation mask with its query stream, objective plm") {
  check_case(plm_case());
}

// The reference draws the noise itself from the seed, epoch and line (docs/training.md), so the
// objective's corruption, its 1/t weights, its divisor and the BD3-LM layout (a noised copy
// seeing its own block and the clean blocks before it) are all checked.
TEST_CASE(
    "gradients: BERT under the bidirectional and block-causal masks with objective diffusion") {
  for (const char* mask : {"bidirectional", "block-causal"}) {
    for (int slack : {-1, 2}) {
      Case c = diffusion_case(mask, 4, slack);
      c.name += "-slack" + std::to_string(slack);
      LoadedModel m = load_model(c.plugin, c.folder);
      CaseObjective o = make_objective(c, m.model->info());
      const TrainingBatch batch = o.objective->lay_out(pointers(c.examples), 0);
      INFO(c.name);
      REQUIRE(!batch.rows.empty());
      REQUIRE(batch.weights.size() == batch.rows.size());
      CHECK(batch.count() > static_cast<std::int64_t>(batch.rows.size()) / 2);
      check_gradients(m, batch, c.plan, c.name);
    }
  }
}

TEST_CASE("gradients: GPT-2 and Llama under the causal mask, objective causal-lm") {
  check_case(causal_case("gpt2"));
  check_case(causal_case("llama"));
}

TEST_CASE("gradients: the encoder-decoder, objective seq2seq (teacher forcing)") {
  check_case(encdec_case());
}

TEST_CASE("gradients: BERT under the bidirectional mask, objective mlm") {
  Case c = causal_case("gpt2");  // token lists only; the model and objective follow
  c.plugin = "bert";
  c.folder = test::shared_dir() / "models/tiny-bert-chinese";
  c.objective = {.kind = ObjectiveKind::mlm, .mlm_probability = 0.5, .seed = 3};
  c.mask = "bidirectional";
  for (std::size_t i = 0; i < c.examples.size(); ++i) {
    c.examples[i].ids = tokens(static_cast<int>(6 + 3 * i), static_cast<int>(i), 21128, 670);
    c.examples[i].ids.insert(c.examples[i].ids.begin(), 101);
    c.examples[i].ids.push_back(102);
  }
  LoadedModel m = load_model(c.plugin, c.folder);
  CaseObjective o = make_objective(c, m.model->info());
  const TrainingBatch batch = o.objective->lay_out(pointers(c.examples), 0);
  REQUIRE(!batch.rows.empty());
  // The corruption is masque's own (seeded); the reference gets the laid-out batch.
  const Batch& b = batch.inputs;
  Json given = {{"ids", Json::array()},  {"positions", Json::array()}, {"types", Json::array()},
                {"rank", Json::array()}, {"role", Json::array()},      {"rows", batch.rows},
                {"labels", batch.labels}};
  auto row = [&](const auto& v, std::int32_t r) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    return std::vector<T>(v.begin() + r * b.length, v.begin() + (r + 1) * b.length);
  };
  for (std::int32_t r = 0; r < b.batch; ++r) {
    given["ids"].push_back(row(b.ids, r));
    given["positions"].push_back(row(b.positions, r));
    given["types"].push_back(row(b.token_types, r));
    given["rank"].push_back(row(b.attention.rank, r));
    std::vector<int> roles;
    for (TokenRole role : row(b.attention.role, r)) roles.push_back(static_cast<int>(role));
    given["role"].push_back(roles);
  }
  const Json plan = {{"model", c.folder.string()},
                     {"objective", "given"},
                     {"batch_size", 1},
                     {"examples", Json::array({given})}};
  check_gradients(m, batch, plan, "mlm");
}
