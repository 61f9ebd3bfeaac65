// Shards of a corpus file (run/shard.hpp) and the order-free sum of the corpus figures
// (run/exact_sum.hpp): no MPI needed.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "masque/dist.hpp"
#include "masque/error.hpp"
#include "run/exact_sum.hpp"
#include "run/shard.hpp"
#include "test_support.hpp"

using namespace masque;
using namespace masque::test;

namespace {

// Every shard's text and first record, checked against a split of the text at line ends: of
// the plain file, and of its copies compressed by gzip(1) and zstd(1) (offsets are of the
// decompressed data).
void check_shards_of(const std::filesystem::path& path, const std::string& text, int count,
                     const InputOptions& input) {
  INFO(path.filename().string());
  InputFile file(path);
  const ShardedInput info = inspect_input(file, input);
  std::string joined;
  std::uint64_t expected_first = 0;
  std::uint64_t previous_end = info.data_begin;
  for (int k = 0; k < count; ++k) {
    INFO("shard " << k << " of " << count);
    const ShardRange r = shard_range(file, info, k, count);
    CHECK(r.begin == previous_end);  // contiguous, no gaps or overlaps
    CHECK(r.begin <= r.end);
    // Starts at a record: the file's data start or just after a line end.
    if (r.begin > info.data_begin) CHECK(text[r.begin - 1] == '\n');
    CHECK(r.first_record == expected_first);
    const std::string piece = text.substr(r.begin, r.end - r.begin);
    joined += piece;
    expected_first += static_cast<std::uint64_t>(std::count(piece.begin(), piece.end(), '\n'));
    previous_end = r.end;
  }
  CHECK(previous_end == text.size());
  CHECK(joined == text.substr(info.data_begin));
}

void check_shards(const std::string& text, int count, const InputOptions& input = {}) {
  const auto dir = scratch_dir("sharding");
  write_file(dir / "in.txt", text);
  const std::string in = (dir / "in.txt").string();
  REQUIRE(std::system(("gzip -c " + in + " > " + in + ".gz && zstd -q " + in).c_str()) == 0);
  for (const char* name : {"in.txt", "in.txt.gz", "in.txt.zst"})
    check_shards_of(dir / name, text, count, input);
}

}  // namespace

TEST_CASE("sharding: ranges cover the file at line ends, with global record ids", "[shard]") {
  check_shards("a\nbb\nccc\ndddd\n", 2);
  check_shards("a\nbb\nccc\ndddd", 3);  // no final line end
  check_shards("\n\n\n\n\n\n", 4);      // empty records
  check_shards("one line only\n", 5);   // more shards than records: some are empty
  check_shards("", 3);
  check_shards("x\r\ny\r\nz\r\n", 2);
  std::mt19937 rng(3);
  std::string text;
  for (int i = 0; i < 500; ++i) text += std::string(rng() % 300, 'w') + "\n";
  for (int n : {1, 2, 3, 7, 64}) check_shards(text, n);
  // One line far longer than a shard's share.
  check_shards("s\n" + std::string(5 << 20, 'L') + "\nt\nu\n", 4);
}

TEST_CASE("sharding: a TSV header is read once and left out of every shard", "[shard]") {
  InputOptions tsv;
  tsv.format = InputFormat::tsv;
  const std::string text = "id\ttext\r\n1\ta\n2\tb\n3\tc\n";
  check_shards(text, 2, tsv);
  const auto path = scratch_dir("sharding_tsv") / "in.tsv";
  write_file(path, text);
  InputFile file(path);
  const ShardedInput info = inspect_input(file, tsv);
  CHECK(info.data_begin == 9);
  CHECK(info.columns == std::vector<std::string>{"id", "text"});
}

TEST_CASE("sharding: --shard K/N is parsed strictly", "[shard]") {
  CHECK(parse_shard_spec("0/1").count == 1);
  CHECK(parse_shard_spec("3/4").index == 3);
  for (const char* bad : {"4/4", "-1/4", "1", "1/0", "a/b", "1/2x", "/2", "1/"})
    CHECK_THROWS_WITH(parse_shard_spec(bad), Catch::Contains("--shard"));
}

TEST_CASE("exact sum: any order, any split, the same bits", "[shard]") {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0.0, 50.0);
  std::vector<double> terms;
  for (int i = 0; i < 10000; ++i) terms.push_back(u(rng) * (i % 7 == 0 ? 1e-9 : 1.0));
  ExactSum forward, backward;
  for (double t : terms) forward.add(t);
  for (auto it = terms.rbegin(); it != terms.rend(); ++it) backward.add(*it);
  CHECK(forward.value() == backward.value());
  // Three shards summed apart, passed through their text form, merged.
  ExactSum merged;
  for (int k = 0; k < 3; ++k) {
    ExactSum shard;
    for (std::size_t i = static_cast<std::size_t>(k); i < terms.size(); i += 3) shard.add(terms[i]);
    merged.add(ExactSum::decode(shard.encode()));
  }
  CHECK(merged.value() == forward.value());
  // Within rounding of a long-double sum (terms are exact down to 2^-64).
  long double reference = 0;
  for (double t : terms) reference += t;
  CHECK(forward.value() == Approx(static_cast<double>(reference)).epsilon(1e-15));
  // Negative and non-finite terms.
  ExactSum s;
  s.add(-2.5);
  s.add(1.25);
  CHECK(s.value() == -1.25);
  s.add(std::numeric_limits<double>::infinity());
  CHECK(std::isinf(ExactSum::decode(s.encode()).value()));
}

namespace {

// Sets the launcher variables of one test and puts back what was there before.
class LauncherEnv {
 public:
  explicit LauncherEnv(const std::vector<std::pair<const char*, const char*>>& set) {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      if (value) saved_.emplace_back(name, value);
      ::unsetenv(name);
    }
    for (const auto& [name, value] : set) ::setenv(name, value, 1);
  }
  ~LauncherEnv() {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  static constexpr const char* kNames[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK",
                                           "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
  std::vector<std::pair<std::string, std::string>> saved_;
};

}  // namespace

TEST_CASE("dist: a build without MPI refuses several processes from any launcher", "[shard]") {
  // mpirun (Open MPI), srun with PMI2 or PMIx, MPICH's mpiexec: each says its count its own way.
  const std::vector<std::vector<std::pair<const char*, const char*>>> several = {
      {{"OMPI_COMM_WORLD_SIZE", "2"}},
      {{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}},
      {{"PMIX_RANK", "1"}, {"SLURM_STEP_NUM_TASKS", "4"}},
      {{"PMIX_RANK", "0"}}};  // a launcher that does not say how many
  for (const auto& env : several) {
    const LauncherEnv launched(env);
    INFO(env.front().first << " " << env.back().second);
    CHECK(dist::launched_by_mpi());
    CHECK_THROWS_AS(dist::check_ranks_supported("run the whole corpus", "", false), ConfigError);
    CHECK_THROWS_WITH(
        dist::check_ranks_supported("run the whole corpus", ", or use --shard K/N", false),
        Catch::Contains("built without MPI") && Catch::Contains("would run the whole corpus") &&
            Catch::Contains("or use --shard K/N"));
    CHECK_NOTHROW(dist::check_ranks_supported("run the whole corpus", "", true));
  }
  {
    const LauncherEnv launched({{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}});
    CHECK(dist::launched_ranks() == 3);
    CHECK_THROWS_WITH(dist::check_ranks_supported("x", "", false),
                      Catch::Contains("each of the 3 processes"));
  }
  // One process, launched or not, is fine.
  for (const auto& env : std::vector<std::vector<std::pair<const char*, const char*>>>{
           {},
           {{"OMPI_COMM_WORLD_SIZE", "1"}},
           {{"PMIX_RANK", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}}}) {
    const LauncherEnv launched(env);
    CHECK(dist::launched_ranks() == 1);
    CHECK_NOTHROW(dist::check_ranks_supported("x", "", false));
  }
}
