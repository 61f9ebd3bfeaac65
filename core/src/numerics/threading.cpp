#include "masque/threading.hpp"

#include <exception>
#include <string>

#include <omp.h>

#include "masque/error.hpp"

namespace masque {

void set_thread_count(int n) {
  if (n < 1) throw ConfigError("thread count must be at least 1, not " + std::to_string(n));
  omp_set_num_threads(n);  // OpenMP's nthreads-var is per calling thread
}

int thread_count() {
  return omp_get_max_threads();
}

ThreadScope::ThreadScope(int n) : previous_(thread_count()) {
  set_thread_count(n);
}

ThreadScope::~ThreadScope() {
  omp_set_num_threads(previous_);
}

void run_pair(const std::function<void()>& first, const std::function<void()>& second) {
  if (thread_count() < 2) {
    first();
    second();
    return;
  }
  std::exception_ptr failed[2];
#pragma omp parallel num_threads(2)
  {
    // A team of one (nested in a parallel region, or no threads to spare) runs both.
    const int me = omp_get_thread_num(), team = omp_get_num_threads();
    ThreadScope one(1);
    for (int job = me; job < 2; job += team) try {
        (job == 0 ? first : second)();
      } catch (...) {
        failed[job] = std::current_exception();
      }
  }
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
}

}  // namespace masque
