// The llama plugin against stories260k's float64 references (../shared/models/stories260k).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "lm_reference.hpp"
#include "model_plugin.hpp"

using namespace masque;
using namespace masque::test;

namespace {

constexpr double kTol = 1e-4;  // README: logits, log-probs and NLL per token

std::filesystem::path folder() {
  return shared_dir() / "models" / "stories260k";
}

std::vector<nlohmann::json> all_sequences(const nlohmann::json& reference) {
  std::vector<nlohmann::json> seqs{reference["prompt"]};
  for (const auto& s : reference["sentences"]) seqs.push_back(s);
  return seqs;
}

std::vector<std::span<const float>> rows_from(const Tensor& logits, std::int64_t offset,
                                              std::int64_t count) {
  std::vector<std::span<const float>> rows;
  for (std::int64_t t = 0; t < count; ++t) rows.push_back(row_of(logits, offset + t));
  return rows;
}

void require_sequence(const std::vector<std::span<const float>>& rows, const nlohmann::json& seq,
                      Errors& all) {
  const Errors e = compare_sequence(rows, seq, "top5", 2 * kTol);
  CAPTURE(seq["name"], e.logits, e.logsumexp, e.logprob, e.total_nll);
  REQUIRE(e.logits < kTol);
  REQUIRE(e.logsumexp < kTol);
  REQUIRE(e.logprob < kTol);
  REQUIRE(e.total_nll < kTol);
  double nll = 0;
  for (const auto& p : seq["positions"])
    if (!p["next_token_logprob"].is_null()) nll -= p["next_token_logprob"].get<double>();
  const double ppl = std::exp(nll / seq["num_predicted"].get<double>());
  REQUIRE(std::abs(ppl / seq["perplexity"].get<double>() - 1) < kTol);
  all.merge(e);
}

// Index of the largest logit, the smallest id on a tie (llama2.c's rule).
std::int32_t argmax(std::span<const float> row) {
  std::int32_t best = 0;
  for (std::size_t v = 1; v < row.size(); ++v)
    if (row[v] > row[best]) best = static_cast<std::int32_t>(v);
  return best;
}

struct LlamaFixture {
  LoadedPlugin<Model> model = load_model("llama", folder());
  LoadedPlugin<MaskStrategy> causal = load_mask("causal");
};

}  // namespace

TEST_CASE_METHOD(LlamaFixture, "llama: model info comes from config.json") {
  const ModelInfo& info = model->info();
  CHECK(info.architecture == "llama");
  CHECK(info.kind == ModelKind::decoder_only);
  CHECK(info.vocab_size == 512);
  CHECK(info.hidden_size == 64);
  CHECK(info.num_layers == 5);
  CHECK(info.max_positions == 512);
  CHECK(info.bos == 1);
  CHECK(info.eos == 2);
}

TEST_CASE_METHOD(LlamaFixture, "llama: prompt_logits.json, one sequence at a time and padded") {
  const auto reference = read_json(folder() / "reference" / "prompt_logits.json");
  const auto seqs = all_sequences(reference);
  REQUIRE(seqs.size() == 6);
  std::vector<std::vector<TokenId>> rows;
  for (const auto& s : seqs) rows.push_back(s["input_ids"]);

  Errors alone;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const ForwardResult out = model->forward(make_batch(*causal, {rows[i]}));
    require_sequence(rows_from(out.logits, 0, rows[i].size()), seqs[i], alone);
  }
  // All six in one right-padded batch (lengths 16..48).
  Errors padded;
  const Batch batch = make_batch(*causal, rows, -1, 9999);
  const ForwardResult out = model->forward(batch);
  for (std::size_t i = 0; i < seqs.size(); ++i)
    require_sequence(rows_from(out.logits, i * batch.length, rows[i].size()), seqs[i], padded);
  WARN("stories260k prompt_logits: max |logit err| "
       << std::max(alone.logits, padded.logits) << ", logsumexp " << alone.logsumexp
       << ", token nll " << alone.logprob << ", total nll " << alone.total_nll);
}

TEST_CASE_METHOD(LlamaFixture, "llama: 256 greedy steps with the KV cache reproduce greedy_256") {
  const auto reference = read_json(folder() / "reference" / "greedy_256.json");
  const auto expected = reference["generated_ids"].get<std::vector<TokenId>>();
  const auto& steps = reference["steps"];
  REQUIRE(expected.size() == 256);

  Batch prompt = make_batch(*causal, {reference["start_ids"].get<std::vector<TokenId>>()});
  prompt.output_rows = {prompt.length - 1};
  Tensor logits;
  auto state = model->start(prompt, &logits);
  std::vector<TokenId> generated;
  double logit_err = 0, lse_err = 0;
  for (std::size_t t = 0; t < expected.size(); ++t) {
    REQUIRE(logits.shape() == Shape{1, 512});
    const auto row = row_of(logits, 0);
    const TokenId next = argmax(row);
    logit_err = std::max(logit_err, std::abs(row[next] - steps["chosen_logit"][t].get<double>()));
    lse_err = std::max(lse_err,
                       std::abs(decoding::log_sum_exp(row) - steps["logsumexp"][t].get<double>()));
    generated.push_back(next);
    if (next != expected[t]) break;
    const TokenId token[] = {next};
    StepInput input;
    input.tokens = token;
    model->step(*state, input, logits);
  }
  REQUIRE(generated == expected);
  CHECK(logit_err < kTol);
  CHECK(lse_err < kTol);
  WARN("stories260k greedy: 256/256 ids, max |chosen logit err| " << logit_err << ", logsumexp "
                                                                  << lse_err);
}
