// The training loop: optimizer steps over micro-batches of an objective's examples
// (docs/training.md, "The loss of a step").
//
// Step s (0-based) reads the next `accumulation` micro-batches of the data (epochs follow one
// another; each epoch's order and batches as dataset.hpp cuts them), sums every predicted
// token's loss over them and divides by their count, clips the gradient's global norm, and
// applies AdamW at the schedule's lr(s). Everything that decides the next step — the step, the
// data cursor, the optimizer's moments, the parameters — is in TrainerState, which a
// checkpoint saves and a resume restores, so an interrupted run continues exactly.
#pragma once

#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include <boost/config.hpp>
#include <nlohmann/json.hpp>

#include "masque/dist.hpp"
#include "masque/error.hpp"
#include "masque/train/dataset.hpp"
#include "masque/train/loss.hpp"
#include "masque/train/network.hpp"
#include "masque/train/objective.hpp"
#include "masque/train/optimizer.hpp"
#include "masque/train/schedule.hpp"
#include "masque/train/trainable.hpp"

namespace masque::train {

struct TrainerOptions {
  std::size_t batch_size = 32;    // examples per micro-batch (a cap when max_tokens is set)
  std::int64_t max_tokens = 0;    // > 0: micro-batches by padded tokens
  std::int32_t accumulation = 1;  // micro-batches per optimizer step
  bool shuffle = true;
  std::uint64_t seed = 0;  // shuffling (and the objective's corruption)
  AdamWOptions adamw{};
  Schedule schedule{};         // its total_steps is the run's
  double max_grad_norm = 1.0;  // <= 0: no clipping
  double label_smoothing = 0.0;
  // Micro-batch shards run in parallel: each micro-batch is cut into `threads` contiguous parts,
  // each part's gradient goes to its own buffer on its own thread, and the buffers are summed in
  // part order, so a run is reproducible for a given seed and thread count.
  int threads = 1;
  int intra_threads = 1;  // oneDNN/OpenMP threads of each part's worker (threads > 1)
  // Data-parallel ranks (mpirun): each micro-batch is cut into ranks x threads parts, this rank
  // trains its `threads` of them, and the gradients, token counts and losses are summed over
  // the ranks in rank order, so every rank applies the same update. Null: one process.
  dist::Communicator* communicator = nullptr;
};

struct StepResult {
  std::int64_t step = 0;  // 1-based: the number of optimizer steps done
  double loss = 0, lr = 0, grad_norm = 0;
  std::int64_t tokens = 0;        // predicted tokens of the step (0: no update was made)
  std::int64_t input_tokens = 0;  // tokens of the step's examples (source and target)
  std::int64_t epoch = 0;         // the epoch of its last micro-batch
};

struct EvalResult {
  double loss = 0;  // mean token loss
  std::int64_t tokens = 0;
};

// A step that failed on some rank of a data-parallel job, raised on every rank at the same
// point: each rank learns of the others' failures in the step's own reductions, so none is left
// waiting in one and the job can end in order (rank 0 keeping the last whole step) instead of
// through MPI_Abort. On the rank that failed, what() is its own error.
class BOOST_SYMBOL_VISIBLE StepFailed : public RuntimeError {
 public:
  StepFailed(const std::string& what, bool here, int exit_code)
      : RuntimeError(what), here_(here), exit_code_(exit_code) {}
  bool here() const { return here_; }  // this rank's own error
  int exit_code() const { return exit_code_; }

 private:
  bool here_;
  int exit_code_;
};

class BOOST_SYMBOL_VISIBLE Trainer {
 public:
  // `network` (over `params`) and `objective` must outlive the trainer.
  Trainer(const TrainableNetwork& network, ParameterSet& params, const Objective& objective,
          std::vector<Example> examples, TrainerOptions options);
  ~Trainer();

  // One optimizer step. When it throws (a batch it cannot lay out or run), the data cursor is
  // back where it was and no parameter changed: the state is still that of steps_done() steps.
  // With several ranks, an error in laying out or running this rank's parts is StepFailed,
  // thrown on every rank.
  StepResult step();
  // Mean token loss over `examples` in file order (no corruption randomness beyond the
  // objective's seeded one; no update).
  EvalResult evaluate(const std::vector<Example>& examples, std::size_t batch_size) const;

  std::int64_t steps_done() const { return step_; }
  std::int64_t epoch() const { return epoch_; }
  const AdamW& optimizer() const { return adamw_; }
  std::size_t examples() const { return examples_.size(); }

  // Checkpoint state: the step and data cursor as JSON fields, the optimizer's moments as a
  // blob; restore() checks it fits (sizes, number of examples) and says what does not.
  nlohmann::json state() const;
  void save_optimizer(const std::filesystem::path& file) const;
  void restore(const nlohmann::json& state, const std::filesystem::path& optimizer_file);

 private:
  // The next micro-batch of the data (the cursor moves on; a new epoch starts as needed).
  std::vector<const Example*> next_micro_batch(std::int64_t& epoch);
  StepResult take_step();  // step() without the rollback
  // Throws StepFailed on every rank when `failed` ranks (summed over the job, with
  // `rank_sum` the sum of their rank + 1) failed; `own` is this rank's error, if any.
  void fail_together(std::uint64_t failed, std::uint64_t rank_sum, std::exception_ptr own) const;
  void cut_epoch();
  // Forward, loss and backward of the step's micro-batches, one thread per part; returns the
  // summed token loss (in part order) and leaves the summed gradient in params_.
  double run_parts(const std::vector<std::vector<TrainingBatch>>& parts, std::int64_t count);
  // Forward, loss (over the step's `count` predicted tokens) and backward of one part on `net`,
  // with dropout drawn from `dropout` (null: none).
  double train_part(const TrainableNetwork& net, NetworkTape& tape, const TrainingBatch& b,
                    const DropoutContext* dropout, std::int64_t count, Tensor& logits) const;
  // The dropout of part i of micro-batch a of this step (null when the network has none).
  const DropoutContext* dropout_of(std::size_t a, std::size_t i) const;

  const TrainableNetwork& network_;
  ParameterSet& params_;
  const Objective& objective_;
  std::vector<Example> examples_;
  TrainerOptions options_;
  AdamW adamw_;
  std::unique_ptr<NetworkTape> tape_;
  struct Workers;  // the parallel parts' replicas and threads (threads > 1)
  std::unique_ptr<Workers> workers_;
  std::int64_t step_ = 0;
  // The data cursor: batch `batch_` of epoch `epoch_` is next.
  std::int64_t epoch_ = 0;
  std::size_t batch_ = 0;
  std::vector<std::uint32_t> order_;  // of epoch_
  std::vector<BatchSpan> batches_;
  std::vector<std::vector<DropoutContext>> dropout_;  // the step's, like its micro-batches' parts
};

}  // namespace masque::train
