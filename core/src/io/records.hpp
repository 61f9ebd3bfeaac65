// Input records: plain lines, TSV with named columns, JSON lines, or token ids.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "masque/tokenizer.hpp"

namespace masque {

enum class InputFormat { text, tsv, jsonl, ids };

InputFormat parse_input_format(const std::string& name);  // ConfigError on unknown names

struct InputOptions {
  InputFormat format = InputFormat::text;
  std::string field = "text";        // jsonl / tsv: the column holding the text
  std::vector<std::string> columns;  // tsv: column names; empty = first line is a header
  // tsv: the columns must name `field` once (a ConfigError otherwise). masque run asks for it;
  // without it a missing field reads the first column (training names its own columns).
  bool require_tsv_field = false;
  std::size_t max_record_bytes = 16u << 20;  // longer lines are skipped (an error record)
  bool replace_invalid_utf8 = false;         // else invalid UTF-8 makes an error record
};

struct Record {
  std::uint64_t id = 0;  // 0-based record number in the input
  std::string text;      // the text to process ("" when given as ids)
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();  // all input fields
  std::optional<std::vector<TokenId>> ids;                           // pre-tokenized input
  std::size_t bytes = 0;                                             // size of the raw input line
  std::string error;  // the record could not be read (invalid UTF-8, too long, bad JSON)
};

// Bytes a RecordReader reads when they do not come from a FILE: a decompressed file, a byte
// range of a file (io/input_file.hpp).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to `n` bytes; 0 at the end. Throws (RuntimeError naming the file) when it cannot read.
  virtual std::size_t read(char* buffer, std::size_t n) = 0;
};

// Reads records one at a time from a stream; never holds more than one line (bounded by
// max_record_bytes) in memory.
class RecordReader {
 public:
  RecordReader(std::FILE* in, InputOptions options);
  RecordReader(std::unique_ptr<ByteSource> in, InputOptions options);
  // False at end of input.
  bool next(Record& record);
  std::uint64_t bytes_read() const { return bytes_read_; }
  // True when the next record is not buffered and the input has nothing to read yet.
  bool would_block() const;

 private:
  enum class LineStatus { ok, too_long, eof };
  LineStatus read_line(std::string& line, std::size_t& raw_bytes);
  void parse(Record& record, std::string& line);
  void parse_jsonl(Record& record, const std::string& line);
  void parse_tsv(Record& record, const std::string& line);
  void parse_ids(Record& record, const std::string& line);
  void read_header(std::string& line);

  bool fill();  // refills buffer_ from in_; false at end of input

  std::FILE* in_ = nullptr;
  std::unique_ptr<ByteSource> source_;  // instead of in_
  InputOptions options_;
  std::vector<char> buffer_ = std::vector<char>(1 << 16);
  std::size_t pos_ = 0, end_ = 0;
  std::uint64_t next_id_ = 0;
  std::uint64_t bytes_read_ = 0;
  bool header_read_ = false;
};

// With input.require_tsv_field: a ConfigError when `columns` name a column twice or lack
// input.field (either would silently read another column).
void check_tsv_columns(const InputOptions& input, const std::vector<std::string>& columns);

// True when `text` is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view text);
// Replaces every invalid sequence with U+FFFD (one per maximal invalid subpart, as ICU does).
std::string repair_utf8(std::string_view text);
// The byte offset of the first invalid sequence, for error messages.
std::size_t first_invalid_utf8(std::string_view text);

}  // namespace masque
