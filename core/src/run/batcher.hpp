// The batcher: records read into a bounded window are prepared in parallel (task.prepare:
// tokenizing, checking), sorted by cost (their padded length) and cut into batches that fit
// the batch limits. Sorting keeps padding low; the ordered writer restores input order.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "run/settings.hpp"
#include "run/thread_pool.hpp"
#include "tasks/task.hpp"

namespace masque {

// Stable: equal costs keep their input order.
void sort_by_cost(std::vector<Item*>& items);

// Continuous batching: `sorted` dealt round-robin into `groups` groups (fewer when there are
// fewer items), each still sorted by cost, so every worker gets a similar mix.
std::vector<std::vector<Item*>> deal_groups(std::span<Item* const> sorted, std::size_t groups);

// Consecutive runs of `sorted` (sorted by cost) with at most max_batch_size records and, past
// the first record of a batch, at most max_batch_tokens tokens counted with padding (records x
// the largest cost); then, while there are fewer batches than options.workers, the batch with
// the most padded tokens is halved (a record's result never depends on its batch). Every item
// lands in exactly one batch, in order.
std::vector<std::vector<Item*>> cut_batches(std::span<Item* const> sorted,
                                            const BatchingOptions& options);

// The items of one window, owned together (batches in flight hold them by shared_ptr), and
// their batches.
struct WindowCut {
  std::shared_ptr<std::vector<std::unique_ptr<Item>>> items;
  std::vector<std::vector<Item*>> batches;
};

class Batcher {
 public:
  // A prepare() failure becomes `on_error(error result)`; the record is left out of batches.
  using ErrorSink = std::function<void(Result)>;

  Batcher(const Task& task, const BatchingOptions& options, ThreadPool& pool, ErrorSink on_error);

  // Adds a record read; true when the window is full and should be cut.
  bool add(std::unique_ptr<Item> item);
  bool empty() const { return window_.empty(); }
  std::size_t window_size() const { return options_.window(); }

  // Prepares the window in parallel on the pool (waiting for it), then sorts and cuts; the
  // window starts again empty.
  WindowCut cut();

 private:
  // Runs task.prepare on each item; returns the ones that succeeded, in input order.
  std::vector<Item*> prepare(std::vector<std::unique_ptr<Item>>& items);

  const Task& task_;
  BatchingOptions options_;
  ThreadPool& pool_;
  ErrorSink on_error_;
  std::vector<std::unique_ptr<Item>> window_;
};

// Why a task or plugin call failed, as an error record says it: RecordError and ConfigError
// describe the record or the configuration; anything else is marked as internal.
std::string failure_message(const std::exception_ptr& error);

}  // namespace masque
