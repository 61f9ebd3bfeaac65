#include "masque/threading.hpp"

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

}  // namespace masque
