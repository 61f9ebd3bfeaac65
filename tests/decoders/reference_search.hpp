// Plain, slow re-implementations used as oracles: one record at a time, every (beam, token)
// pair scored and fully sorted, logits recomputed from the whole history, no row management.
#pragma once

#include <cstdint>
#include <vector>

#include "fake_stepper.hpp"
#include "masque/decoder.hpp"
#include "masque/decoding.hpp"

namespace masque::test {

struct SearchSpec {
  std::int32_t vocab = 0;
  LogitsModel model;
  std::vector<TokenId> end_tokens;
  DecodingOptions options;  // its end_tokens are ignored: see above
  std::int32_t beam_size = 1;
  double patience = 1.0;
  std::int32_t num_hypotheses = 1;
};

// The processed logits of one row, written from the option definitions.
std::vector<float> reference_logits(const SearchSpec& spec, const FakeRecord& record,
                                    const std::vector<TokenId>& tokens);

// CTranslate2's beam search as described in the aren-transliteration README.
std::vector<Hypothesis> reference_beam(const SearchSpec& spec, const FakeRecord& record);

// Every possible output of the record (no forced prefix), scored, best first, `keep` kept.
std::vector<Hypothesis> brute_force(const SearchSpec& spec, const FakeRecord& record,
                                    std::size_t keep);

}  // namespace masque::test
