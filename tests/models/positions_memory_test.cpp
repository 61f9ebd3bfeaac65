// Memory at load does not grow with what a config merely claims: a llama config.json with
// max_position_embeddings 533333312 (found by fuzzing; a full rotary table would take ~17 GB)
// and an encoder-decoder with as many sinusoidal positions load in constant memory, and give
// the same logits as the real configs.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "lm_reference.hpp"
#include "masque/threading.hpp"
#include "model_plugin.hpp"

using namespace masque;
using namespace masque::test;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kClaimedPositions = 533333312;

// Resident memory of this process, from /proc/self/status (kB).
std::int64_t rss_kb() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    std::int64_t value = 0;
    if (key == "VmRSS:" && status >> value) return value;
    std::getline(status, key);
  }
  return -1;
}

// A copy of `real` (config.json rewritten with `positions`, weights linked).
fs::path with_positions(const fs::path& real, const std::string& name) {
  const fs::path dir = scratch_dir("positions_" + name);
  nlohmann::json config = read_json(real / "config.json");
  config["max_position_embeddings"] = kClaimedPositions;
  write_file(dir / "config.json", config.dump(1));
  fs::remove(dir / "model.safetensors");
  fs::create_symlink(real / "model.safetensors", dir / "model.safetensors");
  return dir;
}

}  // namespace

TEST_CASE(
    "llama: a claimed max_position_embeddings of 533333312 loads in constant memory and "
    "runs",
    "[positions]") {
  const ThreadScope one(1);
  const fs::path real = shared_dir() / "models" / "stories260k";
  const fs::path claimed = with_positions(real, "llama");
  auto reference = load_model("llama", real);
  auto causal = load_mask("causal");
  const std::int64_t before = rss_kb();
  auto model = load_model("llama", claimed);
  const std::int64_t grown_mb = (rss_kb() - before) / 1024;
  INFO("RSS grew by " << grown_mb << " MB");
  CHECK(grown_mb < 32);
  CHECK(model->info().max_positions == kClaimedPositions);

  // Positions past the tabulated ones are computed on the fly to the same numbers.
  Batch batch = make_batch(*causal, {{1, 30, 40, 50, 60}});
  for (std::int32_t t = 0; t < batch.length; ++t) batch.positions[t] = 100000 + t;
  const ForwardResult far = model->forward(batch);
  CHECK(far.logits.dim(0) == 5);
  batch = make_batch(*causal, {{1, 30, 40, 50, 60}});
  const ForwardResult a = model->forward(batch), b = reference->forward(batch);
  REQUIRE(a.logits.numel() == b.logits.numel());
  for (std::int64_t i = 0; i < a.logits.numel(); ++i)
    REQUIRE(a.logits.f32()[i] == b.logits.f32()[i]);
}

TEST_CASE("encoder-decoder: sinusoidal positions do not grow with max_position_embeddings",
          "[positions]") {
  const ThreadScope one(1);
  const fs::path real = shared_dir() / "models" / "aren-transliteration";
  const fs::path claimed = with_positions(real, "encdec");
  // The plugin library and the allocators are warm before anything is measured: under the
  // sanitizers loading them alone grows RSS by tens of MB.
  auto reference = load_model("encoder-decoder", real);
  std::int64_t before = rss_kb();
  auto again = load_model("encoder-decoder", real);
  const std::int64_t real_mb = (rss_kb() - before) / 1024;
  before = rss_kb();
  auto model = load_model("encoder-decoder", claimed);
  const std::int64_t grown_mb = (rss_kb() - before) / 1024;
  INFO("RSS grew by " << grown_mb << " MB, by " << real_mb << " MB for the real config");
  CHECK(grown_mb < real_mb + 16);
  CHECK(model->info().max_positions == kClaimedPositions);
}
