#include "decoder_test_helpers.hpp"

#include <catch2/catch.hpp>

namespace masque::test {

LogitsModel story_model() {
  //                            x      a      </s>   b      c      d
  return bigram_model({
      {-1, /* start */ {0.020, 0.500, 0.010, 0.450, 0.013, 0.007}},
      {A, /*  a  */ {0.020, 0.006, 0.040, 0.030, 0.900, 0.004}},
      {C, /*  c  */ {0.010, 0.020, 0.050, 0.015, 0.005, 0.900}},
      {D, /*  d  */ {0.015, 0.030, 0.900, 0.025, 0.020, 0.010}},
      {B, /*  b  */ {0.015, 0.030, 0.900, 0.010, 0.025, 0.020}},
      {X, /*  x  */ {0.010, 0.020, 0.900, 0.030, 0.025, 0.015}},
      {END, /* </s> */ {0.200, 0.250, 0.100, 0.150, 0.180, 0.120}},
  });
}

std::vector<DecodeResult> decode_with(const std::string& decoder, const Overrides& overrides,
                                      std::int32_t vocab, std::vector<FakeRecord> records,
                                      LogitsModel model, std::vector<TokenId> end_tokens) {
  FakeStepper stepper(vocab, std::move(records), std::move(model), std::move(end_tokens));
  return make_decoder(decoder, overrides)->decode(stepper);
}

void require_same(const Hypothesis& a, const Hypothesis& b) {
  REQUIRE(a.tokens == b.tokens);
  REQUIRE(a.logprobs == b.logprobs);
  REQUIRE(a.score == Approx(b.score).epsilon(1e-12).margin(1e-12));
  REQUIRE(a.finished == b.finished);
}

void require_same(const DecodeResult& a, const DecodeResult& b) {
  REQUIRE(a.hypotheses.size() == b.hypotheses.size());
  for (std::size_t i = 0; i < a.hypotheses.size(); ++i)
    require_same(a.hypotheses[i], b.hypotheses[i]);
}

void require_same(const std::vector<DecodeResult>& a, const std::vector<DecodeResult>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("record " << i);
    require_same(a[i], b[i]);
  }
}

std::vector<FakeRecord> varied_records(std::int32_t count, std::int32_t vocab, std::uint64_t seed,
                                       bool with_prefixes) {
  std::vector<FakeRecord> records;
  std::uint64_t state = seed;
  auto next = [&state](std::uint32_t bound) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::int32_t>((state >> 33) % bound);
  };
  for (std::int32_t r = 0; r < count; ++r) {
    FakeRecord rec;
    rec.id = 1000 + static_cast<std::uint64_t>(r) * 7 + seed;
    for (std::int32_t i = next(4); i > 0; --i) rec.context.push_back(next(vocab));
    if (with_prefixes)
      for (std::int32_t i = next(4) - 1; i > 0; --i) rec.prefix.push_back(next(vocab));
    rec.max_steps = next(3) == 0 ? -1 : next(9);
    records.push_back(rec);
  }
  return records;
}

}  // namespace masque::test
