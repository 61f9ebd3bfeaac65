// Both causal LM plugins with matmul_dtype int8: close to the float64 references, and a row's
// numbers independent of the batch it is in, as in f32.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "lm_reference.hpp"
#include "model_plugin.hpp"

using namespace masque;
using namespace masque::test;

namespace {

// int8 weights and inputs (2 significant digits) move a sequence's NLL by at most 0.027 nats
// per scored token on these models (measured; the NLLs are 1-3 nats per token); a wrong scale
// or a lost row would move it by far more.
constexpr double kNllPerTokenTolerance = 0.05;

struct Case {
  const char* plugin;
  std::filesystem::path folder;
  std::vector<nlohmann::json> sequences;  // with input_ids, positions and total_nll
  const char* top;
};

Case stories260k() {
  const auto folder = shared_dir() / "models" / "stories260k";
  const auto reference = read_json(folder / "reference" / "prompt_logits.json");
  Case c{"llama", folder, {reference["prompt"]}, "top5"};
  for (const auto& s : reference["sentences"]) c.sequences.push_back(s);
  return c;
}

Case tiny_gpt2() {
  const auto folder = shared_dir() / "models" / "tiny-gpt2";
  const auto reference = read_json(folder / "reference.json");
  Case c{"gpt2", folder, {}, "top10"};
  for (const auto& s : reference["causal"]["padded_batch"]["sequences"]) c.sequences.push_back(s);
  return c;
}

LoadedPlugin<Model> load_int8(const Case& c) {
  Params params;
  params.set("path", c.folder.string());
  params.set("matmul_dtype", std::string("int8"));
  return load_plugin<Model>("model", c.plugin, params);
}

std::vector<std::span<const float>> rows_of(const Tensor& logits, std::int64_t offset,
                                            std::int64_t count) {
  std::vector<std::span<const float>> rows;
  for (std::int64_t t = 0; t < count; ++t) rows.push_back(row_of(logits, offset + t));
  return rows;
}

}  // namespace

TEST_CASE("int8 matmuls: NLLs near the float64 reference, the same bits alone and padded") {
  for (const Case& c : {stories260k(), tiny_gpt2()}) {
    INFO(c.plugin << " on " << c.folder.filename().string());
    auto model = load_int8(c);
    auto causal = load_mask("causal");
    std::vector<std::vector<TokenId>> ids;
    for (const auto& s : c.sequences) ids.push_back(s["input_ids"]);
    REQUIRE(ids.size() >= 3);

    const Batch padded = make_batch(*causal, ids, 0, 0);
    const ForwardResult all = model->forward(padded);
    double worst = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto n = static_cast<std::int64_t>(ids[i].size());
      const ForwardResult alone = model->forward(make_batch(*causal, {ids[i]}));
      CHECK(std::memcmp(alone.logits.f32(), row_of(all.logits, i * padded.length).data(),
                        n * alone.logits.dim(1) * sizeof(float)) == 0);
      const Errors e = compare_sequence(rows_of(alone.logits, 0, n), c.sequences[i], c.top,
                                        1e9 /* int8 may reorder near-ties */);
      const double per_token = e.total_nll / static_cast<double>(n - 1);
      CAPTURE(i, e.total_nll, e.logits);
      // int8_pays() keeps these narrow models' matmuls f32: their int8 is their f32.
      CHECK(e.total_nll > 0.0);
      CHECK(per_token < kNllPerTokenTolerance);
      worst = std::max(worst, per_token);
    }
    WARN(c.plugin << " int8: NLL within " << worst << " nats per token of float64");
  }
}
