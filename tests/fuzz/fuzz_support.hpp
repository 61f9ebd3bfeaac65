// Shared by the fuzz targets: where the build's plugins and ../shared are, a private scratch
// folder, and one plugin registry per process. Each target defines LLVMFuzzerTestOneInput
// (and LLVMFuzzerInitialize when it loads something once); the same sources build as libFuzzer
// targets (tests/fuzz/run.sh) and as corpus replayers for CTest (replay_main.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "registry.hpp"

namespace masque::fuzz {

std::filesystem::path plugin_dir();  // the build's plugin directory
std::filesystem::path shared_dir();  // ../shared: real vocabularies and models
// A folder private to this process, created on first use and removed at exit.
const std::filesystem::path& scratch_dir();
// The plugins of plugin_dir(), loaded once.
Registry& registry();

// Writes `bytes` to `file` (truncating); aborts when it cannot, since a fuzz run that silently
// tests nothing is worse than one that stops.
void write_bytes(const std::filesystem::path& file, std::string_view bytes);

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A broken invariant: abort so libFuzzer (or the replay test) reports the input.
[[noreturn]] void violated(const char* what);
#define MASQUE_FUZZ_CHECK(cond)                   \
  do {                                            \
    if (!(cond)) ::masque::fuzz::violated(#cond); \
  } while (0)

}  // namespace masque::fuzz
