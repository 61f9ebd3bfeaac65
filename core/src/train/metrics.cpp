#include "masque/train/metrics.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "masque/error.hpp"
#include "masque/safetensors_writer.hpp"

namespace masque::train {

namespace fs = std::filesystem;

// ---- MetricsLog -------------------------------------------------------------------------------

namespace {

// The lines of `file` whose step is at most `step` (lines without a step are kept).
std::string lines_up_to(const fs::path& file, std::int64_t step) {
  std::ifstream in(file);
  std::string kept, line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;  // a torn last line from a crash
    if (j.contains("step") && j["step"].is_number_integer() && j["step"].get<std::int64_t>() > step)
      continue;
    kept += line + '\n';
  }
  return kept;
}

}  // namespace

MetricsLog::MetricsLog(const fs::path& file, std::int64_t resume_step) : path_(file) {
  if (resume_step >= 0 && fs::exists(file))
    write_file_atomically(file, lines_up_to(file, resume_step));
  out_ = std::fopen(file.c_str(), resume_step >= 0 ? "ab" : "wb");
  if (!out_)
    throw ConfigError(file.string() + ": cannot open the metrics file: " + std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (out_) std::fclose(out_);
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept
    : path_(std::move(other.path_)), out_(std::exchange(other.out_, nullptr)) {}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    if (out_) std::fclose(out_);
    path_ = std::move(other.path_);
    out_ = std::exchange(other.out_, nullptr);
  }
  return *this;
}

void MetricsLog::write(const nlohmann::ordered_json& line) {
  if (!out_) return;
  const std::string text = line.dump() + '\n';
  if (std::fwrite(text.data(), 1, text.size(), out_) != text.size() || std::fflush(out_) != 0)
    throw RuntimeError(path_.string() + ": cannot write the metrics file: " + std::strerror(errno));
}

// ---- Progress ---------------------------------------------------------------------------------

Progress::Progress(std::int64_t total_steps, std::int64_t first_step, bool enabled)
    : total_(total_steps),
      first_(first_step),
      enabled_(enabled),
      start_(std::chrono::steady_clock::now()) {}

std::string Progress::format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  char text[32];
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  else if (s >= 60)
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%llds", s);
  return text;
}

void Progress::update(std::int64_t epoch, std::int64_t step, double loss, double lr,
                      double tokens_per_s) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && step < total_ && now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double done = static_cast<double>(step - first_);
  const double eta = done > 0 ? elapsed / done * static_cast<double>(total_ - step) : -1;
  std::fprintf(stderr, "\r\033[Kepoch %lld  step %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  ETA %s",
               static_cast<long long>(epoch), static_cast<long long>(step),
               static_cast<long long>(total_), loss, lr, tokens_per_s,
               format_duration(eta).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  if (enabled_ && drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace masque::train
