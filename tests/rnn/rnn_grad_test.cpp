// Training the rnn-seq2seq model: the teacher-forced loss of a padded batch of mixed-length
// records and every parameter's gradient against float64 torch autograd (reference_rnn.py's
// batch_loss, each record run alone, so padding must change nothing).
#include <catch2/catch.hpp>

#include <cmath>

#include "masque/safetensors.hpp"
#include "masque/train/loss.hpp"
#include "masque/train/network.hpp"
#include "masque/train/objective.hpp"
#include "masque/train/trainable.hpp"
#include "rnn_support.hpp"

namespace masque::test::rnn {

namespace {

// The seq2seq objective's layout of every fixture record as one batch: the sources, the decoder
// inputs [start, target...], and the rows predicting each target token and the final </s>.
train::TrainingBatch fixture_batch(const nlohmann::json& records, const ModelInfo& info) {
  std::vector<std::vector<TokenId>> sources, inputs;
  for (const auto& r : records) {
    sources.push_back(r.at("source").get<std::vector<TokenId>>());
    std::vector<TokenId> input{info.decoder_start};
    for (TokenId t : r.at("target").get<std::vector<TokenId>>()) input.push_back(t);
    inputs.push_back(input);
  }
  train::TrainingBatch b;
  b.source = source_batch(sources);
  b.inputs = source_batch(inputs);
  for (std::size_t r = 0; r < inputs.size(); ++r)
    for (std::size_t t = 0; t < inputs[r].size(); ++t) {
      b.rows.push_back(static_cast<std::int32_t>(r) * b.inputs.length +
                       static_cast<std::int32_t>(t));
      b.labels.push_back(t + 1 < inputs[r].size() ? inputs[r][t + 1] : info.eos);
    }
  return b;
}

// ||a - b|| / ||b|| over a whole tensor.
double relative_error(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double d = double{a.f32()[i]} - double{b.f32()[i]};
    diff += d * d;
    norm += double{b.f32()[i]} * b.f32()[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

}  // namespace

TEST_CASE("rnn-seq2seq training: loss and every gradient equal float64 torch autograd",
          "[rnn][train]") {
  for (const std::string& name : fixture_names()) {
    DYNAMIC_SECTION(name) {
      const LoadedModel loaded = load_model(name);
      const auto* trainable = dynamic_cast<const train::TrainableModel*>(loaded.model.get());
      REQUIRE(trainable != nullptr);
      train::ParameterSet params = trainable->parameters();
      const auto network = trainable->network(params, {});
      const nlohmann::json e = expected(name);
      const train::TrainingBatch batch = fixture_batch(e.at("records"), loaded->info());
      const auto count = static_cast<double>(batch.labels.size());

      const auto tape = network->new_tape();
      Tensor logits;
      network->forward(batch, *tape, logits, nullptr);
      const train::CrossEntropyResult ce =
          train::cross_entropy(logits, batch.labels, count, {}, &logits);
      CHECK(ce.loss_sum / count == Approx(e.at("batch_loss").get<double>()).epsilon(1e-5));
      network->backward(*tape, logits);

      const SafeTensors grads = SafeTensors::open(fixture_dir(name) / "grads.safetensors");
      REQUIRE(params.size() == grads.names().size());
      for (const auto& entry : params.entries()) {
        const Tensor expected_grad = grads.get_f32(entry.name, entry.value.shape());
        INFO(name << ": " << entry.name);
        CHECK(relative_error(entry.grad, expected_grad) <= 1e-5);
      }

      // A second forward and backward on the same tape adds the same gradient again.
      const Tensor first = params.at("decoder.embed_tokens.weight").grad.clone();
      network->forward(batch, *tape, logits, nullptr);
      train::cross_entropy(logits, batch.labels, count, {}, &logits);
      network->backward(*tape, logits);
      const Tensor& twice = params.at("decoder.embed_tokens.weight").grad;
      Tensor doubled = first.clone();
      for (std::int64_t i = 0; i < doubled.numel(); ++i) doubled.f32()[i] *= 2;
      CHECK(relative_error(twice, doubled) <= 1e-6);
    }
  }
}

TEST_CASE("rnn-seq2seq training: dropout and bf16 products are refused", "[rnn][train]") {
  const LoadedModel loaded = load_model("lstm-bahdanau");
  const auto* trainable = dynamic_cast<const train::TrainableModel*>(loaded.model.get());
  REQUIRE(trainable != nullptr);
  train::ParameterSet params = trainable->parameters();
  train::NetworkOptions dropout;
  dropout.dropout.residual = 0.1f;
  CHECK_THROWS_AS(trainable->network(params, dropout), ConfigError);
  train::NetworkOptions bf16;
  bf16.matmul_dtype = DType::bf16;
  CHECK_THROWS_AS(trainable->network(params, bf16), ConfigError);
}

}  // namespace masque::test::rnn
