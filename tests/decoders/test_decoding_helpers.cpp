// The shared decoding options and helpers in libmasque, and the decoder descriptors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <numeric>

#include "decoder_plugins.hpp"
#include "masque/decoding.hpp"
#include "masque/error.hpp"

using namespace masque;
using namespace masque::test;

namespace {

constexpr float kLowest = std::numeric_limits<float>::lowest();

DecodingOptions options_with(double penalty, std::int32_t min_new, std::int32_t ngram) {
  DecodingOptions o;
  o.repetition_penalty = penalty;
  o.min_new_tokens = min_new;
  o.no_repeat_ngram_size = ngram;
  return o;
}

}  // namespace

TEST_CASE("top_k returns the best indices in order, ties to the smaller index") {
  const std::vector<float> v{0.5f, 2.f, -1.f, 2.f, 7.f, 0.5f, 3.f};
  std::vector<std::int32_t> out;
  decoding::top_k(v, 4, out);
  REQUIRE(out == std::vector<std::int32_t>{4, 6, 1, 3});
  decoding::top_k(v, 1, out);
  REQUIRE(out == std::vector<std::int32_t>{4});
  decoding::top_k(v, 0, out);
  REQUIRE(out.empty());
  decoding::top_k(v, 100, out);  // clamped to the size: a full ordering
  REQUIRE(out == std::vector<std::int32_t>{4, 6, 1, 3, 0, 5, 2});
}

TEST_CASE("top_k agrees between its small-k and large-k strategies") {
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 97) * 0.25f;
  std::vector<std::int32_t> all(v.size());
  std::iota(all.begin(), all.end(), 0);
  std::stable_sort(all.begin(), all.end(),
                   [&](std::int32_t a, std::int32_t b) { return v[a] > v[b]; });
  for (std::int32_t k : {1, 5, 16, 17, 40, 999, 1000}) {
    std::vector<std::int32_t> out;
    decoding::top_k(v, k, out);
    REQUIRE(out == std::vector<std::int32_t>(all.begin(), all.begin() + k));
  }
}

TEST_CASE("top_k orders signs, zeros and infinities as the comparison does, at every k") {
  // GPT-2's and stories260k's vocabulary sizes with many ties: selection, radix ranking
  // (k >= vocab / 8 of the large one), a sort of all (k >= vocab / 2 of the small one) and the
  // small-k buffer must all give the order of a stable sort on `>`.
  const float inf = std::numeric_limits<float>::infinity();
  const std::size_t vocab = GENERATE(std::size_t{50257}, std::size_t{512});
  std::vector<float> v(vocab);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(static_cast<int>((i * 7919) % 401) - 200) * 0.125f;
  v[3] = -0.0f;  // equal to +0: ties with the zeros by index
  v[7] = inf;
  v[11] = -inf;
  v[13] = kLowest;
  v[17] = std::numeric_limits<float>::denorm_min();
  v[19] = -std::numeric_limits<float>::denorm_min();
  std::vector<std::int32_t> all(v.size());
  std::iota(all.begin(), all.end(), 0);
  std::stable_sort(all.begin(), all.end(),
                   [&](std::int32_t a, std::int32_t b) { return v[a] > v[b]; });
  for (std::int32_t k : {1, 16, 17, 63, 64, 65, 511, 512, 1024, 6281, 6282, 6283, 16384, 50256,
                         50257}) {
    if (static_cast<std::size_t>(k) > vocab) continue;
    INFO("vocab " << vocab << ", k = " << k);
    std::vector<std::int32_t> out;
    decoding::top_k(v, k, out);
    REQUIRE(out == std::vector<std::int32_t>(all.begin(), all.begin() + k));
  }
}

TEST_CASE("argmax picks the smallest index among ties") {
  REQUIRE(decoding::argmax(std::vector<float>{1.f, 3.f, 3.f, 2.f}) == 1);
  REQUIRE(decoding::argmax(std::vector<float>{kLowest, kLowest}) == 0);
}

TEST_CASE("log_sum_exp is exact for large and blocked logits") {
  const std::vector<float> v{1000.f, 1000.f, kLowest};
  REQUIRE(decoding::log_sum_exp(v) == Approx(1000.0 + std::log(2.0)).epsilon(1e-15));
  const std::vector<float> probs{std::log(0.25f), std::log(0.75f)};
  REQUIRE(decoding::log_sum_exp(probs) == Approx(0.0).margin(1e-7));
  const float inf = std::numeric_limits<float>::infinity();
  REQUIRE(decoding::log_sum_exp(std::vector<float>{-inf, -inf}) == -inf);
}

TEST_CASE("log_sum_exp agrees with a long double reference to double precision") {
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<float> row(static_cast<std::size_t>(1 + trial % 131));
    for (std::size_t i = 0; i < row.size(); ++i)
      row[i] = static_cast<float>(std::sin(1.7 * i + trial) * (trial % 60) - (i % 5) * 30.0);
    long double max = row[0];
    for (float x : row) max = std::max<long double>(max, x);
    long double sum = 0;
    for (float x : row) sum += std::exp(static_cast<long double>(x) - max);
    const long double expected = max + std::log(sum);
    REQUIRE(static_cast<double>(std::fabs(decoding::log_sum_exp(row) - expected)) < 1e-13);
  }
}

TEST_CASE("normalized_score divides by length^length_penalty") {
  REQUIRE(decoding::normalized_score(-6.0, 3, 1.0) == Approx(-2.0));
  REQUIRE(decoding::normalized_score(-6.0, 3, 0.0) == Approx(-6.0));
  REQUIRE(decoding::normalized_score(-8.0, 4, 0.5) == Approx(-4.0));
  REQUIRE(decoding::normalized_score(0.0, 0, 1.0) == 0.0);
}

TEST_CASE("repetition penalty divides positive and multiplies negative logits, once per token") {
  decoding::LogitsProcessor p(options_with(2.0, 0, 0), {5}, 6);
  std::vector<float> row{2.f, -1.f, 0.5f, 4.f, -3.f, 1.f};
  const std::vector<TokenId> context{0, 1, 0};
  const std::vector<TokenId> history{1, 3, 3};
  p.apply(row, context, history);
  REQUIRE(row == std::vector<float>{1.f, -2.f, 0.5f, 2.f, -3.f, 1.f});
  // The scratch stamps must not leak from one row to the next.
  std::vector<float> row2{2.f, -1.f, 0.5f, 4.f, -3.f, 1.f};
  p.apply(row2, {}, std::vector<TokenId>{4});
  REQUIRE(row2 == std::vector<float>{2.f, -1.f, 0.5f, 4.f, -6.f, 1.f});
}

TEST_CASE("min_new_tokens blocks every end token while the step is below it") {
  decoding::LogitsProcessor p(options_with(1.0, 2, 0), {1, 4}, 5);
  std::vector<float> row{0.f, 1.f, 2.f, 3.f, 4.f};
  p.apply(row, std::vector<TokenId>{7, 7, 7},
          std::vector<TokenId>{0});  // the prompt does not count
  REQUIRE(row == std::vector<float>{0.f, kLowest, 2.f, 3.f, kLowest});
  std::vector<float> later{0.f, 1.f, 2.f, 3.f, 4.f};
  p.apply(later, {}, std::vector<TokenId>{0, 3});
  REQUIRE(later == std::vector<float>{0.f, 1.f, 2.f, 3.f, 4.f});
}

TEST_CASE("no_repeat_ngram_size blocks the tokens that would repeat an n-gram") {
  const std::vector<TokenId> history{1, 2, 3, 1, 2};
  auto blocked = [&](std::int32_t n, std::span<const TokenId> context) {
    decoding::LogitsProcessor p(options_with(1.0, 0, n), {}, 6);
    std::vector<float> row(6, 0.f);
    p.apply(row, context, history);
    std::vector<TokenId> out;
    for (TokenId t = 0; t < 6; ++t)
      if (row[t] == kLowest) out.push_back(t);
    return out;
  };
  REQUIRE(blocked(3, {}) == std::vector<TokenId>{3});        // "1 2" was followed by 3
  REQUIRE(blocked(2, {}) == std::vector<TokenId>{3});        // "2" was followed by 3
  REQUIRE(blocked(1, {}) == std::vector<TokenId>{1, 2, 3});  // every token seen
  REQUIRE(blocked(6, {}).empty());                           // longer than the sequence
  decoding::LogitsProcessor p(options_with(1.0, 0, 2), {}, 6);
  std::vector<float> row(6, 0.f);
  p.apply(row, {}, std::vector<TokenId>{4, 4});  // "4 4" then 4 would repeat it
  REQUIRE(row[4] == kLowest);
  // The prompt is part of the sequence: "2 5" in the prompt blocks 5 after the final 2.
  const std::vector<TokenId> context{2, 5};
  REQUIRE(blocked(2, context) == std::vector<TokenId>{3, 5});
}

TEST_CASE("decoding options parse and validate") {
  Params params = decoder_params("greedy");
  DecodingOptions o = parse_decoding_options(params);
  REQUIRE(o.max_new_tokens == 256);
  REQUIRE(o.min_new_tokens == 0);
  REQUIRE(o.end_tokens.empty());
  REQUIRE(o.repetition_penalty == 1.0);
  REQUIRE(o.no_repeat_ngram_size == 0);
  REQUIRE(o.length_penalty == 1.0);

  params.set("end_tokens", std::vector<std::int64_t>{2, 7});
  REQUIRE(parse_decoding_options(params).end_tokens == std::vector<TokenId>{2, 7});
  params.set("repetition_penalty", 0.0);
  REQUIRE_THROWS_AS(parse_decoding_options(params), ConfigError);
  params.set("repetition_penalty", 1.2);
  params.set("min_new_tokens", std::int64_t{300});
  REQUIRE_THROWS_AS(parse_decoding_options(params), ConfigError);
}

TEST_CASE("every decoder declares the shared options and documents every parameter") {
  for (const char* name : {"greedy", "sample", "beam"}) {
    INFO(name);
    const PluginDescriptor& d = decoder_descriptor(name);
    REQUIRE(d.kind == PluginKind::decoder);
    REQUIRE(std::string(d.name) == name);
    std::vector<std::string> names;
    for (std::uint32_t i = 0; i < d.num_params; ++i) {
      const ParamSpec& spec = d.params[i];
      INFO(spec.name);
      names.push_back(spec.name);
      REQUIRE(std::string(spec.help).size() > 20);
      REQUIRE(std::string(spec.default_value).size() > 0);
      if (spec.type == ParamType::integer || spec.type == ParamType::number ||
          spec.type == ParamType::int_list) {
        REQUIRE(std::isfinite(spec.min));
        REQUIRE(std::isfinite(spec.max));
      }
    }
    for (const char* shared : {"max_new_tokens", "min_new_tokens", "end_tokens",
                               "repetition_penalty", "no_repeat_ngram_size", "length_penalty"})
      REQUIRE(std::count(names.begin(), names.end(), shared) == 1);
  }
}

TEST_CASE("suppress_sequences: one token always, a longer one after the rest of it") {
  DecodingOptions o;
  o.suppress_sequences = {{4}, {1, 2, 3}};
  decoding::LogitsProcessor p(o, {}, 6);
  std::vector<float> row(6, 1.f);
  const std::vector<TokenId> context{1}, history{2};
  p.apply(row, context, history);  // prompt + history ends with "1 2": 3 is blocked
  CHECK(row == std::vector<float>{1.f, 1.f, 1.f, kLowest, kLowest, 1.f});
  std::fill(row.begin(), row.end(), 1.f);
  p.apply(row, {}, history);  // only "2": 3 stays
  CHECK(row == std::vector<float>{1.f, 1.f, 1.f, 1.f, kLowest, 1.f});
}

TEST_CASE("bias_towards mixes the distribution with the prefix token as CTranslate2") {
  const std::vector<float> logits{0.5f, -1.f, 2.f, 0.f};
  const double beta = 0.3;
  double z = 0;
  for (float v : logits) z += std::exp(static_cast<double>(v));
  std::vector<float> row = logits;
  decoding::bias_towards(row, 1, beta);
  double total = 0;
  for (std::size_t t = 0; t < row.size(); ++t) {
    const double p = std::exp(static_cast<double>(logits[t])) / z;
    const double want = std::log((1 - beta) * p + (t == 1 ? beta : 0.0));
    CHECK(std::abs(row[t] - want) < 1e-6);
    total += std::exp(static_cast<double>(row[t]));
  }
  CHECK(std::abs(total - 1.0) < 1e-6);  // still a distribution
}
