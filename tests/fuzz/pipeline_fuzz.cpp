// Fuzz target: pipeline files and --set values (load_pipeline with every task and the build's
// plugins). The input up to the first NUL byte is the YAML text; each further NUL-separated
// piece is one --set value. Loading either succeeds (and the resolved pipeline dumps and loads
// back) or throws one ConfigError; library files named in `plugin:` are always refused.
#include <vector>

#include "fuzz_support.hpp"
#include "masque/error.hpp"
#include "pipeline.hpp"
#include "tasks/task.hpp"

namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_nul(std::string_view text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t nul = text.find('\0', start);
    parts.emplace_back(text.substr(start, nul == std::string_view::npos ? nul : nul - start));
    if (nul == std::string_view::npos) return parts;
    start = nul + 1;
  }
}

const std::vector<masque::TaskSpec>& tasks() {
  static const std::vector<masque::TaskSpec> specs = masque::task_specs();
  return specs;
}

// The resolved pipeline must be a pipeline that loads to the same thing.
void check_round_trip(const masque::Pipeline& pipeline, const masque::LoadOptions& options) {
  const std::string dumped = pipeline.dump();
  masque::LoadOptions again;
  again.require_task = options.require_task;
  const masque::Pipeline reloaded =
      masque::load_pipeline({dumped, "dumped.yaml", masque::fuzz::scratch_dir()}, again,
                            masque::fuzz::registry(), tasks());
  // The first line is a comment naming the file.
  auto body = [](const std::string& s) { return s.substr(s.find('\n') + 1); };
  MASQUE_FUZZ_CHECK(body(reloaded.dump()) == body(dumped));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)masque::fuzz::registry();
  (void)tasks();
  // Relative paths in the input resolve against the scratch folder: `shared/...` there is
  // ../shared, so the seeds can name the real models as the ready pipelines do.
  const fs::path& dir = masque::fuzz::scratch_dir();
  fs::create_directory_symlink(masque::fuzz::shared_dir(), dir / "shared");
  masque::fuzz::write_bytes(dir / "vocab.txt", "[UNK]\na\n");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> parts = split_nul(masque::fuzz::as_text(data, size));
  masque::LoadOptions options;
  options.sets.assign(parts.begin() + 1, parts.end());
  options.require_task = !parts[0].empty() && parts[0][0] != '#';
  masque::Pipeline pipeline;
  try {
    pipeline = masque::load_pipeline({parts[0], "fuzz.yaml", masque::fuzz::scratch_dir()}, options,
                                     masque::fuzz::registry(), tasks());
  } catch (const masque::ConfigError&) {
    return 0;
  }
  for (const auto& [section, config] : pipeline.plugins)
    MASQUE_FUZZ_CHECK(config.entry->file.parent_path() == masque::fuzz::plugin_dir());
  check_round_trip(pipeline, options);
  return 0;
}
