#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "masque/error.hpp"
#include "masque/train/checkpoint.hpp"
#include "test_support.hpp"

using namespace masque;
using masque::train::CheckpointStore;
namespace fs = std::filesystem;

namespace {

void write_state(const fs::path& dir, std::int64_t step) {
  test::write_file(dir / "trainer_state.json", "{\"step\": " + std::to_string(step) + "}");
  test::write_file(dir / "model.safetensors", std::string(64, 'w'));
}

}  // namespace

TEST_CASE("checkpoints: the last K and the best are kept, and last and best point to them") {
  const fs::path root = test::scratch_dir("ckpt_keep");
  CheckpointStore store(root, 2);
  for (std::int64_t step : {100, 200, 300}) {
    store.save(step, [&](const fs::path& dir) { write_state(dir, step); });
    if (step == 100) store.mark_best(100);
  }
  store.save(400, [&](const fs::path& dir) { write_state(dir, 400); });
  CHECK(store.steps() == std::vector<std::int64_t>{100, 300, 400});  // 200 pruned; 100 is best
  REQUIRE(store.last());
  CHECK(fs::equivalent(*store.last(), root / "checkpoint-000400"));
  CHECK(fs::equivalent(*store.best(), root / "checkpoint-000100"));
  CHECK(test::read_file(root / "last" / "trainer_state.json") == "{\"step\": 400}");
  CHECK(fs::equivalent(CheckpointStore::resolve_resume(root), root / "checkpoint-000400"));
  CHECK(fs::equivalent(CheckpointStore::resolve_resume(root / "checkpoint-000300"),
                       root / "checkpoint-000300"));
}

TEST_CASE("checkpoints: a failed save leaves the earlier ones and 'last' untouched") {
  const fs::path root = test::scratch_dir("ckpt_fail");
  CheckpointStore store(root, 3);
  store.save(10, [&](const fs::path& dir) { write_state(dir, 10); });
  CHECK_THROWS_WITH(store.save(20,
                               [&](const fs::path& dir) {
                                 test::write_file(dir / "model.safetensors", "partial");
                                 throw RuntimeError("disk full");
                               }),
                    "disk full");
  CHECK(store.steps() == std::vector<std::int64_t>{10});
  CHECK(fs::equivalent(*store.last(), root / "checkpoint-000010"));
  // Nothing but the checkpoint and its link is left behind.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"checkpoint-000010", "last"});
}

TEST_CASE("checkpoints: a staging folder left by a crash is removed, never resumed from") {
  const fs::path root = test::scratch_dir("ckpt_stale");
  fs::create_directories(root / ".staging-checkpoint-12345");
  write_state(root / ".staging-checkpoint-12345", 999);
  CheckpointStore store(root, 1);
  CHECK_FALSE(fs::exists(root / ".staging-checkpoint-12345"));
  CHECK(store.steps().empty());
  CHECK_THROWS_WITH(CheckpointStore::resolve_resume(root),
                    Catch::Contains("--resume needs a checkpoint folder"));
  // Saving a step again replaces it whole.
  store.save(5, [&](const fs::path& dir) { write_state(dir, 5); });
  store.save(5, [&](const fs::path& dir) {
    test::write_file(dir / "trainer_state.json", "{\"step\": 5, \"again\": true}");
  });
  CHECK(test::read_file(root / "checkpoint-000005" / "trainer_state.json") ==
        "{\"step\": 5, \"again\": true}");
  CHECK_FALSE(fs::exists(root / "checkpoint-000005" / "model.safetensors"));
}

TEST_CASE("checkpoints: a prune killed midway leaves no partial checkpoint") {
  const fs::path root = test::scratch_dir("ckpt_prune_kill");
  constexpr int kFiles = 20000;  // so that deleting them takes long enough to be interrupted
  {
    CheckpointStore store(root, 1);
    store.save(1, [&](const fs::path& dir) { write_state(dir, 1); });
  }
  for (int i = 0; i < kFiles; ++i)  // added after the save: no fsync of each
    std::ofstream(root / "checkpoint-000001" / std::to_string(i)) << 'x';
  const fs::path old = root / "checkpoint-000001";
  // The entry a deletion removes first (remove_all follows the directory's own order).
  const fs::path first = fs::directory_iterator(old)->path();
  const pid_t pid = fork();
  if (pid == 0) {
    CheckpointStore store(root, 1);
    store.save(2, [&](const fs::path& dir) { write_state(dir, 2); });  // prunes step 1
    _exit(0);
  }
  int status = 0;
  while (fs::exists(first) && waitpid(pid, &status, WNOHANG) == 0) {
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  if (fs::exists(old)) {
    std::size_t files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(old)) ++files;
    CHECK(files == kFiles + 2);  // whole, or not there at all
  }
  const CheckpointStore reopened(root, 1);
  for (const auto& e : fs::directory_iterator(root))
    CHECK(e.path().filename().string().rfind(".staging", 0) == std::string::npos);
}
