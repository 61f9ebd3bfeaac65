// The `task:` section of a training pipeline (`masque train`): what is learned from which data,
// how the optimizer runs and what is kept. Declared here with types, defaults and help; the
// pipeline loader validates a file against them and `masque tasks train` lists them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "io/records.hpp"
#include "masque/params.hpp"
#include "masque/train/objective.hpp"
#include "masque/train/trainer.hpp"
#include "pipeline.hpp"

namespace masque::train {

// The TaskSpec of `task: train` (sections: model, tokenizer, mask required; target_tokenizer).
const TaskSpec& train_task_spec();

enum class InitMode : std::uint8_t { automatic, scratch, pretrained };

struct TrainSettings {
  std::filesystem::path train_file, valid_file, output;
  InputOptions input;          // format, columns, field
  ObjectiveOptions objective;  // kind, fields, mlm/plm settings, max_tokens
  TrainerOptions trainer;      // batches, shuffle, seed, AdamW, schedule (total set later)
  std::int64_t epochs = 1, steps = 0;
  double warmup_ratio = 0;
  double max_minutes = 0;
  std::int64_t save_every = 0, valid_every = 0, log_every = 100, valid_batch_size = 64;
  int keep_last = 2;
  std::int64_t max_bad_records = 100;
  InitMode init = InitMode::automatic;
  DType matmul_dtype = DType::f32;
  float dropout = -1;  // < 0: the config's rates; else p at every place the model drops
};

// The settings of a validated `task:` section; input format `auto` is decided by the extension
// of the training file (.tsv, .jsonl / .json, else text lines).
TrainSettings train_settings(const Params& task);

}  // namespace masque::train
