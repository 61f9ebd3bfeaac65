// How many intra-op threads an op should use (internal).
//
// Waking GNU OpenMP workers costs from microseconds to milliseconds on a small VM (a worker
// whose vCPU is busy or halted stalls the whole team), so ops too small to amortise that run on
// the calling thread alone, whatever the thread count: small layers and decoding steps never
// pay for a parallel region.
#pragma once

#include <omp.h>

#include <cstdint>

#include "masque/threading.hpp"

namespace masque::numerics {

// About half a millisecond of work on one core.
constexpr double kParallelMinFlops = 64e6;

inline int threads_for(double flops) {
  return flops >= kParallelMinFlops ? thread_count() : 1;
}

// Splits an element or row loop over [0, n) across threads_for(flops) threads: each index is
// handled by exactly one thread, in one contiguous piece, so an element-wise result does not
// depend on the thread count; reductions that must not either (parameter gradients) go through
// fixed-size blocks whose partial sums are added in block order afterwards.
template <typename Body>
void parallel_range(std::int64_t n, double flops, Body&& body) {
  const int threads = threads_for(flops);
  if (threads <= 1 || n < 2) {
    if (n > 0) body(std::int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const std::int64_t t = omp_get_thread_num(), k = omp_get_num_threads();
    const std::int64_t begin = n * t / k, end = n * (t + 1) / k;
    if (begin < end) body(begin, end);
  }
}

}  // namespace masque::numerics
