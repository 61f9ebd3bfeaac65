#include "io/input_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "masque/error.hpp"

namespace masque {

namespace {

std::size_t pread_all(int fd, char* buffer, std::size_t n, std::uint64_t offset,
                      const std::string& path) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, buffer + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw RuntimeError(path + ": cannot read the input file: " + std::strerror(errno));
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

// A plain file from an offset on, read with read(2) on a descriptor of its own.
class FileRange final : public ByteSource {
 public:
  FileRange(const std::string& path, std::uint64_t offset) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0 || ::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0)
      throw RuntimeError(path + ": cannot open the input file: " + std::strerror(errno));
  }
  ~FileRange() override { ::close(fd_); }
  std::size_t read(char* buffer, std::size_t n) override {
    while (true) {
      const ssize_t r = ::read(fd_, buffer, n);
      if (r >= 0) return static_cast<std::size_t>(r);
      // EINTR is a stop signal (no SA_RESTART): end here, the run is stopping.
      if (errno == EINTR) return 0;
      throw RuntimeError(path_ + ": cannot read the input file: " + std::strerror(errno));
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
};

class Decompressed final : public ByteSource {
 public:
  Decompressed(const std::string& path, Compression c, std::uint64_t offset) : in_(path, c) {
    in_.skip(offset);
  }
  std::size_t read(char* buffer, std::size_t n) override { return in_.read(buffer, n); }

 private:
  Decompressor in_;
};

}  // namespace

InputFile::InputFile(std::string path)
    : path_(std::move(path)), compression_(compression_of(path_)) {
  if (compression_ != Compression::none) {
    if (::access(path_.c_str(), R_OK) != 0)  // as Decompressor says it, before any reading
      throw ConfigError(path_ + ": cannot open the input file: " + std::strerror(errno));
    return;  // decompressed when read_at or size asks: stream_from needs no reader here
  }
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw ConfigError(path_ + ": cannot open the input file: " + std::strerror(errno));
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t InputFile::read_at(char* buffer, std::size_t n, std::uint64_t offset) {
  if (compression_ == Compression::none) return pread_all(fd_, buffer, n, offset, path_);
  if (!decompressor_ || offset < decompressor_->position())
    decompressor_ = std::make_unique<Decompressor>(path_, compression_);
  decompressor_->skip(offset - decompressor_->position());
  std::size_t got = 0;
  while (got < n) {
    const std::size_t r = decompressor_->read(buffer + got, n - got);
    if (r == 0) break;
    got += r;
  }
  return got;
}

std::uint64_t InputFile::size() {
  if (size_) return *size_;
  if (compression_ == Compression::none) {
    const off_t end = ::lseek(fd_, 0, SEEK_END);
    if (end < 0) throw ConfigError(path_ + ": not a seekable file (sharding needs -i FILE)");
    size_ = static_cast<std::uint64_t>(end);
  } else {
    if (!decompressor_) decompressor_ = std::make_unique<Decompressor>(path_, compression_);
    std::vector<char> sink(std::size_t{1} << 16);
    while (decompressor_->read(sink.data(), sink.size()) > 0) {
    }
    size_ = decompressor_->position();
  }
  return *size_;
}

std::unique_ptr<ByteSource> InputFile::stream_from(std::uint64_t offset) const {
  if (compression_ == Compression::none) return std::make_unique<FileRange>(path_, offset);
  return std::make_unique<Decompressed>(path_, compression_, offset);
}

}  // namespace masque
