#include "run/progress.hpp"

#include <algorithm>
#include <cstdio>

namespace masque {

std::string format_duration(double seconds) {
  auto s = static_cast<long>(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", s / 60, s % 60);
  return buf;
}

void Progress::update(std::uint64_t records, std::uint64_t failed, std::uint64_t tokens,
                      std::uint64_t bytes_read, std::uint64_t input_size) {
  const auto now = Clock::now();
  if (now - last_ < std::chrono::milliseconds(500)) return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  std::string line = "masque: " + std::to_string(records) + " records";
  if (failed) line += " (" + std::to_string(failed) + " failed)";
  char rate[64];
  std::snprintf(rate, sizeof rate, ", %.0f tokens/s", elapsed > 0 ? tokens / elapsed : 0.0);
  line += rate;
  line += ", " + format_duration(elapsed) + " elapsed";
  if (input_size > 0 && bytes_read > 0) {
    const double done = std::min(1.0, static_cast<double>(bytes_read) / input_size);
    char pct[32];
    std::snprintf(pct, sizeof pct, " (%.0f%% read)", 100 * done);
    line += ", ETA " + format_duration(elapsed / done - elapsed) + pct;
  }
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void Progress::clear() {
  if (shown_) std::fprintf(stderr, "\r\033[K");
  shown_ = false;
}

}  // namespace masque
