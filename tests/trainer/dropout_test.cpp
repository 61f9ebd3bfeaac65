// Dropout in the trainable network (issue 18): with the masks masque draws, the forward and
// backward equal float64 torch autograd (tests/trainer/reference_trainer.py, handed the same
// masks) within 1e-5; rate 0 and evaluation change nothing; the masks are seeded, independent of
// the thread count, drop the right fraction and scale by 1 / (1 - p).
#include <catch2/catch.hpp>

#include <cmath>

#include "masque/safetensors_writer.hpp"
#include "masque/train/dropout.hpp"
#include "masque/train/loss.hpp"
#include "masque/train/network.hpp"
#include "masque/train/trainer.hpp"
#include "registry.hpp"
#include "test_support.hpp"
#include "trainer_support.hpp"

using namespace masque;
using namespace masque::train;
using namespace masque::test::trainer;
using Json = nlohmann::json;

namespace {

constexpr DropoutRates kRates{.embedding = 0.2f, .residual = 0.25f, .attention = 0.3f};

DropoutContext context_for(const std::vector<Example>& examples, std::uint64_t seed,
                           std::uint64_t step) {
  DropoutContext c{.seed = seed, .step = step, .records = {}};
  for (const Example& e : examples) c.records.push_back(dropout_record(0, e.line));
  return c;
}

// The factors masque draws at a hidden site, [B, T, C] in the batch's padded layout.
Tensor hidden_mask(const DropoutContext& c, std::uint32_t site, float p, std::int64_t batch,
                   std::int64_t length, std::int64_t width) {
  Tensor m({batch, length, width});
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < length; ++t)
      dropout_factors(dropout_key(c, static_cast<std::size_t>(b), site), p,
                      hidden_element(t, width, 0), width, m.f32() + (b * length + t) * width);
  return m;
}

// ... and on attention probabilities, [B, H, Tq, Tk].
Tensor probs_mask(const DropoutContext& c, std::uint32_t site, float p, std::int64_t batch,
                  std::int64_t heads, std::int64_t length, std::int64_t keys = -1) {
  if (keys < 0) keys = length;
  Tensor m({batch, heads, length, keys});
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < length; ++i)
        dropout_factors(dropout_key(c, static_cast<std::size_t>(b), site), p,
                        attention_element(h, i, 0), keys,
                        m.f32() + ((b * heads + h) * length + i) * keys);
  return m;
}

// An encoder-decoder's sites: "SIDE.embeddings", "SIDE.layer.L.SUB.output|probs",
// "SIDE.layer.L.ffn.activation" (the reference's names).
std::vector<NamedTensor> encdec_masks_of(const transformer::TransformerSpec& spec,
                                         const TrainingBatch& batch, const DropoutContext& c,
                                         const DropoutRates& r) {
  std::vector<NamedTensor> masks;
  const std::int64_t b = batch.inputs.batch, s_len = batch.source.length;
  for (const int stack : {1, 0}) {
    const transformer::StackSpec& st = stack == 1 ? spec.encoder : spec.decoder;
    const std::string side = stack == 1 ? "encoder" : "decoder";
    const std::int64_t len = stack == 1 ? s_len : batch.inputs.length, width = st.hidden;
    masks.push_back(
        {side + ".embeddings", hidden_mask(c, dropout_site(stack, 0, DropoutPlace::embedding),
                                           r.embedding, b, len, width)});
    for (std::size_t l = 0; l < st.blocks.size(); ++l) {
      const int layer = static_cast<int>(l);
      const std::string name = side + ".layer." + std::to_string(l) + ".";
      const auto& block = st.blocks[l];
      auto hidden = [&](DropoutPlace place, float p, std::int64_t w) {
        return hidden_mask(c, dropout_site(stack, layer, place), p, b, len, w);
      };
      masks.push_back(
          {name + "self_attn.output", hidden(DropoutPlace::attention_output, r.residual, width)});
      masks.push_back({name + "self_attn.probs",
                       probs_mask(c, dropout_site(stack, layer, DropoutPlace::attention_probs),
                                  r.attention, b, block.attention.heads, len)});
      if (block.has_cross()) {
        masks.push_back(
            {name + "encoder_attn.output", hidden(DropoutPlace::cross_output, r.residual, width)});
        masks.push_back({name + "encoder_attn.probs",
                         probs_mask(c, dropout_site(stack, layer, DropoutPlace::cross_probs),
                                    r.attention, b, block.cross_attention.heads, len, s_len)});
      }
      masks.push_back({name + "ffn.output", hidden(DropoutPlace::mlp_output, r.residual, width)});
      masks.push_back({name + "ffn.activation", hidden(DropoutPlace::activation, r.activation,
                                                       block.mlp.in.at(0).out_features())});
    }
  }
  return masks;
}

// Every site of a decoder-only / encoder-only stack, named as the reference names them.
std::vector<NamedTensor> masks_of(const transformer::TransformerSpec& spec, const Batch& batch,
                                  const DropoutContext& c, const DropoutRates& r) {
  const std::int64_t width = spec.decoder.hidden, b = batch.batch, t = batch.length;
  std::vector<NamedTensor> masks;
  if (r.embedding > 0)
    masks.push_back({"embeddings", hidden_mask(c, dropout_site(0, 0, DropoutPlace::embedding),
                                               r.embedding, b, t, width)});
  for (std::size_t l = 0; l < spec.decoder.blocks.size(); ++l) {
    const int layer = static_cast<int>(l);
    const std::string name = "layer." + std::to_string(l) + ".";
    if (r.attention > 0)
      masks.push_back({name + "attention.probs",
                       probs_mask(c, dropout_site(0, layer, DropoutPlace::attention_probs),
                                  r.attention, b, spec.decoder.blocks[l].attention.heads, t)});
    if (r.residual > 0) {
      masks.push_back({name + "attention.output",
                       hidden_mask(c, dropout_site(0, layer, DropoutPlace::attention_output),
                                   r.residual, b, t, width)});
      masks.push_back(
          {name + "output", hidden_mask(c, dropout_site(0, layer, DropoutPlace::mlp_output),
                                        r.residual, b, t, width)});
    }
  }
  return masks;
}

struct Step {
  double loss = 0;
  std::vector<Tensor> grads;
};

Step masque_step(LoadedModel& m, const TrainingBatch& batch, const DropoutRates& rates,
                 const DropoutContext* context, Tensor* logits_out = nullptr) {
  TrainableTransformer net(m.spec, m.params, NetworkOptions{.dropout = rates});
  auto tape = net.make_tape();
  Tensor logits, dlogits;
  net.forward(batch.inputs, batch.source.batch > 0 ? &batch.source : nullptr, batch.rows, *tape,
              logits, context);
  if (logits_out) *logits_out = logits.clone();
  Step s;
  s.loss =
      cross_entropy(logits, batch.labels, static_cast<double>(batch.labels.size()), {}, &dlogits)
          .loss;
  m.params.zero_grads();
  net.backward(*tape, dlogits);
  for (const auto& e : m.params.entries()) s.grads.push_back(e.grad.clone());
  return s;
}

// masque with dropout against one float64 step of the reference given the same masks.
void check_against_torch(const Case& c, const DropoutRates& rates) {
  LoadedModel m = load_model(c.plugin, c.folder);
  CaseObjective o = make_objective(c, m.model->info());
  const TrainingBatch batch = o.objective->lay_out(pointers(c.examples), 0);
  const DropoutContext context = context_for(c.examples, 11, 3);

  const std::filesystem::path masks = test::scratch_dir("dropout_" + c.name) / "masks.safetensors";
  write_safetensors(masks, m.spec.encoder_decoder()
                               ? encdec_masks_of(m.spec, batch, context, rates)
                               : masks_of(m.spec, batch.inputs, context, rates));
  Json plan = c.plan;
  plan["dtype"] = "float64";
  plan["steps"] = 1;
  plan["lr"] = 0.0;
  plan["max_grad_norm"] = 0.0;
  plan["batch_size"] = plan["examples"].size();
  plan["dropout_masks"] = masks.string();
  const ReferenceRun ref = run_reference(plan, "dropout_" + c.name, true);

  const Step plain = masque_step(m, batch, {}, nullptr);
  const Step dropped = masque_step(m, batch, rates, &context);
  const double expected = ref.steps.at(0).at("loss").get<double>();
  CHECK(dropped.loss == Approx(expected).epsilon(1e-6));
  CHECK(std::abs(dropped.loss - plain.loss) > 1e-3);  // the masks did something

  double global = 0;
  for (const auto& e : m.params.entries()) {
    const Tensor t = ref.grads.get_f32(e.name);
    for (std::int64_t i = 0; i < t.numel(); ++i)
      global = std::max(global, std::abs(double{t.f32()[i]}));
  }
  for (std::size_t k = 0; k < m.params.size(); ++k) {
    const auto& e = m.params[k];
    const Tensor t = ref.grads.get_f32(e.name);
    REQUIRE(t.numel() == dropped.grads[k].numel());
    double worst = 0, scale = 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      worst = std::max(worst, std::abs(double{dropped.grads[k].f32()[i]} - t.f32()[i]));
      scale = std::max(scale, std::abs(double{t.f32()[i]}));
    }
    INFO(e.name << ": max |masque - torch| = " << worst << ", max |torch| = " << scale);
    CHECK(worst <= 1e-5 * scale + 1e-7 * global);
  }
}

bool same(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::equal(a.f32(), a.f32() + a.numel(), b.f32());
}

TrainerOptions trainer_options(std::uint64_t seed, int threads) {
  return {.batch_size = 4,
          .shuffle = true,
          .seed = seed,
          .schedule = {.kind = ScheduleKind::constant, .base_lr = 1e-3, .total_steps = 6},
          .threads = threads};
}

std::vector<double> losses(const Case& c, const DropoutRates& rates, std::uint64_t seed,
                           int threads) {
  LoadedModel m = load_model(c.plugin, c.folder);
  CaseObjective o = make_objective(c, m.model->info());
  TrainableTransformer net(m.spec, m.params, NetworkOptions{.dropout = rates});
  Trainer trainer(net, m.params, *o.objective, c.examples, trainer_options(seed, threads));
  std::vector<double> out;
  for (int s = 0; s < 6; ++s) out.push_back(trainer.step().loss);
  out.push_back(trainer.evaluate(c.examples, 4).loss);  // no dropout: deterministic
  return out;
}

}  // namespace

TEST_CASE("dropout: BERT under the UniLM mask equals float64 torch given the same masks") {
  check_against_torch(unilm_case("seq2seq", 4), kRates);
}

TEST_CASE("dropout: GPT-2 under the causal mask equals float64 torch given the same masks") {
  check_against_torch(causal_case("gpt2", 4), kRates);
}

TEST_CASE("dropout: Llama's attention dropout equals float64 torch given the same masks") {
  check_against_torch(causal_case("llama", 3), {.attention = 0.3f});
}

TEST_CASE("dropout: the encoder-decoder equals float64 torch given the same masks") {
  check_against_torch(
      encdec_case(4),
      {.embedding = 0.2f, .residual = 0.25f, .attention = 0.3f, .activation = 0.15f});
}

TEST_CASE("dropout: rate 0, or no context (evaluation), computes exactly as without dropout") {
  const Case c = unilm_case("seq2seq", 4);
  LoadedModel m = load_model(c.plugin, c.folder);
  CaseObjective o = make_objective(c, m.model->info());
  const TrainingBatch batch = o.objective->lay_out(pointers(c.examples), 0);
  const DropoutContext context = context_for(c.examples, 11, 3);
  Tensor plain_logits, zero_logits, eval_logits;
  const Step plain = masque_step(m, batch, {}, nullptr, &plain_logits);
  const Step zero = masque_step(m, batch, {}, &context, &zero_logits);
  const Step eval = masque_step(m, batch, kRates, nullptr, &eval_logits);
  CHECK(same(plain_logits, zero_logits));
  CHECK(same(plain_logits, eval_logits));
  for (std::size_t k = 0; k < plain.grads.size(); ++k) {
    CHECK(same(plain.grads[k], zero.grads[k]));
    CHECK(same(plain.grads[k], eval.grads[k]));
  }
}

TEST_CASE("dropout: seeded per (seed, step, record), the same with 1 and 2 threads") {
  const Case c = unilm_case("seq2seq", 9);
  const std::vector<double> a = losses(c, kRates, 5, 1);
  CHECK(losses(c, kRates, 5, 1) == a);  // same seed: the same run, bit for bit
  const std::vector<double> two = losses(c, kRates, 5, 2);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(two[i] == Approx(a[i]).epsilon(1e-5));
  const std::vector<double> other = losses(c, kRates, 6, 1);
  CHECK(other[0] != a[0]);  // another seed, other masks (and another shuffle)
  const std::vector<double> none = losses(c, {}, 5, 1);
  CHECK(none[0] != a[0]);
}

TEST_CASE("dropout: the fraction dropped is p and kept values scale by 1 / (1 - p)") {
  constexpr std::int64_t n = 1 << 20;
  std::vector<float> x(n), y(n), pieces(n);
  for (std::int64_t i = 0; i < n; ++i) x[i] = 1.0f + static_cast<float>(i % 97);
  const DropoutKey key{.seed = 42, .step = 7, .tensor = 3};
  for (const float p : {0.1f, 0.25f, 0.5f}) {
    dropout_span(key, p, 0, x.data(), n, y.data());
    std::int64_t dropped = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (y[i] == 0.0f)
        ++dropped;
      else
        REQUIRE(y[i] == x[i] * (1.0f / (1.0f - p)));
    }
    const double fraction = static_cast<double>(dropped) / n;
    INFO("p " << p << ": dropped " << fraction);
    CHECK(std::abs(fraction - p) < 0.003);  // ~6 standard deviations at n = 2^20
    // A span is a window on one numbering: pieces at odd offsets give the same elements.
    dropout_span(key, p, 0, x.data(), 1001, pieces.data());
    dropout_span(key, p, 1001, x.data() + 1001, n - 1001, pieces.data() + 1001);
    CHECK(pieces == y);
    // The factors are the same mask; another step or site draws another.
    std::vector<float> f(4096), g(4096);
    dropout_factors(key, p, 0, 4096, f.data());
    for (std::int64_t i = 0; i < 4096; ++i) REQUIRE(f[i] * x[i] == y[i]);
    dropout_factors({.seed = 42, .step = 8, .tensor = 3}, p, 0, 4096, g.data());
    CHECK(f != g);
  }
}

namespace {
// The dropout keys a built model plugin declares.
const ModelTraits& traits_of(const char* plugin) {
  return *test::build_registry().find(PluginKind::model, plugin).descriptor->model;
}
}  // namespace

TEST_CASE("dropout: rates from config.json, by model type, and the task's override") {
  const DropoutRates bert = dropout_rates_of(
      traits_of("bert"),
      Json::parse(test::read_file(test::shared_dir() / "models/tiny-bert-chinese/config.json")));
  CHECK(bert.embedding == 0.1f);
  CHECK(bert.residual == 0.1f);
  CHECK(bert.attention == 0.1f);
  CHECK(bert.activation == 0.0f);
  const DropoutRates gpt2 = dropout_rates_of(
      traits_of("gpt2"),
      {{"model_type", "gpt2"}, {"embd_pdrop", 0.1}, {"resid_pdrop", 0.2}, {"attn_pdrop", 0.3}});
  CHECK((gpt2.embedding == 0.1f && gpt2.residual == 0.2f && gpt2.attention == 0.3f));
  const DropoutRates llama = dropout_rates_of(
      traits_of("llama"), {{"model_type", "llama"}, {"attention_dropout", 0.0}}, 0.2f);
  CHECK((llama.attention == 0.2f && llama.embedding == 0.0f && llama.residual == 0.0f));
  const DropoutRates encdec = dropout_rates_of(traits_of("encoder-decoder"),
                                               {{"architecture", "transformer-encoder-decoder"},
                                                {"dropout", 0.1},
                                                {"activation_dropout", 0.05}});
  CHECK((encdec.residual == 0.1f && encdec.activation == 0.05f && encdec.attention == 0.0f));
  CHECK(!dropout_rates_of(traits_of("bert"), {{"model_type", "bert"}}).any());
  CHECK_THROWS_WITH(
      dropout_rates_of(traits_of("bert"), {{"model_type", "bert"}, {"hidden_dropout_prob", 1.5}}),
      Catch::Contains("hidden_dropout_prob must be in [0, 1)"));
  CHECK_THROWS_WITH(
      dropout_rates_of(traits_of("gpt2"), {{"model_type", "gpt2"}, {"attn_pdrop", "x"}}),
      Catch::Contains("attn_pdrop must be a number"));
}
