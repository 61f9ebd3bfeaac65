// Shared fixtures of the decoder tests: a hand-made bigram "story" model with known
// probabilities, result comparisons and one-call decoding.
#pragma once

#include <string>
#include <vector>

#include "decoder_plugins.hpp"
#include "fake_stepper.hpp"
#include "masque/decoder.hpp"

namespace masque::test {

// Token ids of the story model.
enum StoryToken : TokenId { X = 0, A = 1, END = 2, B = 3, C = 4, D = 5 };
inline constexpr std::int32_t kStoryVocab = 6;

// Probabilities by previous token (see decoder_test_helpers.cpp). The greedy path is
// a c d </s> (0.5 * 0.9 * 0.9 * 0.9); b </s> (0.45 * 0.9) is shorter and more likely.
LogitsModel story_model();

// Decodes the records with a fresh stepper; returns the results.
std::vector<DecodeResult> decode_with(const std::string& decoder, const Overrides& overrides,
                                      std::int32_t vocab, std::vector<FakeRecord> records,
                                      LogitsModel model, std::vector<TokenId> end_tokens = {END});

void require_same(const Hypothesis& a, const Hypothesis& b);
void require_same(const DecodeResult& a, const DecodeResult& b);
void require_same(const std::vector<DecodeResult>& a, const std::vector<DecodeResult>& b);

// Records with varied contexts, prefixes and limits over a `vocab` model, for invariants.
std::vector<FakeRecord> varied_records(std::int32_t count, std::int32_t vocab, std::uint64_t seed,
                                       bool with_prefixes);

}  // namespace masque::test
