// The oneDNN engine and per-thread streams shared by the numerics (internal).
#pragma once

#include <cstddef>
#include <memory>

#include <oneapi/dnnl/dnnl.hpp>

namespace masque::numerics {

// The one CPU engine of the process.
const dnnl::engine& cpu_engine();
// The calling thread's stream: a stream is not meant to be shared between threads.
dnnl::stream& thread_stream();
// A per-thread scratch buffer of at least `bytes` (primitives use user-managed scratchpads so
// that concurrent executions never share one).
void* thread_scratchpad(std::size_t bytes);
// Memory for `md` that lives as long as a layer (packed weights); `storage` owns it and must
// outlive every memory object that uses it. Buffers of a few megabytes and more get transparent
// huge pages where the kernel allows them (THP "madvise" mode): a matmul streaming its weights
// then misses the TLB far less often.
dnnl::memory layer_memory(const dnnl::memory::desc& md, std::shared_ptr<void>& storage);
// The same for weights outside oneDNN (int4): `bytes` aligned to a cache line (to a huge page,
// with the advice, from 2 MB up), owned by `storage`.
void* weight_buffer(std::size_t bytes, std::shared_ptr<void>& storage);

}  // namespace masque::numerics
