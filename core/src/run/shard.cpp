#include "run/shard.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "masque/error.hpp"

namespace masque {

namespace {

constexpr std::size_t kChunk = std::size_t{1} << 20;

// pread until `n` bytes or the end of the file; RuntimeError on a read error.
std::size_t read_at(int fd, char* buffer, std::size_t n, std::uint64_t offset) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, buffer + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw RuntimeError(std::string("cannot read the input: ") + std::strerror(errno));
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

std::uint64_t file_size(int fd) {
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0) throw ConfigError("the input is not a seekable file (sharding needs -i FILE)");
  return static_cast<std::uint64_t>(end);
}

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
ShardedInput inspect_input(int fd, const InputOptions& input) {
  ShardedInput info;
  info.size = file_size(fd);
  if (input.format != InputFormat::tsv) return info;
  if (!input.columns.empty()) {
    check_tsv_columns(input, input.columns);  // before an output or parts folder is made
    return info;
  }
  std::string line;
  std::vector<char> buffer(kChunk);
  std::uint64_t at = 0;
  while (true) {
    const std::size_t n = read_at(fd, buffer.data(), buffer.size(), at);
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

std::uint64_t shard_begin(int fd, const ShardedInput& input, int index, int count) {
  const std::uint64_t data = input.size - input.data_begin;
  // index * data / count without overflow for any file size.
  const auto target =
      input.data_begin +
      static_cast<std::uint64_t>(static_cast<unsigned __int128>(data) *
                                 static_cast<unsigned>(index) / static_cast<unsigned>(count));
  if (target <= input.data_begin) return input.data_begin;
  // A boundary is just after a line end: look from the byte before the target.
  std::vector<char> buffer(kChunk);
  for (std::uint64_t at = target - 1; at < input.size;) {
    const std::size_t n = read_at(fd, buffer.data(), buffer.size(), at);
    if (n == 0) break;
    if (const void* nl = std::memchr(buffer.data(), '\n', n))
      return at + static_cast<std::uint64_t>(static_cast<const char*>(nl) - buffer.data()) + 1;
    at += n;
  }
  return input.size;
}

std::uint64_t count_line_ends(int fd, std::uint64_t begin, std::uint64_t end) {
  std::vector<char> buffer(kChunk);
  std::uint64_t lines = 0;
  for (std::uint64_t at = begin; at < end;) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, end - at));
    const std::size_t n = read_at(fd, buffer.data(), want, at);
    if (n == 0) break;
    lines += static_cast<std::uint64_t>(std::count(buffer.data(), buffer.data() + n, '\n'));
    at += n;
  }
  return lines;
}

std::uint64_t record_begin(int fd, const ShardedInput& input, std::uint64_t record) {
  std::vector<char> buffer(kChunk);
  std::uint64_t at = input.data_begin;
  while (record > 0 && at < input.size) {
    const std::size_t n = read_at(fd, buffer.data(), buffer.size(), at);
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
  return record > 0 ? input.size : at;
}

ShardRange shard_range(int fd, const ShardedInput& input, int index, int count) {
  ShardRange range;
  range.begin = shard_begin(fd, input, index, count);
  range.end = index + 1 == count ? input.size : shard_begin(fd, input, index + 1, count);
  range.first_record = count_line_ends(fd, input.data_begin, range.begin);
  return range;
}

}  // namespace masque
