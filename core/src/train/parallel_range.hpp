// Splitting element and row loops of the training ops over the calling thread's intra-op
// threads (internal).
//
// Each index of [0, n) is handled by exactly one thread, in one contiguous piece, so an
// element-wise result does not depend on the thread count; reductions that must not either
// (parameter gradients) go through fixed-size blocks whose partial sums are added in block
// order afterwards. Work below numerics::kParallelMinFlops runs on the calling thread alone:
// small G2P-size ops never wake the OpenMP team (see masque/threading.hpp).
#pragma once

#include <omp.h>

#include <cstdint>

#include "numerics/parallel.hpp"

namespace masque::train {

template <typename Body>
void parallel_range(std::int64_t n, double flops, Body&& body) {
  const int threads = numerics::threads_for(flops);
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

}  // namespace masque::train
