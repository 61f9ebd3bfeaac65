// Learning-rate schedules (Hugging Face transformers' formulas; see schedule.hpp).
#include "masque/train/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "masque/error.hpp"

namespace masque::train {

ScheduleKind parse_schedule(std::string_view name) {
  if (name == "constant") return ScheduleKind::constant;
  if (name == "linear") return ScheduleKind::linear;
  if (name == "cosine") return ScheduleKind::cosine;
  throw ConfigError("unknown learning-rate schedule '" + std::string(name) +
                    "' (expected constant, linear or cosine)");
}

const char* to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::constant:
      return "constant";
    case ScheduleKind::linear:
      return "linear";
    case ScheduleKind::cosine:
      return "cosine";
  }
  return "?";
}

double Schedule::factor(std::int64_t step) const {
  const auto s = static_cast<double>(step);
  const auto w = static_cast<double>(warmup_steps);
  const auto t = static_cast<double>(total_steps);
  if (step < warmup_steps) return s / std::max(1.0, w);
  switch (kind) {
    case ScheduleKind::constant:
      return 1.0;
    case ScheduleKind::linear:
      return std::max(0.0, (t - s) / std::max(1.0, t - w));
    case ScheduleKind::cosine: {
      const double progress = (s - w) / std::max(1.0, t - w);
      return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * cycles * 2.0 * progress)));
    }
  }
  return 1.0;
}

}  // namespace masque::train
