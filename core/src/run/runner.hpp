// Streams a corpus through a task: read, prepare, batch by length in a bounded window, run
// batches on worker threads, write results in input order.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "io/output.hpp"
#include "io/records.hpp"
#include "tasks/task.hpp"

namespace masque {

struct BatchingOptions {
  std::size_t max_batch_size = 32;
  std::size_t max_batch_tokens = 16384;
  std::size_t read_ahead = 0;  // 0 = 16 x max_batch_size
};

struct RunOptions {
  InputOptions input;
  BatchingOptions batching;
  OutputFormat format = OutputFormat::jsonl;
  bool unbuffered = false;
  int threads = 1;        // worker threads (batches in parallel)
  int intra_threads = 1;  // oneDNN threads per worker
  bool quiet = false;
  bool progress = false;  // a live status line on stderr
  bool fail_fast = false;
  bool keep_fields = false;      // copy the input fields into each JSON output record
  std::string summary_file;      // write the corpus summary as JSON there
  std::uint64_t input_size = 0;  // bytes, when known (for the ETA)
};

struct RunStats {
  std::uint64_t records = 0, failed = 0, tokens = 0;
  double seconds = 0.0;
  bool interrupted = false;
  bool stopped_on_failure = false;
  std::string output_error;
};

BatchingOptions batching_from(const Params& task_params);

// Installs SIGINT/SIGTERM handlers that make run_corpus stop cleanly (only complete records
// are written) and ignores SIGPIPE (a closed output is reported as a write error).
void install_signal_handlers();
int interrupt_signal();  // the signal that interrupted the run, or 0

// When the run stops early (interrupted, output closed, --fail-fast) worker threads may still
// be running: the caller must end the process (std::_Exit) after reporting.
// When the run stops early (interrupted, output closed, --fail-fast) worker threads may still
// be busy: the caller must end the process (std::_Exit) after reporting.
RunStats run_corpus(const Task& task, std::FILE* in, std::FILE* out, const RunOptions& options);

// The summary as JSON (for --summary) and as text (for stderr).
nlohmann::ordered_json summary_json(const Task& task, const RunStats& stats);
std::string summary_text(const Task& task, const RunStats& stats);

}  // namespace masque
