#include "numerics/dnnl_context.hpp"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include <sys/mman.h>

#include "masque/error.hpp"

namespace masque::numerics {

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

void* thread_scratchpad(std::size_t bytes) {
  struct Buffer {
    std::unique_ptr<void, decltype(&std::free)> data{nullptr, &std::free};
    std::size_t size = 0;
  };
  thread_local Buffer buffer;
  if (bytes > buffer.size) {
    std::size_t size = (bytes + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(64, size);
    if (!p)
      throw RuntimeError("out of memory allocating a " + std::to_string(size) + " byte scratchpad");
    buffer.data.reset(p);
    buffer.size = size;
  }
  return buffer.data.get();
}

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
}

void* weight_buffer(std::size_t bytes, std::shared_ptr<void>& storage) {
  const std::size_t alignment = bytes < kHugePage ? 64 : kHugePage;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, std::max<std::size_t>(bytes, 1)) != 0)
    throw RuntimeError("out of memory allocating " + std::to_string(bytes) + " bytes of weights");
  storage.reset(p, &std::free);
#ifdef MADV_HUGEPAGE
  // Advice only, on whole huge pages (a partial last one would commit memory past the end);
  // without THP the buffer simply keeps small pages.
  if (bytes >= kHugePage) madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  return p;
}

dnnl::memory layer_memory(const dnnl::memory::desc& md, std::shared_ptr<void>& storage) {
  const std::size_t bytes = md.get_size();
  if (bytes < kHugePage) {  // oneDNN's own allocation; it owns the buffer
    storage.reset();
    return dnnl::memory(md, cpu_engine());
  }
  return dnnl::memory(md, cpu_engine(), weight_buffer(bytes, storage));
}

}  // namespace masque::numerics
