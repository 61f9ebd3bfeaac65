// Learning-rate schedules, as Hugging Face transformers' optimization.py writes them.
//
// lr(s) = base_lr * factor(s) at optimizer step s = 0, 1, ... (the value LambdaLR gives the
// optimizer for its (s+1)-th step), with w warmup and T total steps:
//   warmup (all kinds): s < w: s / max(1, w)      (so the first step has lr 0 when w > 0)
//   constant  (get_constant_schedule_with_warmup): 1
//   linear    (get_linear_schedule_with_warmup):   max(0, (T - s) / max(1, T - w))
//   cosine    (get_cosine_schedule_with_warmup):   max(0, 0.5 (1 + cos(pi * cycles * 2 * q))),
//             q = (s - w) / max(1, T - w), cycles = 0.5 by default
#pragma once

#include <cstdint>
#include <string_view>

namespace masque::train {

enum class ScheduleKind : std::uint8_t { constant, linear, cosine };

// "constant", "linear", "cosine"; ConfigError naming the value otherwise.
ScheduleKind parse_schedule(std::string_view name);
const char* to_string(ScheduleKind kind);

struct Schedule {
  ScheduleKind kind = ScheduleKind::linear;
  double base_lr = 5e-5;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 0;  // linear and cosine
  double cycles = 0.5;           // cosine

  double factor(std::int64_t step) const;
  double lr(std::int64_t step) const { return base_lr * factor(step); }
};

}  // namespace masque::train
