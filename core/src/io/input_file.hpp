// The corpus file of `-i FILE`: plain, or gzip / zstd by its name (io/compression.hpp). Shards
// and --resume address it by byte offsets into its data, decompressed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "io/compression.hpp"
#include "io/records.hpp"

namespace masque {

class InputFile {
 public:
  // ConfigError naming `path` when it cannot be opened.
  explicit InputFile(std::string path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  Compression compression() const { return compression_; }

  // Bytes [offset, offset + n) of the data, fewer at its end. A compressed file is read
  // forward; an offset behind the last read starts it again from the beginning.
  std::size_t read_at(char* buffer, std::size_t n, std::uint64_t offset);
  // The data's size in bytes (of a compressed file: one pass through it, then remembered).
  std::uint64_t size();
  // The data from `offset` on, for a RecordReader.
  std::unique_ptr<ByteSource> stream_from(std::uint64_t offset) const;

 private:
  std::string path_;
  Compression compression_;
  int fd_ = -1;                                 // a plain file
  std::unique_ptr<Decompressor> decompressor_;  // a compressed one at its last read (lazily)
  std::optional<std::uint64_t> size_;
};

}  // namespace masque
