#include "tasks/npy_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "masque/error.hpp"

namespace masque {

namespace {

// Room for any shape: magic (6) + version (2) + length (2) + dict, padded with spaces to 128.
constexpr std::size_t kHeaderBytes = 128;

static_assert(std::endian::native == std::endian::little,
              "the .npy writer stores '<f4' rows as they are in memory");

}  // namespace

std::string npy_header(std::uint64_t rows, std::size_t columns) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) +
                     ", " + std::to_string(columns) + "), }";
  const std::size_t length = kHeaderBytes - 10;
  if (dict.size() + 1 > length) throw RuntimeError("npy header: shape too large");
  dict.append(length - dict.size() - 1, ' ');
  dict += '\n';
  std::string header("\x93NUMPY\x01\x00", 8);
  header += static_cast<char>(length & 0xff);
  header += static_cast<char>(length >> 8);
  return header + dict;
}

NpyWriter::NpyWriter(const std::filesystem::path& path, std::size_t columns,
                     std::uint64_t kept_rows)
    : path_(path), columns_(columns) {
  if (kept_rows > 0) {
    keep_rows(kept_rows);
    return;
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw ConfigError("task.npy: cannot create " + path.string() + ": " + std::strerror(errno));
  const std::string header = npy_header(0, columns_);
  write_at(0, header.data(), header.size());
}

void NpyWriter::keep_rows(std::uint64_t rows) {
  const std::string what = "task.npy: cannot resume " + path_.string() + ": ";
  fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0) throw ConfigError(what + std::strerror(errno));
  // The header this writer wrote: the same bytes as npy_header of the rows it states.
  std::string header(kHeaderBytes, '\0');
  const ssize_t n = ::pread(fd_, header.data(), header.size(), 0);
  const std::string prefix = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  std::uint64_t had = 0;
  bool ours =
      n == static_cast<ssize_t>(kHeaderBytes) && header.compare(10, prefix.size(), prefix) == 0;
  if (ours) {
    had = std::strtoull(header.c_str() + 10 + prefix.size(), nullptr, 10);
    ours = header == npy_header(had, columns_);
  }
  if (!ours)
    throw ConfigError(what + "it is not the (rows, " + std::to_string(columns_) +
                      ") float32 .npy a run of this task writes");
  if (had < rows)
    throw ConfigError(what + "it holds " + std::to_string(had) + " rows and the kept output " +
                      std::to_string(rows) + " records");
  rows_ = rows;
  if (::ftruncate(fd_, static_cast<off_t>(kHeaderBytes + rows * columns_ * sizeof(float))) != 0)
    throw ConfigError(what + std::strerror(errno));
  const std::string kept = npy_header(rows_, columns_);
  write_at(0, kept.data(), kept.size());
}

NpyWriter::~NpyWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void NpyWriter::write_at(std::uint64_t offset, const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw RuntimeError("task.npy: writing " + path_.string() + ": " + std::strerror(errno));
    p += n;
    offset += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
}

void NpyWriter::grow_to(std::uint64_t rows) {
  if (rows <= rows_) return;
  // Rows between the old end and the new one that nobody wrote yet read as NaN until written.
  const std::vector<float> nan(columns_, std::numeric_limits<float>::quiet_NaN());
  for (std::uint64_t r = rows_; r + 1 < rows; ++r)
    write_at(kHeaderBytes + r * columns_ * sizeof(float), nan.data(), columns_ * sizeof(float));
  rows_ = rows;
  const std::string header = npy_header(rows_, columns_);
  write_at(0, header.data(), header.size());
}

void NpyWriter::write_row(std::uint64_t row, std::span<const float> values) {
  if (values.size() != columns_)
    throw RuntimeError("task.npy: a row of " + std::to_string(values.size()) + " values for " +
                       std::to_string(columns_) + " columns");
  std::lock_guard lock(mutex_);
  grow_to(row + 1);
  write_at(kHeaderBytes + row * columns_ * sizeof(float), values.data(), columns_ * sizeof(float));
}

void NpyWriter::write_missing(std::uint64_t row) {
  const std::vector<float> nan(columns_, std::numeric_limits<float>::quiet_NaN());
  write_row(row, nan);
}

}  // namespace masque
