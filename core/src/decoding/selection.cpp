// Numeric building blocks of the decoders: log-softmax normalizer, arg-max, partial top-k,
// score normalization and hypothesis ordering.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "masque/decoding.hpp"

// The vocabulary-wide loops (GPT-2: 50257 entries per row and step) are compiled for AVX-512,
// AVX2 and baseline x86-64 and picked at load time (GCC function multiversioning).
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define MASQUE_DECODING_VECTORIZE \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MASQUE_DECODING_VECTORIZE
#endif

namespace masque::decoding {

namespace {

// e^t for t <= 0 in double precision (relative error ~1e-15), branch-free so that loops over
// it vectorize: std::exp costs ~13 ns per call, which a 50k vocabulary turns into 0.65 ms per
// row and step. Cody-Waite reduction t = n ln2 + r, |r| <= ln2/2, a degree-12 Taylor
// polynomial for e^r, and 2^n built from its bits. Below -708 the result is e^-708 (~3e-308)
// instead of underflowing: negligible in a sum whose largest term is 1.
inline double exp_nonpositive(double t) {
  t = t < -708.0 ? -708.0 : t;
  constexpr double kRound = 0x1.8p52;  // adding it rounds to an integer, kept in the low bits
  const double shifted = t * 1.4426950408889634 + kRound;
  const double n = shifted - kRound;
  const double r = (t - n * 0.6931471803691238) - n * 1.9082149292705877e-10;
  double p = 1.0 / 479001600.0;  // 1/12!
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const std::int64_t exponent =
      std::bit_cast<std::int64_t>(shifted) - std::bit_cast<std::int64_t>(kRound);
  return p * std::bit_cast<double>((exponent + 1023) << 52);
}

// Both reductions keep kLanes independent partial results (combined in a fixed order), so
// the loops vectorize without reassociating floating point: every ISA clone gives the same
// bits, and decoding results do not depend on the machine.
constexpr std::size_t kLanes = 8;

MASQUE_DECODING_VECTORIZE float max_value(std::span<const float> values) {
  float lanes[kLanes];
  std::fill(std::begin(lanes), std::end(lanes), -std::numeric_limits<float>::infinity());
  const std::size_t body = values.size() - values.size() % kLanes;
  for (std::size_t i = 0; i < body; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j)
      lanes[j] = values[i + j] > lanes[j] ? values[i + j] : lanes[j];
  float max = -std::numeric_limits<float>::infinity();
  for (std::size_t i = body; i < values.size(); ++i) max = values[i] > max ? values[i] : max;
  for (float lane : lanes) max = lane > max ? lane : max;
  return max;
}

MASQUE_DECODING_VECTORIZE double sum_exp_below(std::span<const float> values, float max) {
  double lanes[kLanes] = {};
  const std::size_t body = values.size() - values.size() % kLanes;
  for (std::size_t i = 0; i < body; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j)
      lanes[j] += exp_nonpositive(static_cast<double>(values[i + j]) - max);
  double sum = 0;
  for (std::size_t i = body; i < values.size(); ++i)
    sum += exp_nonpositive(static_cast<double>(values[i]) - max);
  for (double lane : lanes) sum += lane;
  return sum;
}

// For small k: one pass keeping a sorted buffer; most values fail the first comparison.
void top_k_insertion(std::span<const float> values, std::int32_t k,
                     std::vector<std::int32_t>& out) {
  out.clear();
  float worst = -std::numeric_limits<float>::infinity();  // of out, once it is full
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(values.size()); ++i) {
    const float v = values[i];
    const bool full = static_cast<std::int32_t>(out.size()) == k;
    if (full && !(v > worst)) continue;
    if (!full) out.push_back(i);
    // Shift worse entries right; equal values stay ahead (they have smaller indices).
    std::size_t pos = out.size() - 1;
    while (pos > 0 && v > values[out[pos - 1]]) {
      out[pos] = out[pos - 1];
      --pos;
    }
    out[pos] = i;
    if (static_cast<std::int32_t>(out.size()) == k) worst = values[out.back()];
  }
}

// The candidates' order (larger value first, then smaller index) as one unsigned key each:
// ascending keys are best first. The value's bits, mapped so that a larger value gives a
// smaller number (-0 counts as +0, as == has it), above the index.
std::uint64_t better_key(float value, std::int32_t index) {
  const std::uint32_t bits = value == 0.0f ? 0u : std::bit_cast<std::uint32_t>(value);
  const std::uint32_t rank = (bits & 0x80000000u) ? bits : (~bits & 0x7fffffffu);
  return (std::uint64_t{rank} << 32) | static_cast<std::uint32_t>(index);
}

// Sorts keys made in index order by their upper 32 bits, stably (so ties stay in index order):
// an LSD radix sort, three passes of 11, 11 and 10 bits.
void radix_sort_ranks(std::vector<std::uint64_t>& keys, std::vector<std::uint64_t>& spare) {
  spare.resize(keys.size());
  for (const int shift : {32, 43, 54}) {
    std::size_t start[2049] = {};
    for (std::uint64_t key : keys) ++start[((key >> shift) & 2047u) + 1];
    for (std::size_t d = 1; d < 2049; ++d) start[d] += start[d - 1];
    for (std::uint64_t key : keys) spare[start[(key >> shift) & 2047u]++] = key;
    keys.swap(spare);
  }
}

// Up to this many candidates a comparison sort of all the keys beats the radix sort, whose
// 2,048-bucket histograms cost more than the keys (stories260k's 512: 5 against 8 us).
constexpr std::size_t kSmallVocabulary = 1024;

// For large k: selection on packed keys, then a sort of the k selected only; for k near the
// whole vocabulary (nucleus sampling of a flat distribution) a sort of all of them, a radix
// sort for a large vocabulary. Keys are unique (the index is in them): every way gives the
// same order.
void top_k_select(std::span<const float> values, std::int32_t k, std::vector<std::int32_t>& out) {
  thread_local std::vector<std::uint64_t> keys, spare;
  keys.resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    keys[i] = better_key(values[i], static_cast<std::int32_t>(i));
  const auto first_k = keys.begin() + k;
  const bool small = keys.size() <= kSmallVocabulary;
  if (small && static_cast<std::size_t>(k) * 2 >= keys.size()) {
    std::sort(keys.begin(), keys.end());
  } else if (!small && static_cast<std::size_t>(k) * 8 >= keys.size()) {
    radix_sort_ranks(keys, spare);
  } else {
    std::nth_element(keys.begin(), first_k, keys.end());
    std::sort(keys.begin(), first_k);
  }
  out.resize(static_cast<std::size_t>(k));
  for (std::int32_t i = 0; i < k; ++i) out[i] = static_cast<std::int32_t>(keys[i] & 0xffffffffu);
}

constexpr std::int32_t kInsertionMaxK = 16;

}  // namespace

double log_sum_exp(std::span<const float> logits) {
  const float max = max_value(logits);
  if (max == -std::numeric_limits<float>::infinity()) return max;
  return max + std::log(sum_exp_below(logits, max));
}

MASQUE_DECODING_VECTORIZE void exp_weights(std::span<const float> values, float max,
                                           double temperature, std::span<double> out) {
  for (std::size_t i = 0; i < values.size(); ++i)
    out[i] = exp_nonpositive((static_cast<double>(values[i]) - max) / temperature);
}

// Two passes: a vectorized maximum, then the first position holding it.
std::int32_t argmax(std::span<const float> values) {
  const float max = max_value(values);
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i] == max) return static_cast<std::int32_t>(i);
  return 0;  // all NaN
}

void top_k(std::span<const float> values, std::int32_t k, std::vector<std::int32_t>& out) {
  k = std::clamp<std::int32_t>(k, 0, static_cast<std::int32_t>(values.size()));
  if (k == 0)
    out.clear();
  else if (k <= kInsertionMaxK)
    top_k_insertion(values, k, out);
  else
    top_k_select(values, k, out);
}

double normalized_score(double logprob_sum, std::size_t length, double length_penalty) {
  if (length == 0) return 0.0;
  return logprob_sum / std::pow(static_cast<double>(length), length_penalty);
}

void sort_hypotheses(std::vector<Hypothesis>& hypotheses, std::size_t keep) {
  std::stable_sort(hypotheses.begin(), hypotheses.end(),
                   [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
  if (hypotheses.size() > keep) hypotheses.resize(keep);
}

bool is_identity(std::span<const std::int32_t> rows, std::size_t current_rows) {
  if (rows.size() != current_rows) return false;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i] != static_cast<std::int32_t>(i)) return false;
  return true;
}

TokenChooser::~TokenChooser() = default;

}  // namespace masque::decoding
