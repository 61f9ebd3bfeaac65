// The oneDNN engine and per-thread streams shared by the numerics (internal).
#pragma once

#include <cstddef>

#include <oneapi/dnnl/dnnl.hpp>

namespace masque::numerics {

// The one CPU engine of the process.
const dnnl::engine& cpu_engine();
// The calling thread's stream: a stream is not meant to be shared between threads.
dnnl::stream& thread_stream();
// A per-thread scratch buffer of at least `bytes` (primitives use user-managed scratchpads so
// that concurrent executions never share one).
void* thread_scratchpad(std::size_t bytes);

}  // namespace masque::numerics
