#include "numerics/dnnl_context.hpp"

#include <cstdlib>
#include <memory>

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

}  // namespace masque::numerics
