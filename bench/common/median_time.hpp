// The timing loop the micro-benchmarks share: calls are batched until a batch lasts
// min_seconds / 4 (after one warm-up call: primitive creation, page faults), then the median
// over `repeats` batches of the time per call, on the clock `now` reads.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

namespace masque::bench {

inline double median_seconds(double min_seconds, int repeats, const std::function<double()>& now,
                             const std::function<void()>& run) {
  run();
  int calls = 1;
  for (;;) {
    const double t = now();
    for (int i = 0; i < calls; ++i) run();
    if (now() - t >= min_seconds / 4 || calls >= (1 << 20)) break;
    calls *= 2;
  }
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const double t = now();
    for (int i = 0; i < calls; ++i) run();
    times.push_back((now() - t) / calls);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace masque::bench
