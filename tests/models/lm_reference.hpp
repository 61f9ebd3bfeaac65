// Comparing causal-LM logits with the float64 reference files of ../shared/models (schemas in
// tiny-gpt2/README.md and stories260k/README.md).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "masque/decoding.hpp"
#include "masque/ops.hpp"
#include "masque/tensor.hpp"
#include "test_support.hpp"

namespace masque::test {

inline nlohmann::json read_json(const std::filesystem::path& file) {
  return nlohmann::json::parse(read_file(file));
}

// Largest absolute differences seen against a reference.
struct Errors {
  double logits = 0, logsumexp = 0, logprob = 0, total_nll = 0;
  void merge(const Errors& o) {
    logits = std::max(logits, o.logits);
    logsumexp = std::max(logsumexp, o.logsumexp);
    logprob = std::max(logprob, o.logprob);
    total_nll = std::max(total_nll, o.total_nll);
  }
};

// The k largest logits' ids, descending, the smaller id first on a tie (the references' rule).
inline std::vector<std::int32_t> top_ids(std::span<const float> row, std::size_t k) {
  std::vector<std::int32_t> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](std::int32_t a, std::int32_t b) {
    return row[a] != row[b] ? row[a] > row[b] : a < b;
  });
  ids.resize(k);
  return ids;
}

inline std::span<const float> row_of(const Tensor& logits, std::int64_t row) {
  const std::int64_t vocab = logits.dim(-1);
  return {logits.f32() + row * vocab, static_cast<std::size_t>(vocab)};
}

// Largest |x - want| over rows [first, first + want.size()) of `values` ([rows, width]): a
// generated reference's rows (logits or hidden states) against the model's.
inline double max_row_error(const Tensor& values, std::int64_t first, const nlohmann::json& want) {
  double worst = 0;
  for (std::size_t t = 0; t < want.size(); ++t) {
    const auto row = row_of(values, first + static_cast<std::int64_t>(t));
    const auto expected = want[t].get<std::vector<double>>();
    REQUIRE(row.size() == expected.size());
    for (std::size_t v = 0; v < expected.size(); ++v)
      worst = std::max(worst, std::abs(row[v] - expected[v]));
  }
  return worst;
}

// The "ids" of each of a generated reference variant's "sequences".
inline std::vector<std::vector<TokenId>> sequence_ids(const nlohmann::json& variant) {
  std::vector<std::vector<TokenId>> out;
  for (const auto& s : variant["sequences"]) out.push_back(s["ids"].get<std::vector<TokenId>>());
  return out;
}

// Compares `rows` (one logits row per position of the sequence) with a reference Seq whose
// positions carry `top` ("top10" / "top5") ids and logits. Checks the top-k id order where the
// reference's gap leaves no room for float32 reordering (gap > order_gap).
inline Errors compare_sequence(const std::vector<std::span<const float>>& rows,
                               const nlohmann::json& seq, const std::string& top,
                               double order_gap) {
  Errors e;
  const auto& positions = seq.at("positions");
  REQUIRE(rows.size() == positions.size());
  double nll = 0;
  for (std::size_t t = 0; t < rows.size(); ++t) {
    const auto& p = positions[t];
    const std::span<const float> row = rows[t];
    const auto ids = p.at(top + "_ids").get<std::vector<std::int32_t>>();
    const auto values = p.at(top + "_logits").get<std::vector<double>>();
    for (std::size_t i = 0; i < ids.size(); ++i)
      e.logits = std::max(e.logits, std::abs(row[ids[i]] - values[i]));
    if (p.at(top + "_min_gap").get<double>() > order_gap) {
      CAPTURE(seq.at("name"), t);
      CHECK(top_ids(row, ids.size()) == ids);
    }
    const double lse = decoding::log_sum_exp(row);
    e.logsumexp = std::max(e.logsumexp, std::abs(lse - p.at("logsumexp").get<double>()));
    if (!p.at("next_token_logprob").is_null()) {
      const double lp = row[p.at("next_token_id").get<std::int32_t>()] - lse;
      e.logprob = std::max(e.logprob, std::abs(lp - p.at("next_token_logprob").get<double>()));
      if (seq.contains("token_nll"))
        e.logprob = std::max(e.logprob, std::abs(-lp - seq.at("token_nll")[t].get<double>()));
      nll -= lp;
    }
  }
  e.total_nll = std::abs(nll - seq.at("total_nll").get<double>());
  if (seq.contains("full_logits")) {
    const auto& full = seq.at("full_logits");
    for (std::size_t i = 0; i < full.at("positions").size(); ++i) {
      const auto t = full.at("positions")[i].get<std::size_t>();
      const auto values = full.at("values")[i].get<std::vector<double>>();
      REQUIRE(values.size() == rows.at(t).size());
      for (std::size_t v = 0; v < values.size(); ++v)
        e.logits = std::max(e.logits, std::abs(rows[t][v] - values[v]));
    }
  }
  return e;
}

}  // namespace masque::test
