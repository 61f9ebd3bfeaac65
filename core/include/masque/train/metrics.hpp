// What a training run tells its user: a metrics file of JSON lines, always, and one live
// progress line on a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include <boost/config.hpp>
#include <nlohmann/json.hpp>

namespace masque::train {

// Appends one JSON object per line and flushes it, so `tail -f` and a crash see whole lines.
// A resumed run opens the file again and drops the lines of steps after its checkpoint.
class BOOST_SYMBOL_VISIBLE MetricsLog {
 public:
  MetricsLog() = default;
  // Opens `file` for appending; with `resume_step` >= 0 keeps only lines whose "step" is at most
  // resume_step (a resumed run rewrites what happened after its checkpoint).
  MetricsLog(const std::filesystem::path& file, std::int64_t resume_step = -1);
  ~MetricsLog();
  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&& other) noexcept;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::ordered_json& line);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::FILE* out_ = nullptr;
};

// A single status line, redrawn at most every 200 ms on a terminal (stderr), e.g.
//   epoch 2  step 340/1000  loss 2.3142  lr 4.1e-04  1,832 tok/s  ETA 6m02s
// Off a terminal it prints nothing; the metrics file has everything.
class BOOST_SYMBOL_VISIBLE Progress {
 public:
  Progress(std::int64_t total_steps, std::int64_t first_step, bool enabled);
  void update(std::int64_t epoch, std::int64_t step, double loss, double lr, double tokens_per_s);
  // Ends the line (a newline after the last redraw).
  void finish();

  static std::string format_duration(double seconds);  // "6m02s", "1h04m", "12s"

 private:
  std::int64_t total_, first_;
  bool enabled_, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace masque::train
