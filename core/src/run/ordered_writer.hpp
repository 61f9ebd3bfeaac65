// The ordered writer: workers finish batches in any order (and a window's records in length
// order); results wait in a reorder queue and are written in input order, whole records only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "io/output.hpp"

namespace masque {

// Results keyed by record id (0, 1, 2, ... in input order), taken in that order.
class ResultQueue {
 public:
  // Ids start at `first` (a shard's first record).
  explicit ResultQueue(std::uint64_t first = 0) : taken_(first) {}
  void put(std::vector<Result> results);
  void put(Result result);
  // No record at or past `total` will come: take() returns false once all before are taken.
  void close(std::uint64_t total);
  // The result of record `next` (waiting for it); false when the queue is closed below `next`
  // or `stop` is set.
  bool take(Result& out, std::uint64_t next, const std::atomic<bool>& stop);
  // Back-pressure on the reader: waits while `read` - taken >= `limit`, until `stopping()`.
  void wait_below(std::uint64_t read, std::uint64_t limit, const std::function<bool()>& stopping);
  void wake() { cv_.notify_all(); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::uint64_t, Result> ready_;
  std::optional<std::uint64_t> total_;
  std::uint64_t taken_ = 0;
};

struct WriterOptions {
  OutputFormat format = OutputFormat::jsonl;
  std::vector<std::string> tsv_columns{};
  bool unbuffered = false;
  bool keep_fields = false;    // copy the input fields into each JSON output record
  bool report_errors = false;  // one stderr line per failed record
  bool fail_fast = false;      // stop at the first failed record
  bool progress = false;       // a live status line on stderr
  std::uint64_t input_size = 0;
  std::uint64_t first_record = 0;  // the id of the first record (a shard's)
};

struct WriterStats {
  std::uint64_t records = 0, failed = 0, tokens = 0;
  std::string output_error;  // the output failed (closed pipe, full disk)
  bool stopped_on_failure = false;
  bool next_in_part = false;  // --stream: the record after the last one written is in part
};

class OrderedWriter {
 public:
  // `stop` is set by the writer when the output fails or fail_fast triggers, and read to end
  // early; `bytes_read` feeds the progress line's ETA.
  OrderedWriter(ResultQueue& queue, std::FILE* out, WriterOptions options, std::atomic<bool>& stop,
                const std::atomic<std::uint64_t>& bytes_read);
  // Writes until every record is written or the run stops (the writer thread's body).
  void run();
  const WriterStats& stats() const { return stats_; }

 private:
  // Writes one result; false when the run must stop.
  bool write(Result& result, OutputWriter& out);
  // --keep-fields: adds the input fields to a successful record, renaming those it writes.
  void keep_fields(Result& result) const;
  // Counts a failed record; false when fail_fast stops the run.
  bool note_failure(const Result& result);

  ResultQueue& queue_;
  std::FILE* out_;
  WriterOptions options_;
  std::atomic<bool>& stop_;
  const std::atomic<std::uint64_t>& bytes_read_;
  WriterStats stats_;
};

}  // namespace masque
