// A training run as `masque train` drives it: the pipeline's plugins, the objective, the data,
// the trainer, checkpoints, validation, metrics, progress and signals (docs/training.md).
#pragma once

#include <filesystem>

#include "masque/dist.hpp"
#include "pipeline.hpp"
#include "registry.hpp"

namespace masque::train {

struct SessionOptions {
  std::filesystem::path resume;  // --resume DIR: a checkpoint, or a run folder (its `last`)
  int threads = 1;               // micro-batch parts trained in parallel
  int cores = 0;                 // 0: the machine's
  bool quiet = false;            // no progress, no per-skip lines (the summaries stay)
  // Data-parallel ranks (mpirun masque train): every rank trains its parts of each batch; rank 0
  // alone writes checkpoints, metrics and progress. Null: one process.
  dist::Communicator* communicator = nullptr;
};

// Runs the `task: train` pipeline; returns 0, or 128 + N when signal N stopped it (after a
// complete checkpoint of the last finished step), or 2 on every rank when the ranks of a
// data-parallel job would not train the same steps (rank 0 says why). Errors are thrown
// (ConfigError: exit 2).
int run_training(Pipeline pipeline, const Registry& registry, const SessionOptions& options);

}  // namespace masque::train
