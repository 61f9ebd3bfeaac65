#include "masque/safetensors_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "masque/error.hpp"

namespace masque {

namespace fs = std::filesystem;

namespace {

// A file descriptor that writes everything or throws, and is closed on every path.
class OutputFile {
 public:
  explicit OutputFile(const fs::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create");
  }
  ~OutputFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, std::size_t size) {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("cannot write");
      p += n;
      size -= static_cast<std::size_t>(n);
    }
  }
  // Flushes to disk and closes; a rename after this cannot expose a partial file.
  void finish() {
    if (::fsync(fd_) != 0) fail("cannot flush");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close");
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw RuntimeError(path_.string() + ": " + what + ": " + std::strerror(errno));
  }
  fs::path path_;
  int fd_ = -1;
};

fs::path temporary_for(const fs::path& file) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) about "." + std::string.
  std::string name(1, '.');
  name += file.filename().string();
  name += ".tmp-";
  name += std::to_string(::getpid());
  return file.parent_path() / name;
}

// Writes through `write` into a temporary and renames it over `file`; removes the temporary
// when anything fails.
template <typename Write>
void replace_atomically(const fs::path& file, Write&& write) {
  const fs::path tmp = temporary_for(file);
  try {
    OutputFile out(tmp);
    write(out);
    out.finish();
    std::error_code ec;
    fs::rename(tmp, file, ec);
    if (ec)
      throw RuntimeError(file.string() +
                         ": cannot rename the finished file into place: " + ec.message());
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
}

}  // namespace

void write_safetensors(const fs::path& file, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::set<std::string> seen;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      throw ConfigError(file.string() + ": a tensor cannot be named '" + t.name + "'");
    if (!seen.insert(t.name).second)
      throw ConfigError(file.string() + ": tensor '" + t.name + "' is given twice");
  }
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  // Offsets follow the order given; the header's keys are sorted like the Python writer's.
  std::vector<std::size_t> order(tensors.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<std::size_t> begin(tensors.size());
  std::size_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    begin[i] = offset;
    offset += tensors[i].tensor.bytes();
  }
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return tensors[a].name < tensors[b].name; });
  for (std::size_t i : order) {
    const Tensor& t = tensors[i].tensor;
    // to_string(DType) gives the safetensors names (F32, BF16, ...).
    header[tensors[i].name] = {{"dtype", to_string(t.dtype())},
                               {"shape", t.shape()},
                               {"data_offsets", {begin[i], begin[i] + t.bytes()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const std::uint64_t header_size = text.size();
  replace_atomically(file, [&](OutputFile& out) {
    out.write(&header_size, sizeof header_size);  // little-endian on every masque target
    out.write(text.data(), text.size());
    for (const NamedTensor& t : tensors) out.write(t.tensor.raw(), t.tensor.bytes());
  });
}

void write_file_atomically(const fs::path& file, const std::string& text) {
  replace_atomically(file, [&](OutputFile& out) { out.write(text.data(), text.size()); });
}

}  // namespace masque
