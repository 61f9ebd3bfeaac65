#include "fuzz_support.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace masque::fuzz {

namespace fs = std::filesystem;

fs::path plugin_dir() {
  return MASQUE_BUILD_PLUGIN_DIR;
}
fs::path shared_dir() {
  return MASQUE_SHARED_DIR;
}

namespace {
fs::path make_scratch() {
  fs::path dir = fs::temp_directory_path() / ("masque-fuzz-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}
void remove_scratch() {
  std::error_code ec;
  fs::remove_all(scratch_dir(), ec);
}
}  // namespace

const fs::path& scratch_dir() {
  static const fs::path dir = [] {
    fs::path d = make_scratch();
    std::atexit(remove_scratch);
    return d;
  }();
  return dir;
}

Registry& registry() {
  // Never destroyed: plugin objects made from it may live until exit.
  static Registry* r = new Registry({plugin_dir()});
  return *r;
}

void write_bytes(const fs::path& file, std::string_view bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", file.c_str());
    std::abort();
  }
}

void violated(const char* what) {
  std::fprintf(stderr, "fuzz: invariant violated: %s\n", what);
  std::abort();
}

}  // namespace masque::fuzz
