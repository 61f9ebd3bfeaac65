#include "run/ordered_writer.hpp"

#include <chrono>

#include "run/progress.hpp"
#include "run/stream.hpp"

namespace masque {

void ResultQueue::put(std::vector<Result> results) {
  {
    std::lock_guard lock(mutex_);
    for (auto& r : results) ready_.emplace(r.id, std::move(r));
  }
  cv_.notify_all();
}

void ResultQueue::put(Result result) {
  std::vector<Result> one;
  one.push_back(std::move(result));
  put(std::move(one));
}

void ResultQueue::close(std::uint64_t total) {
  {
    std::lock_guard lock(mutex_);
    total_ = total;
  }
  cv_.notify_all();
}

bool ResultQueue::take(Result& out, std::uint64_t next, const std::atomic<bool>& stop) {
  std::unique_lock lock(mutex_);
  while (true) {
    if (stop.load()) return false;
    auto it = ready_.find(next);
    if (it != ready_.end()) {
      out = std::move(it->second);
      ready_.erase(it);
      taken_ = next + 1;
      cv_.notify_all();
      return true;
    }
    if (total_ && next >= *total_) return false;
    // Timed: `stop` is set without notifying this queue.
    cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
}

void ResultQueue::wait_below(std::uint64_t read, std::uint64_t limit,
                             const std::function<bool()>& stopping) {
  std::unique_lock lock(mutex_);
  while (read - taken_ >= limit && !stopping()) cv_.wait_for(lock, std::chrono::milliseconds(200));
}

OrderedWriter::OrderedWriter(ResultQueue& queue, std::FILE* out, WriterOptions options,
                             std::atomic<bool>& stop, const std::atomic<std::uint64_t>& bytes_read)
    : queue_(queue),
      out_(out),
      options_(std::move(options)),
      stop_(stop),
      bytes_read_(bytes_read) {}

void OrderedWriter::run() {
  OutputWriter out(out_, options_.unbuffered);
  if (StreamSink* stream = StreamSink::active()) stream->attach(&out, options_.first_record);
  Progress progress;
  Result result;
  for (std::uint64_t next = options_.first_record; queue_.take(result, next, stop_); ++next) {
    if (!write(result, out)) {
      stop_ = true;
      break;
    }
    if (options_.progress)
      progress.update(stats_.records, stats_.failed, stats_.tokens, bytes_read_.load(),
                      options_.input_size);
  }
  if (!out.flush() && stats_.output_error.empty()) stats_.output_error = out.error();
  if (options_.progress) progress.clear();
  if (StreamSink* stream = StreamSink::active()) {
    stats_.next_in_part = stream->head_in_part();
    stream->attach(nullptr, 0);  // `out` ends here
  }
  queue_.wake();
}

namespace {

// The name an input field is kept under: its own, or, when the output writes or reserves it
// (id, error, the task's fields), "input_" before it until the name is free. Copied as it is,
// an input "error" would mark a success as failed; dropped, a field would vanish unsaid.
std::string kept_name(const std::string& key, const nlohmann::ordered_json& record,
                      const nlohmann::ordered_json& input) {
  if (key != "error" && !record.contains(key)) return key;
  std::string name = "input_" + key;
  while (name == "error" || record.contains(name) || input.contains(name)) name = "input_" + name;
  return name;
}

}  // namespace

void OrderedWriter::keep_fields(Result& result) const {
  nlohmann::ordered_json merged = result.object;
  for (auto& [k, v] : result.fields_kept.items())
    merged[kept_name(k, result.object, result.fields_kept)] = v;
  result.object = std::move(merged);
}

bool OrderedWriter::write(Result& result, OutputWriter& out) {
  if (options_.keep_fields && result.error.empty()) keep_fields(result);
  StreamSink* stream = StreamSink::active();
  const std::string bytes = render(result, options_.format, options_.tsv_columns);
  if (stream ? !stream->finish(result.id, bytes) : !out.write(bytes)) {
    stats_.output_error = out.error();
    return false;
  }
  ++stats_.records;
  stats_.tokens += result.tokens;
  return result.error.empty() || note_failure(result);
}

bool OrderedWriter::note_failure(const Result& result) {
  ++stats_.failed;
  if (options_.report_errors)
    std::fprintf(stderr, "masque: record %llu: %s\n", static_cast<unsigned long long>(result.id),
                 result.error.c_str());
  if (!options_.fail_fast) return true;
  stats_.stopped_on_failure = true;
  return false;
}

}  // namespace masque
