#include "run/stream.hpp"

#include <atomic>

namespace masque {

namespace {
std::atomic<StreamSink*> g_sink{nullptr};
}  // namespace

StreamSink* StreamSink::active() {
  return g_sink.load(std::memory_order_acquire);
}

void StreamSink::install(StreamSink* sink) {
  g_sink.store(sink, std::memory_order_release);
}

void StreamSink::set_detokenize(Detokenize detokenize) {
  std::lock_guard lock(mutex_);
  detokenize_ = std::move(detokenize);
}

void StreamSink::attach(OutputWriter* out, std::uint64_t first_record) {
  std::lock_guard lock(mutex_);
  out_ = out;
  head_ = first_record;
}

void StreamSink::tokens(std::span<const std::uint64_t> records, std::span<const TokenId> tokens) {
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < records.size() && i < tokens.size(); ++i)
    records_[records[i]].tokens.push_back(tokens[i]);
  emit_head();
}

bool StreamSink::emit_head() {
  auto it = records_.find(head_);
  if (it == records_.end() || !out_ || !detokenize_ || it->second.tokens.size() < 2) return true;
  Record& r = it->second;
  // One token behind: the last token's text may still change.
  const std::string text =
      detokenize_(std::span<const TokenId>(r.tokens.data(), r.tokens.size() - 1));
  if (text.size() <= r.written.size() || text.compare(0, r.written.size(), r.written) != 0)
    return true;
  if (!out_->write(text.substr(r.written.size()))) return false;
  r.written = text;
  return out_->flush();
}

bool StreamSink::finish(std::uint64_t id, const std::string& line) {
  std::lock_guard lock(mutex_);
  std::string rest = line;
  auto it = records_.find(id);
  const bool streamed = it != records_.end() && !it->second.written.empty();
  if (it != records_.end()) {
    const std::string& written = it->second.written;
    // The streamed text is a prefix of the record's line unless a detokenizer rewrote earlier
    // text; then the line is written whole on a line of its own (never lost).
    if (line.compare(0, written.size(), written) == 0)
      rest = line.substr(written.size());
    else if (!written.empty())
      rest = line == "\n" ? line : "\n" + line;  // a failed record's line ends what was written
    records_.erase(it);
  }
  bool ok = out_ && out_->write(rest) && out_->flush();
  if (!ok) {
    unfinished_ = streamed;  // its start is out, its end is not
    return false;
  }
  head_ = id + 1;
  return emit_head() && ok;
}

bool StreamSink::head_in_part() {
  std::lock_guard lock(mutex_);
  const auto it = records_.find(head_);
  return unfinished_ || (it != records_.end() && !it->second.written.empty());
}

}  // namespace masque
