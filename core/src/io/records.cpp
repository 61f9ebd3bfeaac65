#include "io/records.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <poll.h>
#include <unistd.h>

#include "json_depth.hpp"
#include "masque/error.hpp"

namespace masque {

InputFormat parse_input_format(const std::string& name) {
  if (name == "text" || name == "lines") return InputFormat::text;
  if (name == "tsv") return InputFormat::tsv;
  if (name == "jsonl" || name == "json") return InputFormat::jsonl;
  if (name == "ids") return InputFormat::ids;
  throw ConfigError("--input-format: expected text, tsv, jsonl or ids, got '" + name + "'");
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  unsigned char c = p[i];
  if (c < 0x80) return 1;
  auto cont = [&](std::size_t k) { return i + k < n && (p[i + k] & 0xc0) == 0x80; };
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xe0 && p[i + 1] < 0xa0) return 0;   // overlong
    if (c == 0xed && p[i + 1] >= 0xa0) return 0;  // surrogates
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xf0 && p[i + 1] < 0x90) return 0;   // overlong
    if (c == 0xf4 && p[i + 1] >= 0x90) return 0;  // > U+10FFFF
    return 4;
  }
  return 0;
}

// Bytes in the maximal subpart of an invalid sequence at s[i] (at least 1).
std::size_t invalid_run(std::string_view s, std::size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  unsigned char c = p[i];
  std::size_t want = c >= 0xf0 && c <= 0xf4   ? 4
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xc2 && c <= 0xdf ? 2
                                              : 1;
  std::size_t k = 1;
  while (k < want && i + k < s.size() && (p[i + k] & 0xc0) == 0x80) {
    // The second byte has a narrower range for some leads.
    if (k == 1 && ((c == 0xe0 && p[i + 1] < 0xa0) || (c == 0xed && p[i + 1] >= 0xa0) ||
                   (c == 0xf0 && p[i + 1] < 0x90) || (c == 0xf4 && p[i + 1] >= 0x90)))
      break;
    ++k;
  }
  return k;
}

}  // namespace

std::size_t first_invalid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    std::size_t len = utf8_sequence(text, i);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

bool is_valid_utf8(std::string_view text) {
  return first_invalid_utf8(text) == std::string_view::npos;
}

std::string repair_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::size_t len = utf8_sequence(text, i);
    if (len) {
      out.append(text.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += invalid_run(text, i);
    }
  }
  return out;
}

RecordReader::RecordReader(std::FILE* in, InputOptions options)
    : in_(in), options_(std::move(options)) {
  if (options_.format == InputFormat::tsv && !options_.columns.empty()) {
    header_read_ = true;
    check_tsv_columns(options_, options_.columns);
  }
}

RecordReader::RecordReader(std::unique_ptr<ByteSource> in, InputOptions options)
    : RecordReader(static_cast<std::FILE*>(nullptr), std::move(options)) {
  source_ = std::move(in);
}

namespace {

std::string comma_list(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

void check_tsv_columns(const InputOptions& input, const std::vector<std::string>& columns) {
  if (!input.require_tsv_field) return;
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (std::find(columns.begin() + static_cast<std::ptrdiff_t>(i) + 1, columns.end(),
                  columns[i]) != columns.end())
      throw ConfigError("the TSV columns (" + comma_list(columns) + ") name '" + columns[i] +
                        "' twice");
  if (std::find(columns.begin(), columns.end(), input.field) == columns.end())
    throw ConfigError("the TSV columns (" + comma_list(columns) + ") have no '" + input.field +
                      "' column (choose the text column with --field)");
}

// read(2), not fread: fread on a pipe waits until the whole buffer is full, which would hold
// records back from a slow producer. EINTR is left to the caller (a signal stops the run).
bool RecordReader::fill() {
  pos_ = end_ = 0;
  if (source_) {
    end_ = source_->read(buffer_.data(), buffer_.size());
    return end_ > 0;
  }
  const int fd = fileno(in_);
  if (fd < 0) {  // a stream without a descriptor (fmemopen)
    end_ = std::fread(buffer_.data(), 1, buffer_.size(), in_);
    if (end_ == 0 && std::ferror(in_)) throw RuntimeError("cannot read the input");
    return end_ > 0;
  }
  ssize_t n = ::read(fd, buffer_.data(), buffer_.size());
  // A failed read is not the end of the input: stopping quietly would lose the rest of it.
  if (n < 0 && errno != EINTR)
    throw RuntimeError(std::string("cannot read the input: ") + std::strerror(errno));
  if (n <= 0) return false;
  end_ = static_cast<std::size_t>(n);
  return true;
}

// Reads up to the next '\n' (exclusive). Bytes beyond max_record_bytes are counted but not
// kept, so one huge line cannot make memory grow.
RecordReader::LineStatus RecordReader::read_line(std::string& line, std::size_t& raw_bytes) {
  line.clear();
  raw_bytes = 0;
  bool too_long = false;
  bool any = false;
  while (true) {
    if (pos_ == end_ && !fill()) break;
    any = true;
    const char* begin = buffer_.data() + pos_;
    const void* nl = std::memchr(begin, '\n', end_ - pos_);
    std::size_t n = nl ? static_cast<const char*>(nl) - begin : end_ - pos_;
    raw_bytes += n + (nl ? 1 : 0);
    bytes_read_ += n + (nl ? 1 : 0);
    if (!too_long) {
      if (line.size() + n > options_.max_record_bytes) {
        too_long = true;
        std::string().swap(line);
      } else {
        line.append(begin, n);
      }
    }
    pos_ += n + (nl ? 1 : 0);
    if (nl) break;
  }
  if (!any) return LineStatus::eof;
  if (too_long) return LineStatus::too_long;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return LineStatus::ok;
}

bool RecordReader::would_block() const {
  if (pos_ < end_ || source_) return false;  // a source is a file: it never waits for a writer
  pollfd p{fileno(in_), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

bool RecordReader::next(Record& record) {
  std::string line;
  std::size_t raw = 0;
  while (true) {
    LineStatus status = read_line(line, raw);
    if (status == LineStatus::eof) return false;
    if (options_.format == InputFormat::tsv && !header_read_) {
      header_read_ = true;
      if (status != LineStatus::ok)
        throw ConfigError("the TSV header line is " + std::to_string(raw) +
                          " bytes, longer than the limit of " +
                          std::to_string(options_.max_record_bytes) + " (task.max_record_bytes)");
      read_header(line);
      continue;
    }
    record = Record();
    record.id = next_id_++;
    record.bytes = raw;
    if (status == LineStatus::too_long) {
      record.error = "the record is " + std::to_string(raw) + " bytes, longer than the limit of " +
                     std::to_string(options_.max_record_bytes) + " (task.max_record_bytes)";
      return true;
    }
    parse(record, line);
    return true;
  }
}

void RecordReader::read_header(std::string& line) {
  // A byte order mark (spreadsheet exports) is not part of the first column's name.
  if (line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);
  std::size_t start = 0;
  while (true) {
    auto tab = line.find('\t', start);
    options_.columns.push_back(line.substr(start, tab == std::string::npos ? tab : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  check_tsv_columns(options_, options_.columns);
}

void RecordReader::parse(Record& record, std::string& line) {
  if (std::size_t bad = first_invalid_utf8(line); bad != std::string::npos) {
    if (!options_.replace_invalid_utf8) {
      record.error = "invalid UTF-8 at byte " + std::to_string(bad) +
                     " (--set task.invalid_utf8=replace replaces invalid bytes with U+FFFD)";
      return;
    }
    line = repair_utf8(line);
  }
  switch (options_.format) {
    case InputFormat::text:
      record.text = line;
      record.fields[options_.field] = line;
      break;
    case InputFormat::jsonl:
      parse_jsonl(record, line);
      break;
    case InputFormat::tsv:
      parse_tsv(record, line);
      break;
    case InputFormat::ids:
      parse_ids(record, line);
      break;
  }
}

void RecordReader::parse_jsonl(Record& record, const std::string& line) {
  nlohmann::ordered_json j;
  try {
    j = parse_json_bounded<nlohmann::ordered_json>(line);
  } catch (const std::exception& e) {
    record.error = std::string("invalid JSON: ") + e.what();
    return;
  }
  if (!j.is_object()) {
    record.error = "expected a JSON object per line, got " + std::string(j.type_name());
    return;
  }
  record.fields = j;
  if (auto it = j.find("ids"); it != j.end()) {
    if (!it->is_array()) {
      record.error = "'ids' must be an array of integers";
      return;
    }
    std::vector<TokenId> ids;
    for (const auto& v : *it) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
          v.get<std::int64_t>() > INT32_MAX) {
        record.error = "'ids' must be an array of non-negative integers";
        return;
      }
      ids.push_back(v.get<TokenId>());
    }
    record.ids = std::move(ids);
  }
  if (auto it = j.find(options_.field); it != j.end()) {
    if (!it->is_string()) {
      record.error = "field '" + options_.field + "' must be a string";
      return;
    }
    record.text = it->get<std::string>();
  } else if (!record.ids && !j.contains("messages")) {  // a conversation: the task renders it
    record.error = "no '" + options_.field +
                   "' field (choose the field with --field), no 'ids' and no 'messages'";
  }
}

void RecordReader::parse_tsv(Record& record, const std::string& line) {
  std::vector<std::string> cells;
  std::size_t start = 0;
  while (true) {
    auto tab = line.find('\t', start);
    cells.push_back(line.substr(start, tab == std::string::npos ? tab : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  if (cells.size() != options_.columns.size()) {
    record.error = "expected " + std::to_string(options_.columns.size()) +
                   " tab-separated columns (" + comma_list(options_.columns) + "), got " +
                   std::to_string(cells.size());
    return;
  }
  for (std::size_t i = 0; i < cells.size(); ++i) record.fields[options_.columns[i]] = cells[i];
  auto it = record.fields.find(options_.field);
  if (it == record.fields.end()) {
    // Without require_tsv_field: the first one.
    record.text = cells.empty() ? "" : cells[0];
  } else {
    record.text = it->get<std::string>();
  }
}

void RecordReader::parse_ids(Record& record, const std::string& line) {
  std::vector<TokenId> ids;
  const char* p = line.data();
  const char* end = p + line.size();
  while (p < end) {
    while (p < end && (*p == ' ' || *p == '\t')) ++p;
    if (p == end) break;
    TokenId v = 0;
    auto [next, ec] = std::from_chars(p, end, v);
    if (ec != std::errc() || v < 0 || (next < end && *next != ' ' && *next != '\t')) {
      record.error = "expected space-separated non-negative token ids, got '" +
                     std::string(p, std::min<std::size_t>(20, static_cast<std::size_t>(end - p))) +
                     "'";
      return;
    }
    ids.push_back(v);
    p = next;
  }
  record.fields["ids"] = ids;
  record.ids = std::move(ids);
}

}  // namespace masque
