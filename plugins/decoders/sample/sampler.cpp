#include "sampler.hpp"

#include <algorithm>
#include <cmath>

#include "masque/decoding.hpp"

namespace masque::sample {

namespace {

std::uint64_t mix(std::uint64_t x) {
  return SplitMix64(x).next();
}

// The nucleus is usually small: look for it among the best 64 tokens first, then double.
constexpr std::int32_t kFirstNucleusGuess = 64;

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
  max_logit_ = logits[static_cast<std::size_t>(decoding::argmax(logits))];
  if (options_.top_k == 0 && options_.top_p >= 1.0) return draw_from_all(logits, stream);
  if (options_.top_k > 0) keep_top_k(logits);
  if (options_.top_p < 1.0) keep_nucleus(logits);
  return draw_from_kept(logits, stream);
}

double Sampler::weight(float logit) const {
  return std::exp((static_cast<double>(logit) - max_logit_) / options_.temperature);
}

// Inverse CDF over the whole vocabulary in id order: no selection or sort needed.
TokenId Sampler::draw_from_all(std::span<const float> logits, SplitMix64& stream) {
  weights_.resize(logits.size());
  for (std::size_t t = 0; t < logits.size(); ++t) weights_[t] = weight(logits[t]);
  return static_cast<TokenId>(pick(weights_, stream));
}

void Sampler::keep_top_k(std::span<const float> logits) {
  decoding::top_k(logits, options_.top_k, kept_);
}

void Sampler::keep_nucleus(std::span<const float> logits) {
  if (options_.top_k > 0) {
    double mass = 0;
    for (std::int32_t t : kept_) mass += weight(logits[static_cast<std::size_t>(t)]);
    cut_to_mass(logits, mass);
    return;
  }
  double mass = 0;
  for (float x : logits) mass += weight(x);
  const auto vocab = static_cast<std::int32_t>(logits.size());
  for (std::int32_t n = std::min(kFirstNucleusGuess, vocab);; n = std::min(2 * n, vocab)) {
    decoding::top_k(logits, n, kept_);
    if (cut_to_mass(logits, mass) || n == vocab) return;
  }
}

// Keeps the shortest best-first prefix of kept_ whose weight reaches top_p * mass; false
// (kept_ unchanged) when the whole of kept_ does not reach it.
bool Sampler::cut_to_mass(std::span<const float> logits, double mass) {
  const double needed = options_.top_p * mass;
  double cumulative = 0;
  for (std::size_t i = 0; i < kept_.size(); ++i) {
    cumulative += weight(logits[static_cast<std::size_t>(kept_[i])]);
    if (cumulative >= needed) {
      kept_.resize(i + 1);
      return true;
    }
  }
  return false;
}

TokenId Sampler::draw_from_kept(std::span<const float> logits, SplitMix64& stream) {
  std::sort(kept_.begin(), kept_.end());
  weights_.resize(kept_.size());
  for (std::size_t i = 0; i < kept_.size(); ++i)
    weights_[i] = weight(logits[static_cast<std::size_t>(kept_[i])]);
  return kept_[pick(weights_, stream)];
}

}  // namespace masque::sample
