#include "masque/random.hpp"

namespace masque {

std::uint64_t SplitMix64::below(std::uint64_t n) {
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  std::uint64_t x;
  do x = next();
  while (x >= limit);
  return x % n;
}

std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  SplitMix64 first(a);
  SplitMix64 second(first.next() ^ b);
  SplitMix64 third(second.next() ^ c);
  return third.next();
}

}  // namespace masque
