#include "masque/train/dataset.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>

#include "io/input_file.hpp"
#include "io/records.hpp"
#include "masque/error.hpp"

namespace masque::train {

// ---- SkipLog ----------------------------------------------------------------------------------

SkipLog::SkipLog(std::string file, std::int64_t max_bad,
                 std::function<void(const std::string&)> report)
    : file_(std::move(file)), max_bad_(max_bad), report_(std::move(report)) {
  if (!report_) report_ = [](const std::string& line) { std::cerr << line << '\n'; };
}

namespace {

// `text` with each free-standing number as N ("the record is N bytes"; "UTF-8" stays), so
// reasons that differ only in their counts group together.
std::string without_counts(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    std::size_t end = i;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    const bool starts = i == 0 || text[i - 1] == ' ';
    const bool ends = end == text.size() || text[end] == ' ' || text[end] == ',';
    if (end > i && starts && ends) {
      out += 'N';
      i = end;
    } else {
      out += text[i++];
    }
  }
  return out;
}

// The kind of a skip reason, for the summary: the text before the first ':' or '(' or " at
// byte", e.g. "invalid UTF-8 at byte 3" -> "invalid UTF-8".
std::string kind_of(const std::string& reason) {
  std::size_t end = reason.find_first_of(":(");
  std::string kind = reason.substr(0, end);
  const std::size_t at = kind.find(" at byte");
  if (at != std::string::npos) kind.resize(at);
  while (!kind.empty() && kind.back() == ' ') kind.pop_back();
  return without_counts(kind);
}

}  // namespace

void SkipLog::skip(std::uint64_t line, std::string reason) {
  report_(file_ + ":" + std::to_string(line) + ": skipped: " + reason);
  ++by_kind_[kind_of(reason)];
  skipped_.push_back({line, std::move(reason)});
  if (max_bad_ >= 0 && count() > max_bad_)
    throw ConfigError(file_ + ": " + std::to_string(count()) +
                      " records could not be used, more than max_bad_records (" +
                      std::to_string(max_bad_) + "); the last at line " + std::to_string(line));
}

std::string SkipLog::summary(std::int64_t total) const {
  if (skipped_.empty()) return "";
  std::string text = std::to_string(count()) + " of " + std::to_string(total) +
                     " records skipped in " + file_ + " (";
  bool first = true;
  for (const auto& [kind, n] : by_kind_) {
    text += (first ? "" : ", ") + std::to_string(n) + " " + kind;
    first = false;
  }
  return text + ")";
}

// ---- load_examples ----------------------------------------------------------------------------

namespace {

// A UTF-8 byte order mark (editors on Windows write one) is not part of the first record.
// The reader reads the descriptor (read(2)), so the mark is skipped there, not through stdio.
void skip_byte_order_mark(std::FILE* in) {
  const int fd = fileno(in);
  unsigned char head[3] = {0, 0, 0};
  if (fd >= 0 && ::pread(fd, head, 3, 0) == 3 && head[0] == 0xEF && head[1] == 0xBB &&
      head[2] == 0xBF)
    ::lseek(fd, 3, SEEK_SET);
}

}  // namespace

std::vector<Example> load_examples(const std::string& file, const InputOptions& input,
                                   const PrepareExample& prepare, SkipLog& skips) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(file.c_str(), "rb"), std::fclose);
  if (!in) throw ConfigError(file + ": cannot open the training data: " + std::strerror(errno));
  if (std::filesystem::is_directory(file))
    throw ConfigError(file + ": is a folder, not a file of training records");
  // Record ids count records; a TSV read with its header has one line more before them.
  const std::uint64_t first_line =
      input.format == InputFormat::tsv && input.columns.empty() ? 2 : 1;
  // FILE.gz / FILE.zst: read decompressed (io/compression.hpp).
  const bool compressed = compression_of(file) != Compression::none;
  if (!compressed) skip_byte_order_mark(in.get());
  RecordReader reader = compressed ? RecordReader(InputFile(file).stream_from(0), input)
                                   : RecordReader(in.get(), input);
  std::vector<Example> examples;
  Record record;
  std::int64_t total = 0;
  while (reader.next(record)) {
    ++total;
    const std::uint64_t line = record.id + first_line;
    if (!record.error.empty()) {
      skips.skip(line, record.error);
      continue;
    }
    try {
      Example example = prepare(record);
      example.line = line;
      examples.push_back(std::move(example));
    } catch (const RecordError& e) {
      skips.skip(line, e.what());
    }
  }
  if (std::ferror(in.get())) throw ConfigError(file + ": read error: " + std::strerror(errno));
  return examples;
}

// ---- order and batches --------------------------------------------------------------------------

std::vector<std::uint32_t> epoch_order(std::size_t n, std::uint64_t seed, std::int64_t epoch,
                                       bool shuffle) {
  std::vector<std::uint32_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
  if (!shuffle) return order;
  SplitMix64 rng(mix_seed(seed, static_cast<std::uint64_t>(epoch)));
  for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  return order;
}

std::vector<BatchSpan> cut_batches(const std::vector<std::uint32_t>& order,
                                   const std::vector<Example>& examples, std::size_t batch_size,
                                   std::int64_t max_tokens) {
  std::vector<BatchSpan> batches;
  if (max_tokens <= 0) {
    if (batch_size == 0) throw ConfigError("batch_size must be at least 1");
    for (std::size_t b = 0; b < order.size(); b += batch_size)
      batches.push_back({b, std::min(order.size(), b + batch_size)});
    return batches;
  }
  std::size_t begin = 0;
  std::int64_t longest = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::int64_t len = examples.at(order[i]).tokens();
    const std::int64_t padded = std::max(longest, len) * static_cast<std::int64_t>(i - begin + 1);
    const bool full = batch_size > 0 && i - begin >= batch_size;
    if (i > begin && (padded > max_tokens || full)) {
      batches.push_back({begin, i});
      begin = i;
      longest = 0;
    }
    longest = std::max(longest, len);
  }
  if (begin < order.size()) batches.push_back({begin, order.size()});
  return batches;
}

}  // namespace masque::train
