// The live status line on stderr during a corpus run (records, tokens/s, elapsed, ETA).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace masque {

// "mm:ss", or "h:mm:ss" from an hour on.
std::string format_duration(double seconds);

class Progress {
 public:
  // Redraws the line, at most twice a second. The ETA needs the input's size in bytes.
  void update(std::uint64_t records, std::uint64_t failed, std::uint64_t tokens,
              std::uint64_t bytes_read, std::uint64_t input_size);
  void clear();

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_;
  bool shown_ = false;
};

}  // namespace masque
