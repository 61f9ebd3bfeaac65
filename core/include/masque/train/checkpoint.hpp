// The checkpoints of a training run, kept so that one on disk is always whole.
//
//   OUT/checkpoint-000200/   a model folder `masque run` loads (config.json, model.safetensors,
//   OUT/checkpoint-000400/   tokenizer files) plus the trainer's state (trainer_state.json,
//   OUT/last -> checkpoint-000400     optimizer.safetensors)
//   OUT/best -> checkpoint-000200     (the best by validation loss; never pruned)
//
// A checkpoint is written into a hidden staging folder and renamed into place once every file
// in it is flushed; `last` and `best` are symlinks replaced by rename. A crash at any moment
// leaves the previous checkpoints and links intact, and a stale staging folder is removed the
// next time the store is opened. A pruned checkpoint is renamed to a staging name before it is
// deleted, so no partial checkpoint is ever visible.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include <boost/config.hpp>

namespace masque::train {

class BOOST_SYMBOL_VISIBLE CheckpointStore {
 public:
  // `keep_last` >= 1: how many step checkpoints to keep besides the best.
  CheckpointStore(std::filesystem::path root, int keep_last);

  const std::filesystem::path& root() const { return root_; }

  // Writes checkpoint `step`: `fill` writes its files into the folder it is given; the folder is
  // renamed to checkpoint-STEP (replacing an older one of that step), `last` points to it and
  // older checkpoints beyond `keep_last` are removed. Returns the checkpoint's path.
  std::filesystem::path save(std::int64_t step,
                             const std::function<void(const std::filesystem::path&)>& fill);
  // `best` points to checkpoint `step` (which must exist); it is kept from then on.
  void mark_best(std::int64_t step);

  // A run resumed at `step` (whose state names `best_step`, or -1): the checkpoints after
  // `step` belong to an abandoned continuation and are removed (returned), `best` points to
  // `best_step` when it is on disk (else it is removed) and `last` to `step`.
  std::vector<std::int64_t> resume_at(std::int64_t step, std::int64_t best_step);

  // Step checkpoints on disk, oldest first.
  std::vector<std::int64_t> steps() const;
  std::filesystem::path path_of(std::int64_t step) const;
  // Where `last` / `best` point, if they exist.
  std::optional<std::filesystem::path> last() const;
  std::optional<std::filesystem::path> best() const;

  // The checkpoint a `--resume DIR` means: DIR itself when it holds trainer_state.json, else
  // DIR/last. ConfigError naming DIR when neither exists.
  static std::filesystem::path resolve_resume(const std::filesystem::path& dir);

 private:
  void prune();
  void discard(const std::filesystem::path& checkpoint) const;  // removes it, never partly
  void point(const char* link, std::int64_t step);
  std::optional<std::filesystem::path> target(const char* link) const;

  std::filesystem::path root_;
  int keep_last_;
};

// Flushes a folder's entries (after a rename inside it) to disk.
void sync_directory(const std::filesystem::path& dir);

}  // namespace masque::train
