// Shards of a corpus file: N contiguous byte ranges of about equal size (of its data,
// decompressed when the file is compressed), each starting at the beginning of a record, so N
// processes can each read one and their outputs, concatenated in shard order, are what one process
// writes (the record ids are global).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/input_file.hpp"
#include "io/records.hpp"

namespace masque {

// "K/N" (0 <= K < N): shard K of N. ConfigError naming --shard otherwise.
struct ShardSpec {
  int index = 0;
  int count = 1;
};
ShardSpec parse_shard_spec(const std::string& text);

// What every shard needs to know about the whole input file.
struct ShardedInput {
  std::uint64_t size = 0;            // bytes of a plain file; 0 for a compressed one, whose size
                                     // takes a pass through it (InputFile::size)
  std::uint64_t data_begin = 0;      // after the TSV header line, else 0
  std::vector<std::string> columns;  // the TSV header's columns (when read from the file)
};

// Reads the TSV header when `input` needs one; ConfigError when it is over the record limit.
ShardedInput inspect_input(InputFile& file, const InputOptions& input);

// Byte range [begin, end) of shard `index` of `count`, and the id of its first record.
struct ShardRange {
  std::uint64_t begin = 0, end = 0;
  std::uint64_t first_record = 0;
};

// The first record boundary at or after data_begin + index * (size - data_begin) / count.
std::uint64_t shard_begin(InputFile& file, const ShardedInput& input, int index, int count);
// The number of line ends in [begin, end): the records before `end` when begin is a boundary.
std::uint64_t count_line_ends(InputFile& file, std::uint64_t begin, std::uint64_t end);
// Where record `record` (counted from data_begin) starts: just after its record-th line end;
// the end of the file when it has fewer records (what --resume continues from).
std::uint64_t record_begin(InputFile& file, const ShardedInput& input, std::uint64_t record);
// The whole range, its first record counted from the start of the data.
ShardRange shard_range(InputFile& file, const ShardedInput& input, int index, int count);

}  // namespace masque
