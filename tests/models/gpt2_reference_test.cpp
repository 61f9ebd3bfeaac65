// The gpt2 plugin against tiny-gpt2's float64 reference (../shared/models/tiny-gpt2).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "lm_reference.hpp"
#include "masque/safetensors.hpp"
#include "model_plugin.hpp"

using namespace masque;
using namespace masque::test;

namespace {

// README: float32 logits are within ~3e-7 of float64 here; 1e-5 still tells gelu_new from
// erf-GELU's neighbours such as a missing 1/sqrt(head_dim) (~1e-3).
constexpr double kTol = 1e-5;

std::filesystem::path folder() {
  return shared_dir() / "models" / "tiny-gpt2";
}

std::vector<std::span<const float>> first_rows(const Tensor& logits, std::int64_t offset,
                                               std::int64_t count) {
  std::vector<std::span<const float>> rows;
  for (std::int64_t t = 0; t < count; ++t) rows.push_back(row_of(logits, offset + t));
  return rows;
}

void require_within(const Errors& e, double tol) {
  CAPTURE(e.logits, e.logsumexp, e.logprob, e.total_nll);
  REQUIRE(e.logits < tol);
  REQUIRE(e.logsumexp < tol);
  REQUIRE(e.logprob < tol);
  REQUIRE(e.total_nll < tol);
}

struct Gpt2Fixture {
  LoadedPlugin<Model> model = load_model("gpt2", folder());
  LoadedPlugin<MaskStrategy> causal = load_mask("causal");
  nlohmann::json reference = read_json(folder() / "reference.json");
};

}  // namespace

TEST_CASE_METHOD(Gpt2Fixture, "gpt2: model info comes from config.json") {
  const ModelInfo& info = model->info();
  CHECK(info.architecture == "gpt2");
  CHECK(info.kind == ModelKind::decoder_only);
  CHECK(info.vocab_size == 50257);
  CHECK(info.hidden_size == 32);
  CHECK(info.num_layers == 2);
  CHECK(info.max_positions == 128);
  CHECK(info.bos == 50256);
  CHECK(info.eos == 50256);
}

TEST_CASE_METHOD(Gpt2Fixture, "gpt2: each reference sequence alone matches float64") {
  Errors all;
  for (const auto& seq : reference["causal"]["sequences"]) {
    const auto ids = seq["input_ids"].get<std::vector<TokenId>>();
    const Batch batch = make_batch(*causal, {ids});
    const ForwardResult out = model->forward(batch);
    REQUIRE(out.logits.shape() == Shape{static_cast<std::int64_t>(ids.size()), 50257});
    const Errors e =
        compare_sequence(first_rows(out.logits, 0, ids.size()), seq, "top10", 2 * kTol);
    CAPTURE(seq["name"]);
    require_within(e, kTol);
    all.merge(e);
  }
  WARN("tiny-gpt2 single sequences: max |logit err| "
       << all.logits << ", logsumexp " << all.logsumexp << ", logprob " << all.logprob
       << ", total_nll " << all.total_nll);
}

TEST_CASE_METHOD(Gpt2Fixture, "gpt2: the right-padded batch gives every row its unpadded numbers") {
  const auto& padded = reference["causal"]["padded_batch"];
  std::vector<std::vector<TokenId>> rows;
  for (const auto& seq : padded["sequences"]) rows.push_back(seq["input_ids"]);
  REQUIRE(padded["lengths"].get<std::vector<int>>() == std::vector<int>{5, 12, 9});

  // Pad slots: the reference's pad id, then values no model could embed (-7, position 10^6).
  for (const auto& [pad_id, pad_position] :
       std::vector<std::pair<TokenId, std::int32_t>>{{50256, 0}, {-7, 1000000}}) {
    const Batch batch = make_batch(*causal, rows, pad_id, pad_position);
    // The layout the causal plugin builds is the reference's dense mask on real queries.
    const auto& dense = padded["dense_mask"];
    for (std::int32_t b = 0; b < batch.batch; ++b)
      for (std::size_t i = 0; i < rows[b].size(); ++i)
        for (std::int32_t j = 0; j < batch.length; ++j)
          REQUIRE(batch.attention.allowed(b, static_cast<std::int32_t>(i), j) ==
                  (dense[b][i][j].get<int>() == 1));

    const ForwardResult out = model->forward(batch);
    REQUIRE(out.logits.dim(0) == 3 * 12);
    Errors all;
    for (std::int32_t b = 0; b < 3; ++b) {
      const Errors e = compare_sequence(first_rows(out.logits, b * 12, rows[b].size()),
                                        padded["sequences"][b], "top10", 2 * kTol);
      CAPTURE(b, pad_id);
      require_within(e, kTol);
      all.merge(e);
    }
    WARN("tiny-gpt2 padded batch (pad id " << pad_id << "): max |logit err| " << all.logits
                                           << ", logprob " << all.logprob);
  }
}

TEST_CASE_METHOD(Gpt2Fixture, "gpt2: output_rows selects rows, hidden is the final-norm state") {
  const auto& padded = reference["causal"]["padded_batch"];
  std::vector<std::vector<TokenId>> rows;
  for (const auto& seq : padded["sequences"]) rows.push_back(seq["input_ids"]);
  Batch batch = make_batch(*causal, rows, 50256);
  const ForwardResult all = model->forward(batch);

  batch.output_rows = {12 + 11, 0, 24 + 8, 4, 12 + 3};
  batch.want_hidden = true;
  const ForwardResult some = model->forward(batch);
  REQUIRE(some.logits.shape() == Shape{5, 50257});
  REQUIRE(some.hidden.shape() == Shape{5, 32});
  // Tied head: logits = hidden . wte^T.
  const SafeTensors weights = SafeTensors::open(folder());
  const Tensor wte = weights.get_f32("transformer.wte.weight");
  double row_err = 0, head_err = 0;
  for (std::size_t i = 0; i < batch.output_rows.size(); ++i) {
    const auto want = row_of(all.logits, batch.output_rows[i]);
    const auto got = row_of(some.logits, static_cast<std::int64_t>(i));
    for (std::size_t v = 0; v < want.size(); ++v) {
      row_err = std::max(row_err, double{std::abs(want[v] - got[v])});
      double dot = 0;
      for (int c = 0; c < 32; ++c)
        dot += double{some.hidden.f32()[i * 32 + c]} * wte.f32()[v * 32 + c];
      head_err = std::max(head_err, std::abs(dot - got[v]));
    }
  }
  CHECK(row_err < 1e-5);
  CHECK(head_err < 1e-5);

  batch.want_logits = false;
  const ForwardResult hidden_only = model->forward(batch);
  CHECK(hidden_only.logits.empty());
  CHECK(hidden_only.hidden.shape() == Shape{5, 32});
}
