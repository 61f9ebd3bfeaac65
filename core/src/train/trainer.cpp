#include "masque/train/trainer.hpp"

#include <cstdint>
#include <exception>
#include <fstream>
#include <latch>
#include <mutex>
#include <sstream>

#include "masque/error.hpp"
#include "masque/safetensors_writer.hpp"
#include "run/thread_pool.hpp"

namespace masque::train {

namespace {

std::vector<std::int64_t> sizes_of(const ParameterSet& params) {
  std::vector<std::int64_t> sizes;
  for (const auto& e : params.entries()) sizes.push_back(e.value.numel());
  return sizes;
}

// `examples` cut into at most `parts` contiguous, non-empty runs of near-equal size.
std::vector<std::span<const Example* const>> split(const std::vector<const Example*>& examples,
                                                   int parts) {
  std::vector<std::span<const Example* const>> out;
  const std::size_t n = examples.size();
  const std::size_t k = std::min<std::size_t>(n, static_cast<std::size_t>(std::max(1, parts)));
  for (std::size_t i = 0, begin = 0; i < k; ++i) {
    const std::size_t end = n * (i + 1) / k;
    out.emplace_back(examples.data() + begin, end - begin);
    begin = end;
  }
  return out;
}

// An integer of a trainer state in [low, high], or a ConfigError "FILE: KEY: ...".
std::int64_t state_int(const nlohmann::json& state, const char* key, std::int64_t low,
                       std::int64_t high, const std::string& file) {
  if (!state.contains(key)) throw ConfigError(file + ": " + key + ": missing");
  const nlohmann::json& v = state[key];
  if (!v.is_number_integer())
    throw ConfigError(file + ": " + key + ": expected an integer, got " + v.dump());
  const bool huge = v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX;
  if (huge || v.get<std::int64_t>() < low || v.get<std::int64_t>() > high)
    throw ConfigError(file + ": " + key + ": " + v.dump() + " is outside [" + std::to_string(low) +
                      ", " + std::to_string(high) + "]");
  return v.get<std::int64_t>();
}

}  // namespace

// Part 0 runs on the master parameters; part w > 0 on a replica that shares the values and has
// its own gradient buffers, network and tape.
struct Trainer::Workers {
  Workers(const TrainableNetwork& network, ParameterSet& params, int threads, int intra)
      : pool(threads, intra) {
    for (int w = 1; w < threads; ++w) {
      auto& r = replicas.emplace_back(std::make_unique<ParameterSet>(params));
      for (auto& e : r->entries()) e.grad = Tensor::zeros(e.value.shape());
      nets.push_back(network.replica(*r));
    }
    for (int w = 0; w < threads; ++w) tapes.push_back(network.new_tape());
  }
  ThreadPool pool;
  std::vector<std::unique_ptr<ParameterSet>> replicas;
  std::vector<std::unique_ptr<TrainableNetwork>> nets;
  std::vector<std::unique_ptr<NetworkTape>> tapes;
};

Trainer::~Trainer() = default;

Trainer::Trainer(const TrainableNetwork& network, ParameterSet& params, const Objective& objective,
                 std::vector<Example> examples, TrainerOptions options)
    : network_(network),
      params_(params),
      objective_(objective),
      examples_(std::move(examples)),
      options_(std::move(options)),
      tape_(network.new_tape()) {
  if (examples_.empty()) throw ConfigError("training: no usable training records");
  if (options_.accumulation < 1) throw ConfigError("accumulation must be at least 1");
  if (options_.threads < 1) throw ConfigError("threads must be at least 1");
  const std::vector<std::int64_t> sizes = sizes_of(params_);
  adamw_ = AdamW(options_.adamw, sizes);
  if (options_.threads > 1)
    workers_ = std::make_unique<Workers>(network_, params_, options_.threads,
                                         std::max(1, options_.intra_threads));
  cut_epoch();
}

void Trainer::cut_epoch() {
  order_ = epoch_order(examples_.size(), options_.seed, epoch_, options_.shuffle);
  batches_ = cut_batches(order_, examples_, options_.batch_size, options_.max_tokens);
}

std::vector<const Example*> Trainer::next_micro_batch(std::int64_t& epoch) {
  if (batch_ >= batches_.size()) {
    ++epoch_;
    batch_ = 0;
    cut_epoch();
  }
  const BatchSpan span = batches_[batch_++];
  std::vector<const Example*> batch;
  for (std::size_t i = span.begin; i < span.end; ++i) batch.push_back(&examples_[order_[i]]);
  epoch = epoch_;
  return batch;
}

StepResult Trainer::step() {
  const std::int64_t epoch = epoch_;
  const std::size_t batch = batch_;
  try {
    return take_step();
  } catch (...) {
    // The update is the step's last act, so only the cursor moved: put it back.
    if (epoch_ != epoch) {
      epoch_ = epoch;
      cut_epoch();
    }
    batch_ = batch;
    throw;
  }
}

StepResult Trainer::take_step() {
  // Lay this rank's parts of the step's micro-batches out first: the loss divides by all their
  // predicted tokens (over every rank).
  dist::Communicator* comm = options_.communicator;
  const int ranks = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  const auto own_begin = static_cast<std::size_t>(rank * options_.threads);
  const auto own_end = own_begin + static_cast<std::size_t>(options_.threads);
  std::vector<std::vector<TrainingBatch>> micro;
  std::int64_t count = 0, epoch = 0, input_tokens = 0;
  const bool dropout = network_.options().dropout.any();
  dropout_.clear();
  // With several ranks, an error here or in run_parts is kept until every rank has heard of it
  // in the next reduction (fail_together): a rank that threw at once would leave the others
  // waiting in that reduction, and the job could only end through MPI_Abort.
  std::exception_ptr error;
  try {
    for (std::int32_t a = 0; a < options_.accumulation; ++a) {
      const std::vector<const Example*> examples = next_micro_batch(epoch);
      for (const Example* e : examples) input_tokens += e->tokens();
      auto& parts = micro.emplace_back();
      auto& contexts = dropout_.emplace_back();
      const auto all = split(examples, options_.threads * ranks);
      for (std::size_t i = own_begin; i < std::min(own_end, all.size()); ++i) {
        parts.push_back(objective_.lay_out(all[i], epoch));
        count += parts.back().count();
        if (!dropout) continue;
        // A record's masks follow it (its micro-batch and line), not its place in the part.
        DropoutContext& c = contexts.emplace_back();
        c.seed = options_.seed;
        c.step = static_cast<std::uint64_t>(step_);
        for (const Example* e : all[i])
          c.records.push_back(dropout_record(static_cast<std::uint64_t>(a), e->line));
      }
    }
  } catch (...) {
    if (ranks == 1) throw;
    error = std::current_exception();
  }
  if (ranks > 1) {
    std::uint64_t total[3] = {static_cast<std::uint64_t>(count), error ? 1u : 0u,
                              error ? static_cast<std::uint64_t>(rank) + 1 : 0u};
    comm->all_reduce_sum(std::span<std::uint64_t>(total));
    fail_together(total[1], total[2], error);
    count = static_cast<std::int64_t>(total[0]);
  }
  StepResult r;
  r.input_tokens = input_tokens;
  r.epoch = epoch;
  r.lr = options_.schedule.lr(step_);
  if (count == 0) {
    // Nothing to learn from (mlm chose no token in these records): no update, as the loss and
    // its gradient are empty; the step still counts, so the schedule and the data move on.
    r.step = ++step_;
    return r;
  }
  double loss_sum = 0;
  try {
    loss_sum = run_parts(micro, count);
  } catch (...) {
    if (ranks == 1) throw;
    error = std::current_exception();
  }
  if (ranks > 1) {
    // The failure counts ride on the loss's reduction (small integers: exact in a double).
    double sums[3] = {loss_sum, error ? 1.0 : 0.0, error ? rank + 1.0 : 0.0};
    comm->all_reduce_sum(std::span<double>(sums));
    fail_together(static_cast<std::uint64_t>(sums[1]), static_cast<std::uint64_t>(sums[2]), error);
    loss_sum = sums[0];
    for (auto& e : params_.entries())
      comm->all_reduce_sum(
          std::span<float>(e.grad.f32(), static_cast<std::size_t>(e.grad.numel())));
  }
  std::vector<std::span<float>> grads;
  std::vector<Parameter> update;
  for (auto& e : params_.entries()) {
    grads.emplace_back(e.grad.f32(), static_cast<std::size_t>(e.grad.numel()));
    update.push_back({e.value.f32(), e.grad.f32(), e.value.numel(), e.decays()});
  }
  r.grad_norm = grad_norm(grads);
  adamw_.step(update, r.lr, clip_coefficient(r.grad_norm, options_.max_grad_norm));
  r.step = ++step_;
  r.loss = loss_sum / static_cast<double>(count);
  r.tokens = count;
  return r;
}

void Trainer::fail_together(std::uint64_t failed, std::uint64_t rank_sum,
                            std::exception_ptr own) const {
  if (failed == 0) return;
  if (own) {
    try {
      std::rethrow_exception(own);
    } catch (const ConfigError& e) {
      throw StepFailed(e.what(), true, kExitUsage);
    } catch (const std::exception& e) {
      throw StepFailed(e.what(), true, kExitRuntime);
    } catch (...) {
      throw StepFailed("an exception that is not a std::exception", true, kExitRuntime);
    }
  }
  const std::string who =
      failed == 1 ? "rank " + std::to_string(rank_sum - 1) : std::to_string(failed) + " ranks";
  throw StepFailed("step " + std::to_string(step_ + 1) + " failed on " + who +
                       " (its error is above): every rank stopped before it",
                   false, kExitRuntime);
}

const DropoutContext* Trainer::dropout_of(std::size_t a, std::size_t i) const {
  if (a >= dropout_.size() || i >= dropout_[a].size()) return nullptr;
  return &dropout_[a][i];
}

double Trainer::train_part(const TrainableNetwork& net, NetworkTape& tape, const TrainingBatch& b,
                           const DropoutContext* dropout, std::int64_t count,
                           Tensor& logits) const {
  const CrossEntropyOptions ce{.label_smoothing = options_.label_smoothing, .weights = b.weights};
  net.forward(b, tape, logits, dropout);
  const double loss =
      cross_entropy(logits, b.labels, static_cast<double>(count), ce, &logits).loss_sum;
  net.backward(tape, logits);
  return loss;
}

double Trainer::run_parts(const std::vector<std::vector<TrainingBatch>>& micro,
                          std::int64_t count) {
  params_.zero_grads();
  if (!workers_) {
    double loss_sum = 0;
    Tensor logits;
    for (std::size_t a = 0; a < micro.size(); ++a)
      for (std::size_t i = 0; i < micro[a].size(); ++i)
        loss_sum += train_part(network_, *tape_, micro[a][i], dropout_of(a, i), count, logits);
    return loss_sum;
  }
  Workers& w = *workers_;
  for (auto& r : w.replicas) r->zero_grads();
  const std::size_t threads = static_cast<std::size_t>(options_.threads);
  std::vector<double> losses(threads, 0.0);
  std::vector<std::exception_ptr> errors(threads);
  std::latch done(static_cast<std::ptrdiff_t>(threads));
  for (std::size_t t = 0; t < threads; ++t)
    w.pool.submit([&, t] {
      try {
        const TrainableNetwork& net = t == 0 ? network_ : *w.nets[t - 1];
        Tensor logits;
        for (std::size_t a = 0; a < micro.size(); ++a) {
          if (t < micro[a].size())
            losses[t] += train_part(net, *w.tapes[t], micro[a][t], dropout_of(a, t), count, logits);
        }
      } catch (...) {
        errors[t] = std::current_exception();
      }
      done.count_down();
    });
  done.wait();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  double loss_sum = 0;
  for (double l : losses) loss_sum += l;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    std::vector<const float*> parts{params_[i].grad.f32()};
    for (auto& r : w.replicas) parts.push_back((*r)[i].grad.f32());
    sum_in_order(parts, params_[i].grad.numel(), params_[i].grad.f32());
  }
  return loss_sum;
}

EvalResult Trainer::evaluate(const std::vector<Example>& examples, std::size_t batch_size) const {
  const std::vector<std::uint32_t> order = epoch_order(examples.size(), 0, 0, false);
  const std::vector<BatchSpan> spans = cut_batches(order, examples, batch_size, 0);
  std::unique_ptr<NetworkTape> tape = network_.new_tape();
  double loss_sum = 0;
  EvalResult r;
  Tensor logits;
  for (const BatchSpan& span : spans) {
    std::vector<const Example*> batch;
    for (std::size_t i = span.begin; i < span.end; ++i) batch.push_back(&examples[i]);
    const TrainingBatch b = objective_.lay_out(batch, 0);
    r.tokens += b.count();
    if (b.labels.empty()) continue;
    network_.forward(b, *tape, logits, nullptr);
    loss_sum += cross_entropy(logits, b.labels, 1.0, {.weights = b.weights}, nullptr).loss_sum;
  }
  r.loss = r.tokens > 0 ? loss_sum / static_cast<double>(r.tokens) : 0.0;
  return r;
}

nlohmann::json Trainer::state() const {
  return {{"step", step_},
          {"epoch", epoch_},
          {"batch_in_epoch", batch_},
          {"examples", examples_.size()},
          {"seed", options_.seed},
          {"shuffle", options_.shuffle},
          {"batch_size", options_.batch_size},
          {"max_tokens", options_.max_tokens},
          {"accumulation", options_.accumulation}};
}

void Trainer::save_optimizer(const std::filesystem::path& file) const {
  std::ostringstream out;
  adamw_.save(out);
  write_file_atomically(file, out.str());
}

void Trainer::restore(const nlohmann::json& state, const std::filesystem::path& optimizer_file) {
  const std::string file = (optimizer_file.parent_path() / "trainer_state.json").string();
  if (!state.is_object()) throw ConfigError(file + ": not a trainer state (not a JSON object)");
  const auto examples = static_cast<std::size_t>(state_int(state, "examples", 0, INT64_MAX, file));
  const std::int64_t total =
      options_.schedule.total_steps > 0 ? options_.schedule.total_steps : INT64_MAX;
  const std::int64_t step = state_int(state, "step", 0, total, file);
  const std::int64_t epoch = state_int(state, "epoch", 0, INT32_MAX, file);
  if (examples != examples_.size())
    throw ConfigError(optimizer_file.parent_path().string() + ": the checkpoint was trained on " +
                      std::to_string(examples) + " usable records, the data has " +
                      std::to_string(examples_.size()) + " (a different training file?)");
  // What decides the order and grouping of the data must not change, or the run would not
  // continue (checkpoints written before these were stored are not checked).
  const nlohmann::json now = this->state();
  for (const char* key : {"seed", "shuffle", "batch_size", "max_tokens", "accumulation"})
    if (state.contains(key) && state[key] != now[key])
      throw ConfigError(optimizer_file.parent_path().string() + ": the checkpoint's run has task." +
                        key + " " + state[key].dump() + ", this one " + now[key].dump() +
                        " (a resumed run continues the same data order: set it back, or start a "
                        "new run from the checkpoint with model.path)");
  std::ifstream in(optimizer_file, std::ios::binary);
  if (!in) throw ConfigError(optimizer_file.string() + ": cannot open the optimizer state");
  try {
    adamw_ = AdamW::load(in, sizes_of(params_));
  } catch (const std::exception& e) {
    throw ConfigError(optimizer_file.string() + ": " + e.what());
  }
  step_ = step;
  epoch_ = epoch;
  cut_epoch();
  // batches_.size(): the epoch's last batch was taken, the next step starts a new epoch.
  batch_ = static_cast<std::size_t>(
      state_int(state, "batch_in_epoch", 0, static_cast<std::int64_t>(batches_.size()), file));
}

}  // namespace masque::train
