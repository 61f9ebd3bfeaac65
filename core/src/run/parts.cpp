#include "run/parts.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "masque/error.hpp"

namespace masque {

namespace fs = std::filesystem;

namespace {

void write_json(const fs::path& path, const nlohmann::ordered_json& j) {
  const fs::path temp = path.string() + ".tmp";
  {
    std::ofstream f(temp, std::ios::binary);
    f << j.dump(2) << "\n";
    if (!f.flush()) throw RuntimeError(temp.string() + ": cannot write");
  }
  fs::rename(temp, path);
}

nlohmann::ordered_json read_json(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return nullptr;
  try {
    return nlohmann::ordered_json::parse(f);
  } catch (const std::exception& e) {
    throw RuntimeError(path.string() + ": " + e.what());
  }
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

void append(std::FILE* out, const fs::path& from, const fs::path& to) {
  File in(std::fopen(from.c_str(), "rb"));
  if (!in) throw RuntimeError(from.string() + ": cannot open: " + std::strerror(errno));
  std::vector<char> buffer(std::size_t{1} << 20);
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), in.get()))
    if (std::fwrite(buffer.data(), 1, n, out) != n)
      throw RuntimeError(to.string() + ": cannot write: " + std::strerror(errno));
  if (std::ferror(in.get())) throw RuntimeError(from.string() + ": cannot read");
}

}  // namespace

PartsDir::PartsDir(const fs::path& output) : dir_(output.string() + ".parts") {}

fs::path PartsDir::part(int shard) const {
  return dir_ / ("part-" + std::to_string(shard));
}

fs::path PartsDir::temp(int shard) const {
  return dir_ / ("part-" + std::to_string(shard) + ".tmp");
}

void PartsDir::create(const nlohmann::ordered_json& manifest) const {
  std::error_code ec;
  fs::remove_all(dir_, ec);
  if (!fs::create_directories(dir_, ec) && ec)
    throw ConfigError(dir_.string() +
                      ": cannot create the directory for the parts: " + ec.message());
  write_json(dir_ / "manifest.json", manifest);
}

nlohmann::ordered_json PartsDir::manifest() const {
  return read_json(dir_ / "manifest.json");
}

void PartsDir::commit(int shard, const nlohmann::ordered_json& figures) const {
  fs::rename(temp(shard), part(shard));
  write_json(part(shard).string() + ".json", figures);
}

bool PartsDir::done(int shard) const {
  std::error_code ec;
  return fs::is_regular_file(part(shard).string() + ".json", ec) &&
         fs::is_regular_file(part(shard), ec);
}

nlohmann::ordered_json PartsDir::figures(int shard) const {
  return read_json(part(shard).string() + ".json");
}

void PartsDir::assemble(int count, const fs::path& output) const {
  const fs::path temp = output.string() + ".masque-tmp";
  if (count == 1) {
    fs::rename(part(0), temp);  // one part, next to OUT: renamed, not copied
  } else {
    File out(std::fopen(temp.c_str(), "wb"));
    if (!out) throw RuntimeError(temp.string() + ": cannot create: " + std::strerror(errno));
    for (int k = 0; k < count; ++k) append(out.get(), part(k), output);
    if (std::fflush(out.get()) != 0)
      throw RuntimeError(output.string() + ": cannot write: " + std::strerror(errno));
  }
  fs::rename(temp, output);
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

}  // namespace masque
