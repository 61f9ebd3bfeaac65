// Fuzz target: corpus records (RecordReader over fmemopen) in every input format: text, TSV
// with a header line, TSV with given columns, JSON lines and ids. The first byte picks the
// options (a 16-byte record limit or the default; invalid UTF-8 an error or replaced).
//
// No record may be lost or invented: one record per line (the TSV header excepted), ids 0, 1,
// 2, ... and the raw bytes add up to the input. A record either has an error or is usable:
// valid UTF-8 text and, for ids input, its ids.
#include <algorithm>
#include <cstdio>

#include "fuzz_support.hpp"
#include "io/records.hpp"
#include "masque/error.hpp"

namespace {

using masque::InputFormat;

std::size_t count_lines(std::string_view text) {
  std::size_t lines = 0;
  for (char c : text) lines += c == '\n';
  return lines + (!text.empty() && text.back() != '\n');
}

// Bytes of the first line, without and with its '\n'.
std::size_t first_line_content(std::string_view text) {
  return std::min(text.find('\n'), text.size());
}
std::size_t first_line_bytes(std::string_view text) {
  return first_line_content(text) + (text.find('\n') != std::string_view::npos);
}

void check_record(const masque::Record& r, const masque::InputOptions& options) {
  if (!r.error.empty()) return;
  MASQUE_FUZZ_CHECK(r.bytes <= options.max_record_bytes + 1);
  MASQUE_FUZZ_CHECK(masque::is_valid_utf8(r.text));
  if (options.format == InputFormat::ids) MASQUE_FUZZ_CHECK(r.ids.has_value());
  if (r.ids)
    for (masque::TokenId id : *r.ids) MASQUE_FUZZ_CHECK(id >= 0);
}

void read_all(std::string_view text, const masque::InputOptions& options) {
  std::FILE* in = fmemopen(const_cast<char*>(text.data()), text.size(), "rb");
  MASQUE_FUZZ_CHECK(in != nullptr);
  masque::RecordReader reader(in, options);
  masque::Record r;
  std::size_t records = 0, bytes = 0;
  const bool header = options.format == InputFormat::tsv && options.columns.empty();
  try {
    while (reader.next(r)) {
      MASQUE_FUZZ_CHECK(r.id == records);
      check_record(r, options);
      ++records;
      bytes += r.bytes;
    }
  } catch (const masque::ConfigError&) {
    // Only a TSV header longer than the record limit stops the reading.
    MASQUE_FUZZ_CHECK(header && first_line_content(text) > options.max_record_bytes);
    std::fclose(in);
    return;
  }
  std::fclose(in);
  const std::size_t lines = count_lines(text);
  MASQUE_FUZZ_CHECK(records == (header && lines > 0 ? lines - 1 : lines));
  MASQUE_FUZZ_CHECK(bytes == text.size() - (header ? first_line_bytes(text) : 0));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;  // fmemopen needs at least one byte
  const std::string_view text = masque::fuzz::as_text(data + 1, size - 1);
  masque::InputOptions options;
  if (data[0] & 1) options.max_record_bytes = 16;
  options.replace_invalid_utf8 = data[0] & 2;
  for (InputFormat format :
       {InputFormat::text, InputFormat::tsv, InputFormat::jsonl, InputFormat::ids}) {
    options.format = format;
    options.field = format == InputFormat::tsv ? "b" : "text";
    options.columns.clear();
    read_all(text, options);
    if (format == InputFormat::tsv) {
      options.columns = {"a", "b"};
      read_all(text, options);
    }
  }
  return 0;
}
