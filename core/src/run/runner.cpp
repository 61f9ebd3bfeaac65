#include "run/runner.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <span>
#include <thread>

#include "masque/error.hpp"
#include "run/batcher.hpp"
#include "run/ordered_writer.hpp"
#include "run/stop_signals.hpp"
#include "run/thread_pool.hpp"

namespace masque {

namespace {

std::atomic<int> g_signal{0};

void on_signal(int sig) {
  g_signal.store(sig);
}

bool interrupted() {
  return g_signal.load() != 0;
}

using Clock = std::chrono::steady_clock;

// task.process(batch), holding the task to its contract of one result per record: when it
// throws or miscounts, `failure` says so and the results are to be dropped. The exception never
// reaches a worker thread's edge, where it would end the process.
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

// Signals go to the main thread, which stops reading; the writer finishes whole records.
void block_stop_signals() {
  const sigset_t block = stop_signal_set(false);
  pthread_sigmask(SIG_BLOCK, &block, nullptr);
}

WriterOptions writer_options(const Task& task, const RunOptions& o) {
  return {.format = o.format,
          .tsv_columns = task.tsv_columns(),
          .unbuffered = o.unbuffered,
          .keep_fields = o.keep_fields,
          .report_errors = o.format == OutputFormat::text,  // its error is nowhere else
          .fail_fast = o.fail_fast,
          .progress = o.progress,
          .input_size = o.input_size,
          .first_record = o.first_record};
}

// Continuous batching: one group of each window per worker; static: at least one batch each.
BatchingOptions batching_for(const Task& task, const RunOptions& options) {
  BatchingOptions b = options.batching;
  const auto workers = static_cast<std::size_t>(std::max(1, options.threads));
  b.continuous_groups = task.batches_continuously() ? workers : 0;
  b.workers = workers;
  return b;
}

// One run_corpus call: reads into the batcher, hands its batches to the workers and lets the
// ordered writer put the results out.
class CorpusRun {
 public:
  CorpusRun(const Task& task, const RunOptions& options)
      : task_(task),
        options_(options),
        // Left to the process exit when the run stops early: workers may still be busy.
        pool_(new ThreadPool(std::max(1, options.threads), std::max(1, options.intra_threads))),
        batcher_(task, batching_for(task, options), *pool_,
                 [queue = queue_](Result r) { queue->put(std::move(r)); }) {}

  RunStats run(RecordReader& reader, std::FILE* out);

 private:
  bool stopping() const { return stop_.load() || interrupted(); }
  // Reads until the input ends or the run stops; an input failure is kept in input_error_.
  void read(RecordReader& reader);
  void submit_window();
  RunStats finish(const OrderedWriter& writer, Clock::time_point start);

  const Task& task_;
  const RunOptions& options_;
  // Batches in flight hold the queue by shared_ptr: they may finish after run() returned.
  std::shared_ptr<ResultQueue> queue_ = std::make_shared<ResultQueue>(options_.first_record);
  ThreadPool* pool_;
  Batcher batcher_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> bytes_read_{0};
  std::uint64_t read_ = options_.first_record;  // the next record's id
  std::exception_ptr input_error_;
};

RunStats CorpusRun::run(RecordReader& reader, std::FILE* out) {
  const auto start = Clock::now();
  OrderedWriter writer(*queue_, out, writer_options(task_, options_), stop_, bytes_read_);
  std::thread writing([&] {
    block_stop_signals();
    writer.run();
  });
  read(reader);
  if (!stopping()) submit_window();
  if (interrupted()) stop_ = true;
  queue_->close(read_);
  writing.join();
  RunStats stats = finish(writer, start);
  if (stats.interrupted || stop_.load()) {
    std::fflush(out);  // the caller exits without waiting for the workers
    return stats;
  }
  delete pool_;
  if (input_error_) std::rethrow_exception(input_error_);
  return stats;
}

// The input itself can fail (an unreadable stream, a TSV header over the record limit): the
// records read before are still processed and written, then the error is passed on.
void CorpusRun::read(RecordReader& reader) {
  const std::uint64_t in_flight = 2 * batcher_.window_size() + 1;
  try {
    while (!stopping() && reader.bytes_read() < options_.input_limit) {
      // A slow or interactive producer: run what is read before waiting for more.
      if (!batcher_.empty() && reader.would_block()) submit_window();
      auto item = std::make_unique<Item>();
      if (!reader.next(item->record)) break;
      bytes_read_ = reader.bytes_read();
      item->record.id = read_++;  // global in a shard (the reader counts from 0)
      if (!item->record.error.empty()) {
        queue_->put(error_result(item->record.id, item->record.error));
      } else if (batcher_.add(std::move(item))) {
        submit_window();
        queue_->wait_below(read_, in_flight, [this] { return stopping(); });
      }
    }
  } catch (...) {
    input_error_ = std::current_exception();
  }
}

void CorpusRun::submit_window() {
  if (batcher_.empty()) return;
  WindowCut cut = batcher_.cut();
  for (auto& batch : cut.batches)
    pool_->submit([&task = task_, queue = queue_, items = cut.items, batch = std::move(batch)] {
      queue->put(process_batch(task, batch));
    });
}

RunStats CorpusRun::finish(const OrderedWriter& writer, Clock::time_point start) {
  const WriterStats& w = writer.stats();
  RunStats stats;
  stats.records = w.records;
  stats.failed = w.failed;
  stats.tokens = w.tokens;
  stats.output_error = w.output_error;
  stats.stopped_on_failure = w.stopped_on_failure;
  stats.next_in_part = w.next_in_part;
  stats.interrupted = interrupted();
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

}  // namespace

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

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read returns so the run can stop
  for (int sig : kStopSignals) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int interrupt_signal() {
  return g_signal.load();
}

namespace {

RunStats run_reader(const Task& task, RecordReader& reader, std::FILE* out,
                    const RunOptions& options) {
  task.begin_run(
      {.first_record = options.first_record, .shards = options.shards, .files = options.files});
  auto run = std::make_unique<CorpusRun>(task, options);
  RunStats stats = run->run(reader, out);
  // Stopped early, workers may still be busy with its queue: left to the process exit.
  if (stats.interrupted || !stats.output_error.empty() || stats.stopped_on_failure)
    static_cast<void>(run.release());
  return stats;
}

}  // namespace

// The reader is made before the run's threads: it may throw (a TSV header over the limit).
RunStats run_corpus(const Task& task, std::FILE* in, std::FILE* out, const RunOptions& options) {
  RecordReader reader(in, options.input);
  return run_reader(task, reader, out, options);
}

RunStats run_corpus(const Task& task, std::unique_ptr<ByteSource> in, std::FILE* out,
                    const RunOptions& options) {
  RecordReader reader(std::move(in), options.input);
  return run_reader(task, reader, out, options);
}

namespace {

// Without a successful record the task's figures are of nothing (a perplexity of no tokens).
bool has_task_figures(const RunStats& s) {
  return s.records > s.failed;
}

}  // namespace

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
  j["complete"] = s.complete();  // false: the task's figures count records not written
  j["task"] = has_task_figures(s) ? task.summary() : nlohmann::ordered_json();
  return j;
}

std::string summary_text(const Task& task, const RunStats& s) {
  std::string out = has_task_figures(s) ? task.summary_text() : "";
  if (!out.empty() && !s.complete())
    out =
        "masque: stopped early: the task's figures count every record processed, written or "
        "not\n" +
        out;
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
