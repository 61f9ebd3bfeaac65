// The oneDNN engine and per-thread stream the plugin's RNN primitives run on (inference and
// training); libmasque keeps its own private ones.
#pragma once

#include <dnnl.hpp>

namespace masque::rnn {

inline dnnl::engine& cpu() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

inline dnnl::stream& stream() {
  thread_local dnnl::stream s(cpu());
  return s;
}

}  // namespace masque::rnn
