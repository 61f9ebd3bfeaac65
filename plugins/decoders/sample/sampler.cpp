#include "sampler.hpp"

#include <algorithm>
#include <cmath>

#include "masque/decoding.hpp"

namespace masque::sample {

namespace {

std::uint64_t mix(std::uint64_t x) {
  return SplitMix64(x).next();
}

// The nucleus is usually small: look for it among the best 64 tokens first, then among 16
// times as many (a flat distribution's nucleus is most of the vocabulary: few rounds).
constexpr std::int32_t kFirstNucleusGuess = 64;
constexpr std::int32_t kNucleusGrowth = 16;

// The first index whose cumulative weight exceeds u * total, for one draw u in [0, 1).
std::size_t pick(std::span<const double> weights, SplitMix64& stream) {
  double total = 0;
  for (double w : weights) total += w;
  const double target = stream.uniform() * total;
  double cumulative = 0;
  std::size_t last_positive = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    cumulative += weights[i];
    last_positive = i;
    if (target < cumulative) return i;
  }
  return last_positive;  // rounding left the target past the end
}

}  // namespace

std::uint64_t SplitMix64::next() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double SplitMix64::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

SplitMix64 make_stream(std::uint64_t seed, std::uint64_t record_id, std::uint64_t hypothesis) {
  return SplitMix64(mix(mix(mix(seed) ^ record_id) ^ hypothesis));
}

TokenId Sampler::sample(std::span<const float> logits, SplitMix64& stream) {
  if (is_greedy()) return decoding::argmax(logits);
  const float max = logits[static_cast<std::size_t>(decoding::argmax(logits))];
  weights_.resize(logits.size());
  decoding::exp_weights(logits, max, options_.temperature, weights_);
  // top_k >= vocab keeps every token: the same draw as no top_k, without a selection.
  const bool top_k =
      options_.top_k > 0 && options_.top_k < static_cast<std::int32_t>(logits.size());
  const bool top_p = options_.top_p < 1.0;
  if (!top_k && !top_p) return static_cast<TokenId>(pick(weights_, stream));
  if (top_k) decoding::top_k(logits, options_.top_k, kept_);
  if (top_p) keep_nucleus(logits, top_k);
  return draw_from_kept(stream);
}

void Sampler::keep_nucleus(std::span<const float> logits, bool within_top_k) {
  double mass = 0;
  if (within_top_k) {
    for (std::int32_t t : kept_) mass += weights_[static_cast<std::size_t>(t)];
    cut_to_mass(mass);
    return;
  }
  for (double w : weights_) mass += w;
  const auto vocab = static_cast<std::int32_t>(logits.size());
  for (std::int32_t n = std::min(kFirstNucleusGuess, vocab);;
       n = static_cast<std::int32_t>(
           std::min<std::int64_t>(std::int64_t{n} * kNucleusGrowth, vocab))) {
    decoding::top_k(logits, n, kept_);
    if (cut_to_mass(mass) || n == vocab) return;
  }
}

// Keeps the shortest best-first prefix of kept_ whose weight reaches top_p * mass; false
// (kept_ unchanged) when the whole of kept_ does not reach it.
bool Sampler::cut_to_mass(double mass) {
  const double needed = options_.top_p * mass;
  double cumulative = 0;
  for (std::size_t i = 0; i < kept_.size(); ++i) {
    cumulative += weights_[static_cast<std::size_t>(kept_[i])];
    if (cumulative >= needed) {
      kept_.resize(i + 1);
      return true;
    }
  }
  return false;
}

TokenId Sampler::draw_from_kept(SplitMix64& stream) {
  // Increasing id order: a sort, or for a large kept set one pass over the vocabulary.
  if (kept_.size() * 16 > weights_.size()) {
    is_kept_.assign(weights_.size(), 0);
    for (std::int32_t t : kept_) is_kept_[static_cast<std::size_t>(t)] = 1;
    kept_.clear();
    for (std::size_t t = 0; t < is_kept_.size(); ++t)
      if (is_kept_[t]) kept_.push_back(static_cast<std::int32_t>(t));
  } else {
    std::sort(kept_.begin(), kept_.end());
  }
  kept_weights_.resize(kept_.size());
  for (std::size_t i = 0; i < kept_.size(); ++i)
    kept_weights_[i] = weights_[static_cast<std::size_t>(kept_[i])];
  return kept_[pick(kept_weights_, stream)];
}

}  // namespace masque::sample
