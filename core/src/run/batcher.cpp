#include "run/batcher.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "masque/error.hpp"

namespace masque {

namespace {

// Records one thread prepares per pool job: enough to amortise the job, few enough to spread.
constexpr std::size_t kPrepareChunk = 64;

// Waits until `count` jobs have called done().
class Countdown {
 public:
  explicit Countdown(std::size_t count) : left_(count) {}
  void done() {
    std::lock_guard lock(mutex_);
    if (--left_ == 0) cv_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return left_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::size_t left_;
};

}  // namespace

std::string failure_message(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const RecordError& e) {
    return e.what();
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("internal error: ") + e.what();
  } catch (...) {
    return "internal error: an exception that is not a std::exception";
  }
}

void sort_by_cost(std::vector<Item*>& items) {
  std::stable_sort(items.begin(), items.end(),
                   [](const Item* a, const Item* b) { return a->cost < b->cost; });
}

// Halves the batch with the most padded tokens (records x its last, largest cost) until there
// are `workers` batches or none has two records left.
void split_for_workers(std::vector<std::vector<Item*>>& batches, std::size_t workers) {
  while (batches.size() < workers) {
    auto largest = batches.end();
    std::size_t most = 0;
    for (auto b = batches.begin(); b != batches.end(); ++b)
      if (b->size() > 1 && b->size() * b->back()->cost >= most) {
        most = b->size() * b->back()->cost;
        largest = b;
      }
    if (largest == batches.end()) return;
    const auto half = static_cast<std::ptrdiff_t>(largest->size() / 2);
    std::vector<Item*> second(largest->begin() + half, largest->end());
    largest->resize(static_cast<std::size_t>(half));
    batches.insert(largest + 1, std::move(second));
  }
}

std::vector<std::vector<Item*>> cut_batches(std::span<Item* const> sorted,
                                            const BatchingOptions& options) {
  std::vector<std::vector<Item*>> batches;
  std::size_t i = 0;
  while (i < sorted.size()) {
    std::size_t j = i, longest = 0;
    while (j < sorted.size() && j - i < options.max_batch_size) {
      const std::size_t padded = std::max(longest, sorted[j]->cost);
      if (j > i && padded * (j - i + 1) > options.max_batch_tokens) break;
      longest = padded;
      ++j;
    }
    batches.emplace_back(sorted.begin() + static_cast<std::ptrdiff_t>(i),
                         sorted.begin() + static_cast<std::ptrdiff_t>(j));
    i = j;
  }
  split_for_workers(batches, options.workers);
  return batches;
}

std::vector<std::vector<Item*>> deal_groups(std::span<Item* const> sorted, std::size_t groups) {
  std::vector<std::vector<Item*>> out(std::min(std::max<std::size_t>(groups, 1), sorted.size()));
  for (std::size_t i = 0; i < sorted.size(); ++i) out[i % out.size()].push_back(sorted[i]);
  return out;
}

Batcher::Batcher(const Task& task, const BatchingOptions& options, ThreadPool& pool,
                 ErrorSink on_error)
    : task_(task), options_(options), pool_(pool), on_error_(std::move(on_error)) {}

bool Batcher::add(std::unique_ptr<Item> item) {
  window_.push_back(std::move(item));
  return window_.size() >= options_.window();
}

std::vector<Item*> Batcher::prepare(std::vector<std::unique_ptr<Item>>& items) {
  std::vector<char> failed(items.size(), 0);
  Countdown jobs((items.size() + kPrepareChunk - 1) / kPrepareChunk);
  for (std::size_t begin = 0; begin < items.size(); begin += kPrepareChunk) {
    pool_.submit([&, begin] {
      for (std::size_t i = begin; i < std::min(items.size(), begin + kPrepareChunk); ++i) {
        try {
          task_.prepare(*items[i]);
        } catch (...) {
          on_error_(error_result(items[i]->record.id, failure_message(std::current_exception())));
          failed[i] = 1;
        }
      }
      jobs.done();
    });
  }
  jobs.wait();
  std::vector<Item*> ok;
  for (std::size_t i = 0; i < items.size(); ++i)
    if (!failed[i]) ok.push_back(items[i].get());
  return ok;
}

WindowCut Batcher::cut() {
  WindowCut cut;
  cut.items = std::make_shared<std::vector<std::unique_ptr<Item>>>(std::move(window_));
  window_.clear();
  std::vector<Item*> ok = prepare(*cut.items);
  sort_by_cost(ok);
  cut.batches = options_.continuous_groups > 0 ? deal_groups(ok, options_.continuous_groups)
                                               : cut_batches(ok, options_);
  return cut;
}

}  // namespace masque
