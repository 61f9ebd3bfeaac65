#include "run/runner.hpp"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <span>
#include <thread>

#include "masque/error.hpp"
#include "run/thread_pool.hpp"

namespace masque {

namespace {

std::atomic<int> g_signal{0};

void on_signal(int sig) {
  g_signal.store(sig);
}

using Clock = std::chrono::steady_clock;

std::string format_duration(double seconds) {
  auto s = static_cast<long>(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", s / 60, s % 60);
  return buf;
}

// Results arrive from workers in any order; the writer takes them in input order.
class ResultQueue {
 public:
  void put(std::vector<Result> results) {
    {
      std::lock_guard lock(mutex_);
      for (auto& r : results) ready_.emplace(r.id, std::move(r));
    }
    cv_.notify_all();
  }
  void put_one(Result r) {
    std::vector<Result> v;
    v.push_back(std::move(r));
    put(std::move(v));
  }
  void close(std::uint64_t total) {
    {
      std::lock_guard lock(mutex_);
      total_ = total;
    }
    cv_.notify_all();
  }
  // The next result in order; false when all are written or `stop` is set.
  bool take(Result& out, std::uint64_t next, const std::atomic<bool>& stop) {
    std::unique_lock lock(mutex_);
    while (true) {
      if (stop.load()) return false;
      auto it = ready_.find(next);
      if (it != ready_.end()) {
        out = std::move(it->second);
        ready_.erase(it);
        written_ = next + 1;
        cv_.notify_all();
        return true;
      }
      if (total_ && next >= *total_) return false;
      cv_.wait_for(lock, std::chrono::milliseconds(200));
    }
  }
  // Waits until fewer than `limit` records are read but not yet written.
  void wait_below(std::uint64_t read, std::uint64_t limit, const std::atomic<bool>& stop) {
    std::unique_lock lock(mutex_);
    while (!stop.load() && read - written_ >= limit && g_signal.load() == 0)
      cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
  void wake() { cv_.notify_all(); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::uint64_t, Result> ready_;
  std::optional<std::uint64_t> total_;
  std::uint64_t written_ = 0;
};

struct Progress {
  Clock::time_point start = Clock::now();
  Clock::time_point last;
  bool shown = false;

  void update(const RunStats& s, std::uint64_t bytes_read, std::uint64_t input_size, bool force) {
    auto now = Clock::now();
    if (!force && now - last < std::chrono::milliseconds(500)) return;
    last = now;
    double elapsed = std::chrono::duration<double>(now - start).count();
    std::string line = "masque: " + std::to_string(s.records) + " records";
    if (s.failed) line += " (" + std::to_string(s.failed) + " failed)";
    char rate[64];
    std::snprintf(rate, sizeof rate, ", %.0f tokens/s", elapsed > 0 ? s.tokens / elapsed : 0.0);
    line += rate;
    line += ", " + format_duration(elapsed) + " elapsed";
    if (input_size > 0 && bytes_read > 0) {
      const double frac = std::min(1.0, static_cast<double>(bytes_read) / input_size);
      char pct[32];
      std::snprintf(pct, sizeof pct, " (%.0f%% read)", 100 * frac);
      line += ", ETA " + format_duration(elapsed / frac - elapsed) + pct;
    }
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    shown = true;
  }
  void clear() {
    if (shown) std::fprintf(stderr, "\r\033[K");
    shown = false;
  }
};

// What a record's result says when its task or a plugin threw: RecordError and ConfigError
// describe the record or the configuration; anything else (a bug, or a plugin throwing
// something odd) is marked as internal. Either way only the records concerned fail, and the
// exception never reaches a worker thread's edge, where it would end the process.
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

// task.process(batch), holding the task to its contract of one result per record: when it
// throws or miscounts, `failure` says so and the results are to be dropped.
std::vector<Result> run_task(const Task& task, std::span<Item* const> batch, std::string& failure) {
  failure.clear();
  try {
    std::vector<Result> results = task.process(batch);
    if (results.size() == batch.size()) return results;
    failure = "internal error: the task returned " + std::to_string(results.size()) +
              " results for " + std::to_string(batch.size()) + " records";
  } catch (...) {
    failure = failure_message(std::current_exception());
  }
  return {};
}

// Exactly one result per record, in order. When a batch fails as a whole, its records run
// again one at a time, so a record that breaks the batch (a bad per-record field noticed only
// when the batch is built or run) fails alone instead of taking the others with it.
std::vector<Result> process_batch(const Task& task, std::span<Item* const> batch) {
  std::string failure;
  std::vector<Result> results = run_task(task, batch, failure);
  if (!failure.empty()) {
    for (Item* item : batch) {
      std::string alone = failure;
      std::vector<Result> one;
      if (batch.size() > 1) one = run_task(task, std::span<Item* const>(&item, 1), alone);
      results.push_back(alone.empty() ? std::move(one.front())
                                      : error_result(item->record.id, alone));
    }
  }
  for (std::size_t k = 0; k < batch.size(); ++k) {
    results[k].id = batch[k]->record.id;
    results[k].fields_kept = batch[k]->record.fields;
  }
  return results;
}

}  // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read returns so the run can stop
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int interrupt_signal() {
  return g_signal.load();
}

BatchingOptions batching_from(const Params& p) {
  BatchingOptions b;
  b.max_batch_size = static_cast<std::size_t>(p.get_int("max_batch_size"));
  b.max_batch_tokens = static_cast<std::size_t>(p.get_int("max_batch_tokens"));
  b.read_ahead = static_cast<std::size_t>(p.get_int("read_ahead"));
  return b;
}

RunStats run_corpus(const Task& task, std::FILE* in, std::FILE* out, const RunOptions& options) {
  RunStats stats;
  const auto start = Clock::now();
  const std::size_t window_size = options.batching.read_ahead
                                      ? options.batching.read_ahead
                                      : 16 * options.batching.max_batch_size;
  RecordReader reader(in, options.input);
  // Batches in flight hold the queue by shared_ptr: when a run stops early, workers may still
  // finish a batch after run_corpus returned (the pool is then left to the process exit).
  auto queue_owner = std::make_shared<ResultQueue>();
  ResultQueue& queue = *queue_owner;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> bytes_read{0};
  auto* pool_ptr = new ThreadPool(std::max(1, options.threads), std::max(1, options.intra_threads));
  ThreadPool& pool = *pool_ptr;

  // Writer: input order, whole records, progress line.
  std::thread writer([&] {
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, nullptr);
    OutputWriter w(out, options.unbuffered);
    Progress progress;
    Result r;
    std::uint64_t next = 0;
    while (queue.take(r, next, stop)) {
      ++next;
      if (options.keep_fields && r.error.empty()) {
        nlohmann::ordered_json merged = r.object;
        for (auto& [k, v] : r.fields_kept.items())
          if (!merged.contains(k)) merged[k] = v;
        r.object = std::move(merged);
      }
      if (!w.write(render(r, options.format, task.tsv_columns()))) {
        stats.output_error = w.error();
        stop = true;
        break;
      }
      ++stats.records;
      stats.tokens += r.tokens;
      if (!r.error.empty()) {
        ++stats.failed;
        if (options.format == OutputFormat::text && !options.quiet)
          std::fprintf(stderr, "masque: record %llu: %s\n", static_cast<unsigned long long>(r.id),
                       r.error.c_str());
        if (options.fail_fast) {
          stats.stopped_on_failure = true;
          stop = true;
          break;
        }
      }
      if (options.progress) progress.update(stats, bytes_read.load(), options.input_size, false);
    }
    if (!w.flush() && stats.output_error.empty()) stats.output_error = w.error();
    if (options.progress) progress.clear();
    queue.wake();
  });

  std::vector<std::unique_ptr<Item>> window;
  std::uint64_t read = 0;
  auto submit_window = [&] {
    if (window.empty()) return;
    // Prepare (tokenize) in parallel, then sort by cost and cut into batches.
    auto items = std::make_shared<std::vector<std::unique_ptr<Item>>>(std::move(window));
    window.clear();
    std::vector<Item*> ok;
    {
      std::mutex m;
      std::condition_variable cv;
      std::size_t left = 0;
      const std::size_t chunk = 64;
      std::vector<char> failed(items->size(), 0);
      for (std::size_t b = 0; b < items->size(); b += chunk) {
        ++left;
        pool.submit([&, b] {
          for (std::size_t i = b; i < std::min(items->size(), b + chunk); ++i) {
            Item& item = *(*items)[i];
            try {
              task.prepare(item);
            } catch (...) {
              queue.put_one(
                  error_result(item.record.id, failure_message(std::current_exception())));
              failed[i] = 1;
            }
          }
          std::lock_guard lock(m);
          if (--left == 0) cv.notify_all();
        });
      }
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return left == 0; });
      for (std::size_t i = 0; i < items->size(); ++i)
        if (!failed[i]) ok.push_back((*items)[i].get());
    }
    std::stable_sort(ok.begin(), ok.end(),
                     [](const Item* a, const Item* b) { return a->cost < b->cost; });
    std::size_t i = 0;
    while (i < ok.size()) {
      std::size_t j = i;
      std::size_t longest = 0;
      while (j < ok.size() && j - i < options.batching.max_batch_size) {
        std::size_t c = std::max(longest, ok[j]->cost);
        if (j > i && c * (j - i + 1) > options.batching.max_batch_tokens) break;
        longest = c;
        ++j;
      }
      std::vector<Item*> batch(ok.begin() + i, ok.begin() + j);
      pool.submit([&task, queue_owner, items, batch = std::move(batch)] {
        queue_owner->put(process_batch(task, batch));
      });
      i = j;
    }
  };

  // The input itself can fail (an unreadable stream, a TSV header over the record limit): the
  // records read before are still processed and written, then the error is passed on.
  std::exception_ptr input_error;
  try {
    while (!stop.load() && g_signal.load() == 0) {
      // A slow or interactive producer: run what is read before waiting for more.
      if (!window.empty() && reader.would_block()) submit_window();
      auto item = std::make_unique<Item>();
      if (!reader.next(item->record)) break;
      bytes_read = reader.bytes_read();
      ++read;
      if (!item->record.error.empty()) {
        queue.put_one(error_result(item->record.id, item->record.error));
      } else {
        window.push_back(std::move(item));
      }
      if (window.size() >= window_size) {
        submit_window();
        queue.wait_below(read, 2 * window_size + 1, stop);
      }
    }
  } catch (...) {
    input_error = std::current_exception();
  }
  if (g_signal.load() == 0 && !stop.load()) submit_window();
  if (g_signal.load() != 0) {
    stats.interrupted = true;
    stop = true;
  }
  queue.close(read);
  writer.join();
  if (stats.interrupted || stop.load()) {
    // Workers may still be busy on batches nobody will write: the caller exits without
    // waiting for them (the pool is deliberately not destroyed).
    std::fflush(out);
    stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    stats.interrupted = stats.interrupted || g_signal.load() != 0;
    return stats;
  }
  delete pool_ptr;
  if (input_error) std::rethrow_exception(input_error);
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

nlohmann::ordered_json summary_json(const Task& task, const RunStats& s) {
  nlohmann::ordered_json j;
  j["records"] = s.records;
  j["succeeded"] = s.records - s.failed;
  j["failed"] = s.failed;
  j["tokens"] = s.tokens;
  j["seconds"] = s.seconds;
  j["records_per_second"] = s.seconds > 0 ? s.records / s.seconds : 0.0;
  j["tokens_per_second"] = s.seconds > 0 ? s.tokens / s.seconds : 0.0;
  j["interrupted"] = s.interrupted;
  j["task"] = task.summary();
  return j;
}

std::string summary_text(const Task& task, const RunStats& s) {
  std::string out = task.summary_text();
  char line[256];
  std::snprintf(
      line, sizeof line,
      "masque: %llu records, %llu ok, %llu failed; %llu tokens in %.2f s (%.0f tokens/s)\n",
      static_cast<unsigned long long>(s.records),
      static_cast<unsigned long long>(s.records - s.failed),
      static_cast<unsigned long long>(s.failed), static_cast<unsigned long long>(s.tokens),
      s.seconds, s.seconds > 0 ? s.tokens / s.seconds : 0.0);
  return out + line;
}

}  // namespace masque
