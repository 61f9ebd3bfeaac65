#include "masque/train/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "masque/error.hpp"

namespace masque::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kStaging = ".staging-checkpoint";

// ".staging-checkpoint-" + what + this process's id: a folder being written, replaced or
// deleted (appended piece by piece: GCC 12 warns falsely, -Warray-bounds, on a chain of +).
std::string staging_name(const std::string& what) {
  std::string name = kStaging;
  name.append("-").append(what).append(std::to_string(::getpid()));
  return name;
}

std::string step_name(std::int64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "%s%06lld", kPrefix, static_cast<long long>(step));
  return name;
}

// The step of a folder named checkpoint-N, or -1.
std::int64_t parse_step(const std::string& name) {
  const std::string prefix = kPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  std::int64_t step = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

void remove_all_or_throw(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) throw RuntimeError(path.string() + ": cannot remove: " + ec.message());
}

// fsync every regular file of a folder (the fill callback may have used plain streams).
void sync_files(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      if (fd >= 0) ::close(fd);
      throw RuntimeError(entry.path().string() + ": cannot flush to disk");
    }
    ::close(fd);
  }
}

}  // namespace

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // not every file system lets a folder be opened; the rename still holds
  ::fsync(fd);
  ::close(fd);
}

CheckpointStore::CheckpointStore(fs::path root, int keep_last)
    : root_(std::move(root)), keep_last_(keep_last) {
  if (keep_last_ < 1) throw ConfigError("checkpoints: keep_last must be at least 1");
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) throw ConfigError(root_.string() + ": cannot create the output folder: " + ec.message());
  // A staging folder left by a crash is never a checkpoint.
  for (const auto& entry : fs::directory_iterator(root_))
    if (entry.path().filename().string().rfind(kStaging, 0) == 0) remove_all_or_throw(entry.path());
}

fs::path CheckpointStore::path_of(std::int64_t step) const {
  return root_ / step_name(step);
}

fs::path CheckpointStore::save(std::int64_t step,
                               const std::function<void(const fs::path&)>& fill) {
  const fs::path staging = root_ / staging_name("");
  remove_all_or_throw(staging);
  fs::create_directories(staging);
  try {
    fill(staging);
    sync_files(staging);
    const fs::path final_path = path_of(step);
    // A checkpoint of the same step (a resumed run saving again) is replaced, never merged.
    if (fs::exists(final_path)) {
      const fs::path old = root_ / staging_name("old-");
      fs::rename(final_path, old);
      fs::rename(staging, final_path);
      remove_all_or_throw(old);
    } else {
      fs::rename(staging, final_path);
    }
    sync_directory(root_);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
  point("last", step);
  prune();
  return path_of(step);
}

void CheckpointStore::point(const char* link, std::int64_t step) {
  const fs::path tmp = root_ / (std::string(".") + link + ".tmp-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_directory_symlink(step_name(step), tmp);
  fs::rename(tmp, root_ / link);
  sync_directory(root_);
}

void CheckpointStore::mark_best(std::int64_t step) {
  if (!fs::is_directory(path_of(step)))
    throw RuntimeError(path_of(step).string() + ": no such checkpoint to mark as best");
  point("best", step);
}

std::optional<fs::path> CheckpointStore::target(const char* link) const {
  std::error_code ec;
  const fs::path to = fs::read_symlink(root_ / link, ec);
  if (ec) return std::nullopt;
  return root_ / to;
}

std::optional<fs::path> CheckpointStore::last() const {
  return target("last");
}
std::optional<fs::path> CheckpointStore::best() const {
  return target("best");
}

std::vector<std::int64_t> CheckpointStore::steps() const {
  std::vector<std::int64_t> found;
  for (const auto& entry : fs::directory_iterator(root_)) {
    if (entry.is_symlink() || !entry.is_directory()) continue;
    const std::int64_t step = parse_step(entry.path().filename().string());
    if (step >= 0) found.push_back(step);
  }
  std::sort(found.begin(), found.end());
  return found;
}

void CheckpointStore::prune() {
  const std::vector<std::int64_t> all = steps();
  const auto best_path = best();
  const auto last_path = last();
  const std::size_t keep = static_cast<std::size_t>(keep_last_);
  for (std::size_t i = 0; i + keep < all.size(); ++i) {
    const fs::path p = path_of(all[i]);
    if ((best_path && fs::equivalent(*best_path, p)) ||
        (last_path && fs::equivalent(*last_path, p)))
      continue;
    discard(p);
  }
}

void CheckpointStore::discard(const fs::path& checkpoint) const {
  // Hidden first, then deleted: a kill during the deletion leaves a staging folder (removed
  // when the store is next opened), never a partial checkpoint.
  const fs::path doomed = root_ / staging_name("discarded-" + checkpoint.filename().string() + "-");
  remove_all_or_throw(doomed);
  std::error_code ec;
  fs::rename(checkpoint, doomed, ec);
  if (ec) throw RuntimeError(checkpoint.string() + ": cannot remove: " + ec.message());
  sync_directory(root_);
  remove_all_or_throw(doomed);
}

std::vector<std::int64_t> CheckpointStore::resume_at(std::int64_t step, std::int64_t best_step) {
  std::vector<std::int64_t> abandoned;
  for (const std::int64_t s : steps())
    if (s > step) abandoned.push_back(s);
  // `best` first: it may name an abandoned checkpoint, and must never dangle.
  if (best_step >= 0 && best_step <= step && fs::is_directory(path_of(best_step))) {
    point("best", best_step);
  } else {
    std::error_code ec;
    fs::remove(root_ / "best", ec);
  }
  if (fs::is_directory(path_of(step))) point("last", step);
  for (const std::int64_t s : abandoned) discard(path_of(s));
  return abandoned;
}

fs::path CheckpointStore::resolve_resume(const fs::path& dir) {
  if (fs::exists(dir / "trainer_state.json")) return dir;
  if (fs::exists(dir / "last" / "trainer_state.json")) return fs::canonical(dir / "last");
  throw ConfigError(dir.string() +
                    ": --resume needs a checkpoint folder (with trainer_state.json) or a training "
                    "output folder with a 'last' checkpoint; found neither");
}

}  // namespace masque::train
