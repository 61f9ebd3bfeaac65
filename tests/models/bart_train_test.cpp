// The bart, mbart and m2m_100 specs under the trainer (masque train's TrainableTransformer):
// the teacher-forced logits of the seq2seq objective's layout equal bart_reference.py's float64
// ones, and the backward agrees with central differences of the loss along random directions
// in the tensors these families add (offset positions, layernorm_embedding, final norms,
// final_logits_bias, the untied head); dropout read by the fairseq keys.
#include <catch2/catch.hpp>

#include <cmath>

#include "masque/train/dropout.hpp"
#include "masque/train/loss.hpp"
#include "masque/train/network.hpp"
#include "masque/train/objective.hpp"
#include "registry.hpp"
#include "seq2seq_reference.hpp"

using namespace masque;
using namespace masque::test;
using nlohmann::json;

namespace {

const std::filesystem::path kFixture = MASQUE_BART_FIXTURE;

const json& reference() {
  static const json ref = read_json(kFixture / "reference.json");
  return ref;
}

struct Setup {
  LoadedPlugin<Model> model;
  transformer::TransformerSpec spec;
  train::ParameterSet params;
  train::TrainingBatch batch;
};

// The variant's pairs as training examples (target: the decoder input after its start token,
// the forced token included), laid out by the seq2seq objective; the model from `folder`.
Setup set_up(const std::string& name, const std::filesystem::path& folder) {
  const json& variant = reference()[name];
  Setup s{load_model(variant["plugin"], folder), {}, {}, {}};
  const auto* network = dynamic_cast<const transformer::TransformerModel*>(s.model.get());
  REQUIRE(network != nullptr);
  s.spec = network->spec();
  s.params = train::ParameterSet::from_checkpoint(s.spec, transformer::open_checkpoint(folder));
  Params tokenizer_params;
  tokenizer_params.set("path", (kFixture / name).string());
  auto tokenizer = load_plugin<Tokenizer>("tokenizer", "tokenizer-json", tokenizer_params);
  auto causal = load_mask("causal"), bidirectional = load_mask("bidirectional");
  const train::Objective objective(
      {.kind = train::ObjectiveKind::seq2seq}, *tokenizer, nullptr,
      train::ObjectiveMasks{.inputs = causal.get(), .source = bidirectional.get()},
      s.model->info());
  std::vector<train::Example> examples;
  for (const auto& p : seq2seq::pairs(variant)) {
    train::Example& e = examples.emplace_back();
    e.line = examples.size();
    e.ids = p.source;
    e.target.assign(p.decoder_input.begin() + 1, p.decoder_input.end());
  }
  std::vector<const train::Example*> pointers;
  for (const auto& e : examples) pointers.push_back(&e);
  s.batch = objective.lay_out(pointers, 0);
  return s;
}

double loss(const train::TrainableTransformer& net, const train::TrainingBatch& batch,
            train::Tape& tape, Tensor& logits, Tensor* dlogits) {
  net.forward(batch.inputs, &batch.source, batch.rows, tape, logits);
  return train::cross_entropy(logits, batch.labels, static_cast<double>(batch.labels.size()), {},
                              dlogits)
      .loss;
}

}  // namespace

TEST_CASE("bart families train: the objective's teacher-forced logits match the reference",
          "[bart][m2m_100][train]") {
  for (const char* name : {"bart-tied", "bart-untied", "mbart", "m2m_100", "nllb"}) {
    DYNAMIC_SECTION(name) {
      Setup s = set_up(name, kFixture / name);
      const train::TrainableTransformer net(s.spec, s.params);
      auto tape = net.make_tape();
      Tensor logits;
      net.forward(s.batch.inputs, &s.batch.source, s.batch.rows, *tape, logits);
      // Rows are (pair, decoder position) in order: position t of pair r predicts label t.
      const json& variant = reference()[name];
      std::int64_t row = 0;
      double worst = 0;
      for (const auto& p : variant["pairs"])
        for (const auto& want : p["logits"])
          worst = std::max(worst, seq2seq::max_error(row_of(logits, row++), want));
      REQUIRE(row == logits.dim(0));
      INFO("max |logit - reference| " << worst);
      CHECK(worst < seq2seq::kTol);
    }
  }
}

TEST_CASE("bart families train: gradients agree with central differences of the loss",
          "[bart][m2m_100][train]") {
  const struct {
    const char* variant;
    std::vector<std::string> tensors;
  } cases[] = {
      {"bart-tied",
       {"model.encoder.embed_positions.weight", "model.decoder.layernorm_embedding.weight",
        "model.encoder.layers.1.self_attn.q_proj.weight", "model.shared.weight",
        "final_logits_bias"}},
      {"bart-untied",
       {"lm_head.weight", "model.decoder.embed_positions.weight", "model.shared.weight"}},
      {"mbart",
       {"model.encoder.layer_norm.weight", "model.decoder.layer_norm.bias",
        "model.decoder.layers.0.encoder_attn.v_proj.weight",
        "model.encoder.layernorm_embedding.bias", "model.shared.weight"}},
      {"m2m_100",
       {"model.encoder.layer_norm.weight", "model.decoder.layers.1.fc1.weight",
        "model.shared.weight"}},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.variant) {
      // ReLU's kinks spoil central differences over a whole tensor: m2m_100 runs with gelu here.
      const std::string variant = c.variant;
      Setup s = set_up(variant, variant == "m2m_100"
                                    ? seq2seq::edited_folder(kFixture / variant, "bart_train_gelu",
                                                             {{"activation_function", "gelu"}})
                                    : kFixture / variant);
      const train::TrainableTransformer net(s.spec, s.params);
      auto tape = net.make_tape();
      Tensor logits, dlogits;
      loss(net, s.batch, *tape, logits, &dlogits);
      s.params.zero_grads();
      net.backward(*tape, dlogits);
      for (const std::string& tensor : c.tensors) {
        train::ParameterSet::Entry& e = s.params.at(tensor);
        // A ±1 direction over the tensor (a fixed pattern), the loss in double at ±eps.
        std::vector<float> direction(static_cast<std::size_t>(e.value.numel()));
        double along = 0;
        for (std::size_t i = 0; i < direction.size(); ++i) {
          direction[i] = ((i * 2654435761u) >> 7) % 2 ? 1.0f : -1.0f;
          along += double{e.grad.f32()[i]} * direction[i];
        }
        const Tensor original = e.value.clone();
        auto loss_at = [&](float eps) {
          for (std::size_t i = 0; i < direction.size(); ++i)
            e.value.f32()[i] = original.f32()[i] + eps * direction[i];
          return loss(net, s.batch, *tape, logits, nullptr);
        };
        constexpr float kEps = 3e-4f;
        const double numeric = (loss_at(kEps) - loss_at(-kEps)) / (2.0 * kEps);
        loss_at(0.0f);
        INFO(tensor << ": backward " << along << ", central difference " << numeric);
        CHECK(std::abs(numeric - along) <= 1e-2 * std::abs(along) + 1e-3);
      }
    }
  }
}

TEST_CASE("bart families train: dropout rates are read by fairseq's keys",
          "[bart][m2m_100][train]") {
  // Each fixture and the plugin that reads it, whose declared keys the rates follow.
  for (const auto& [name, plugin] : {std::pair{"bart-tied", "bart"}, std::pair{"mbart", "mbart"},
                                     std::pair{"nllb", "m2m_100"}}) {
    DYNAMIC_SECTION(name) {
      json config = read_json(kFixture / name / "config.json");
      config["attention_dropout"] = 0.25;
      config["activation_dropout"] = 0.125;
      const train::DropoutRates r = train::dropout_rates_of(
          *test::build_registry().find(PluginKind::model, plugin).descriptor->model, config);
      CHECK(r.embedding == Approx(0.1));
      CHECK(r.residual == Approx(0.1));
      CHECK(r.attention == Approx(0.25));
      CHECK(r.activation == Approx(0.125));
    }
  }
}

// Fine-tuning through the binary: a few steps of objective seq2seq on each family's folder,
// then the checkpoint (a model folder) runs under seq2seq, found by its model_type.
TEST_CASE("bart families train: masque train fine-tunes a folder and the checkpoint runs",
          "[bart][m2m_100][train][e2e]") {
  for (const char* name : {"bart-tied", "mbart", "m2m_100"}) {
    DYNAMIC_SECTION(name) {
      const auto dir = scratch_dir(std::string("bart_train_cli_") + name);
      std::string tsv;
      for (int i = 0; i < 24; ++i)
        tsv += "w" + std::to_string(5 + i % 7) + " w" + std::to_string(20 + i % 5) + "\tw" +
               std::to_string(20 + i % 5) + " w" + std::to_string(5 + i % 7) + "\n";
      write_file(dir / "train.tsv", tsv);
      const std::string folder = (kFixture / name).string();
      write_file(
          dir / "p.yaml",
          "task:\n  name: train\n  objective: seq2seq\n  train_file: " +
              (dir / "train.tsv").string() +
              "\n  columns: [source, target]\n  output: " + (dir / "run").string() +
              "\n  batch_size: 8\n  lr: 1e-3\n  steps: 6\n  log_every: 3\nmodel:\n  plugin: " +
              reference()[name]["plugin"].get<std::string>() + "\n  path: " + folder +
              "\ntokenizer:\n  plugin: tokenizer-json\n  path: " + folder +
              "\nmask:\n  plugin: causal\n");
      const RunResult trained = run_masque({"train", (dir / "p.yaml").string()});
      INFO(trained.err);
      REQUIRE(trained.exit_code == 0);
      const auto checkpoint = dir / "run" / "last";
      REQUIRE(std::filesystem::exists(checkpoint / "model.safetensors"));
      const RunResult r =
          run_masque({"run", "--task", "seq2seq", "--model", checkpoint.string(), "--input-format",
                      "ids", "--set", "decoder.max_new_tokens=4", "-q"},
                     "5 20 2\n");
      INFO(r.err);
      REQUIRE(r.exit_code == 0);
      CHECK(parse_jsonl(r.out).at(0)["tokens"].size() >= 1);
    }
  }
}
