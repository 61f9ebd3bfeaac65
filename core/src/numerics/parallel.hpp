// How many intra-op threads an op should use (internal).
//
// Waking GNU OpenMP workers costs from microseconds to milliseconds on a small VM (a worker
// whose vCPU is busy or halted stalls the whole team), so ops too small to amortise that run on
// the calling thread alone, whatever the thread count: small layers and decoding steps never
// pay for a parallel region.
#pragma once

#include <cstdint>

#include "masque/threading.hpp"

namespace masque::numerics {

// About half a millisecond of work on one core.
constexpr double kParallelMinFlops = 64e6;

inline int threads_for(double flops) {
  return flops >= kParallelMinFlops ? thread_count() : 1;
}

}  // namespace masque::numerics
