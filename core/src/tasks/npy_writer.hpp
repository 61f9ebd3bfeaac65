// A float32 matrix written as a NumPy .npy file (format version 1.0, little-endian '<f4',
// C order, shape (rows, columns)), row by row in any order: row r of record r lands at its
// place whichever thread writes it, so the file is in input order however batches finish.
// The header always states the rows written so far (the highest row + 1), so the file is a
// valid .npy at every moment; rows never written (a failed record) hold NaN.
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <span>

namespace masque {

class NpyWriter {
 public:
  // Creates (truncates) `path`, or with `kept_rows` > 0 (a resumed run) keeps the first
  // `kept_rows` rows of the .npy already there and drops the rest; ConfigError when it cannot
  // (no such file, another shape, fewer rows).
  NpyWriter(const std::filesystem::path& path, std::size_t columns, std::uint64_t kept_rows = 0);
  ~NpyWriter();
  NpyWriter(const NpyWriter&) = delete;
  NpyWriter& operator=(const NpyWriter&) = delete;

  std::size_t columns() const { return columns_; }
  // Writes row `row` (columns() values); RuntimeError on a write failure. Thread-safe.
  void write_row(std::uint64_t row, std::span<const float> values);
  // Row `row` as NaN (a record that has no vector). Thread-safe.
  void write_missing(std::uint64_t row);

 private:
  void grow_to(std::uint64_t rows);  // under mutex_
  void write_at(std::uint64_t offset, const void* data, std::size_t bytes);
  void keep_rows(std::uint64_t rows);  // opening for a resumed run

  std::filesystem::path path_;
  std::size_t columns_;
  int fd_ = -1;
  std::mutex mutex_;
  std::uint64_t rows_ = 0;
};

// The 128-byte-aligned NPY 1.0 header of a (rows, columns) '<f4' matrix, padded to a fixed
// size so that rewriting it never moves the data.
std::string npy_header(std::uint64_t rows, std::size_t columns);

}  // namespace masque
