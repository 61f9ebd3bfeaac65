// Random numbers that are the same on every platform and standard library (std::shuffle's and
// std::uniform_int_distribution's algorithms are unspecified): random orders, shuffles and
// masking are reproducible from a seed alone.
#pragma once

#include <cstdint>

#include <boost/config.hpp>

namespace masque {

// splitmix64 (Steele, Lea and Flood 2014): a 64-bit state advanced by a constant and mixed.
class BOOST_SYMBOL_VISIBLE SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) without modulo bias (draws past the largest multiple of n are redrawn).
  std::uint64_t below(std::uint64_t n);
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

// Mixes several values into one seed (e.g. seed, epoch, record line): nearby inputs give
// unrelated streams.
BOOST_SYMBOL_VISIBLE std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0);

}  // namespace masque
