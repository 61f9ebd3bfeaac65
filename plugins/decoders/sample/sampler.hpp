// Random sampling of one token, reproducible on every platform.
//
// Procedure for one step of one sequence (the logits are already processed: penalties etc.):
// 1. temperature 0 or top_k 1: the arg-max (smallest id on ties); no random number is drawn.
// 2. Weights w(t) = exp((logit(t) - max logit) / temperature), in double
//    (masque::decoding::exp_weights).
// 3. The kept set: all tokens, or with 0 < top_k < vocab the top_k best (ties: smaller id);
//    then, with top_p < 1, only the smallest best-first prefix of that set whose weight
//    reaches top_p times the set's total weight (top-k first, as Hugging Face does).
// 4. One 64-bit draw x from the sequence's stream, u = (x >> 11) * 2^-53 in [0, 1). Walking
//    the kept tokens in increasing id order, the result is the first token whose cumulative
//    weight exceeds u times the kept total.
// The stream is splitmix64 seeded with mix(mix(mix(seed) ^ record_id) ^ hypothesis), where
// mix(x) is the first splitmix64 output from state x: one stream per record and hypothesis,
// so a record's samples do not depend on its batch, its position or the thread count.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "masque/tokenizer.hpp"

namespace masque::sample {

// splitmix64 (Steele, Lea and Flood, 2014): small, fast and fully specified.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next();
  double uniform();  // [0, 1) with 53 random bits

 private:
  std::uint64_t state_;
};

// The stream of one (record, hypothesis) pair.
SplitMix64 make_stream(std::uint64_t seed, std::uint64_t record_id, std::uint64_t hypothesis);

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy
  std::int32_t top_k = 0;    // 0: no limit
  double top_p = 1.0;        // 1: no limit
};

// Holds scratch buffers: one instance per decode() call.
class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : options_(options) {}
  TokenId sample(std::span<const float> logits, SplitMix64& stream);

 private:
  bool is_greedy() const { return options_.temperature == 0 || options_.top_k == 1; }
  void keep_nucleus(std::span<const float> logits, bool within_top_k);
  bool cut_to_mass(double mass);
  TokenId draw_from_kept(SplitMix64& stream);

  SamplingOptions options_;
  std::vector<double> weights_;        // of every token
  std::vector<std::int32_t> kept_;     // the kept set
  std::vector<double> kept_weights_;   // its weights, in increasing id order
  std::vector<std::uint8_t> is_kept_;  // per token, while ordering a large kept set
};

}  // namespace masque::sample
