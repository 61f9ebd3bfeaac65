// The corpus run: a thin driver over the batcher (run/batcher.hpp: read window, parallel
// prepare, length sort, batch cut), worker threads (run/thread_pool.hpp) and the ordered
// writer (run/ordered_writer.hpp: input order, whole records).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/output.hpp"
#include "io/records.hpp"
#include "run/settings.hpp"
#include "tasks/task.hpp"

namespace masque {

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
  // A shard of a larger input (run/shard.hpp): the id of the first record read, and the bytes
  // to read (the reader stops at that record boundary).
  std::uint64_t first_record = 0;
  std::uint64_t input_limit = UINT64_MAX;
  int shards = 1;  // processes sharing the corpus (--shard K/N, mpirun)
  std::vector<std::pair<std::string, std::string>> files;  // RunScope::files
};

struct RunStats {
  std::uint64_t records = 0, failed = 0, tokens = 0;
  double seconds = 0.0;
  bool interrupted = false;
  bool stopped_on_failure = false;
  bool next_in_part = false;  // --stream stopped in the middle of record `records`
  std::string output_error;

  // Every record was read and written: nothing stopped the run early.
  bool complete() const { return !interrupted && !stopped_on_failure && output_error.empty(); }
};

// Installs handlers of the stop signals (run/stop_signals.hpp: HUP, INT, QUIT, TERM, USR1,
// USR2) that make run_corpus stop cleanly (only complete records are written) and ignores
// SIGPIPE (a closed output is reported as a write error).
void install_signal_handlers();
int interrupt_signal();  // the signal that interrupted the run, or 0

// Exactly one result per record of `batch`, in order. When the batch fails as a whole, its
// records run again one at a time, so a record that breaks the batch fails alone.
std::vector<Result> process_batch(const Task& task, std::span<Item* const> batch);

// When the run stops early (interrupted, output closed, --fail-fast) worker threads may still
// be busy: the caller must end the process (std::_Exit) after reporting.
RunStats run_corpus(const Task& task, std::FILE* in, std::FILE* out, const RunOptions& options);
// The same, reading a ByteSource (a compressed file, a range of a file: io/input_file.hpp).
RunStats run_corpus(const Task& task, std::unique_ptr<ByteSource> in, std::FILE* out,
                    const RunOptions& options);

// The summary as JSON (for --summary) and as text (for stderr).
nlohmann::ordered_json summary_json(const Task& task, const RunStats& stats);
std::string summary_text(const Task& task, const RunStats& stats);

}  // namespace masque
