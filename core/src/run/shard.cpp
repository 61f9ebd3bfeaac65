#include "run/shard.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "masque/error.hpp"

namespace masque {

namespace {

constexpr std::size_t kChunk = std::size_t{1} << 20;

}  // namespace

ShardSpec parse_shard_spec(const std::string& text) {
  constexpr int kMaxShards = 1000000;
  ShardSpec spec;
  const auto slash = text.find('/');
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  const auto whole = [](const char* from, const char* to, int& value) {
    const auto [ptr, ec] = std::from_chars(from, to, value);
    return ec == std::errc() && ptr == to;
  };
  const bool ok = slash != std::string::npos && whole(begin, begin + slash, spec.index) &&
                  whole(begin + slash + 1, end, spec.count) && spec.count >= 1 &&
                  spec.count <= kMaxShards && spec.index >= 0 && spec.index < spec.count;
  if (!ok)
    throw ConfigError("--shard: expected K/N with 0 <= K < N <= " + std::to_string(kMaxShards) +
                      " (e.g. 0/4 for the first of 4), got '" + text + "'");
  return spec;
}

// The header is the file's first line, split at tabs as the record reader does.
ShardedInput inspect_input(InputFile& file, const InputOptions& input) {
  ShardedInput info;
  if (file.compression() == Compression::none) info.size = file.size();
  if (input.format != InputFormat::tsv) return info;
  if (!input.columns.empty()) {
    check_tsv_columns(input, input.columns);  // before an output or parts folder is made
    return info;
  }
  std::string line;
  std::vector<char> buffer(kChunk);
  std::uint64_t at = 0;
  while (true) {
    const std::size_t n = file.read_at(buffer.data(), buffer.size(), at);
    const char* nl = static_cast<const char*>(std::memchr(buffer.data(), '\n', n));
    const std::size_t take = nl ? static_cast<std::size_t>(nl - buffer.data()) : n;
    line.append(buffer.data(), take);
    at += take;
    if (line.size() > input.max_record_bytes)
      throw ConfigError("the TSV header line is longer than the limit of " +
                        std::to_string(input.max_record_bytes) + " (task.max_record_bytes)");
    if (nl) {
      ++at;
      break;
    }
    if (n < buffer.size()) break;
  }
  info.data_begin = at;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (at == 0) return info;
  if (line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // as the record reader does
  for (std::size_t start = 0;;) {
    const auto tab = line.find('\t', start);
    info.columns.push_back(line.substr(start, tab == std::string::npos ? tab : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  check_tsv_columns(input, info.columns);
  return info;
}

std::uint64_t shard_begin(InputFile& file, const ShardedInput& input, int index, int count) {
  const std::uint64_t size = file.size();
  const std::uint64_t data = size - input.data_begin;
  // index * data / count without overflow for any file size.
  const auto target =
      input.data_begin +
      static_cast<std::uint64_t>(static_cast<unsigned __int128>(data) *
                                 static_cast<unsigned>(index) / static_cast<unsigned>(count));
  if (target <= input.data_begin) return input.data_begin;
  // A boundary is just after a line end: look from the byte before the target.
  std::vector<char> buffer(kChunk);
  for (std::uint64_t at = target - 1; at < size;) {
    const std::size_t n = file.read_at(buffer.data(), buffer.size(), at);
    if (n == 0) break;
    if (const void* nl = std::memchr(buffer.data(), '\n', n))
      return at + static_cast<std::uint64_t>(static_cast<const char*>(nl) - buffer.data()) + 1;
    at += n;
  }
  return size;
}

std::uint64_t count_line_ends(InputFile& file, std::uint64_t begin, std::uint64_t end) {
  std::vector<char> buffer(kChunk);
  std::uint64_t lines = 0;
  for (std::uint64_t at = begin; at < end;) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, end - at));
    const std::size_t n = file.read_at(buffer.data(), want, at);
    if (n == 0) break;
    lines += static_cast<std::uint64_t>(std::count(buffer.data(), buffer.data() + n, '\n'));
    at += n;
  }
  return lines;
}

std::uint64_t record_begin(InputFile& file, const ShardedInput& input, std::uint64_t record) {
  std::vector<char> buffer(kChunk);
  std::uint64_t at = input.data_begin;
  while (record > 0) {
    const std::size_t n = file.read_at(buffer.data(), buffer.size(), at);
    if (n == 0) break;
    const char* p = buffer.data();
    const char* end = p + n;
    while (record > 0) {
      const void* nl = std::memchr(p, '\n', static_cast<std::size_t>(end - p));
      if (!nl) break;
      p = static_cast<const char*>(nl) + 1;
      --record;
    }
    at += record > 0 ? n : static_cast<std::uint64_t>(p - buffer.data());
  }
  return at;  // the end of the data when it has fewer records
}

ShardRange shard_range(InputFile& file, const ShardedInput& input, int index, int count) {
  ShardRange range;
  range.begin = shard_begin(file, input, index, count);
  range.end = index + 1 == count ? file.size() : shard_begin(file, input, index + 1, count);
  range.first_record = count_line_ends(file, input.data_begin, range.begin);
  return range;
}

}  // namespace masque
