// Run-level settings: the pipeline's `run:` section (batching and input limits). They belong to
// the corpus runner, not to a task; the runner declares them here, the pipeline loader validates
// the section against them, and `masque tasks` / `masque run --help` list them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "io/records.hpp"
#include "masque/params.hpp"

namespace masque {

struct BatchingOptions {
  std::size_t max_batch_size = 32;
  std::size_t max_batch_tokens = 16384;
  std::size_t read_ahead = 0;  // 0 = 16 x max_batch_size
  // > 0 for a task that batches continuously (Task::batches_continuously): each window is cut
  // into this many groups (one per worker) instead of batches; the task keeps at most
  // max_batch_size rows of a group decoding and admits the next records as rows finish.
  std::size_t continuous_groups = 0;
  // Static batching: a window cut into fewer batches than this (the workers) has its largest
  // batches halved until each worker has one, so a small input still uses every thread.
  std::size_t workers = 1;

  // Records read ahead, prepared and sorted by length before they are cut into batches.
  std::size_t window() const { return read_ahead ? read_ahead : 16 * max_batch_size; }
};

// The parameters of the `run:` section, with types, defaults and help.
const std::vector<ParamSpec>& run_param_specs();
bool is_run_param(const std::string& key);

// The settings from validated `run:` parameters (every key present).
BatchingOptions batching_from(const Params& run_params);
// Sets the input limits (record size, invalid UTF-8) of `input`.
void apply_input_limits(const Params& run_params, InputOptions& input);

}  // namespace masque
