// Compressed corpora through the real binary: `-i FILE.gz|.zst` and `-o OUT.gz|.zst` give the
// plain run's records byte for byte (checked with gzip(1) and zstd(1)), also with --shard and
// with --resume after a SIGKILL; a truncated input is an error naming the file and the byte,
// with only whole records written before it.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "test_support.hpp"

using namespace masque::test;
namespace fs = std::filesystem;

namespace {

struct Format {
  const char* ext;
  const char* compress;    // stdin to stdout
  const char* decompress;  // FILE to stdout
};
constexpr Format kFormats[] = {{".gz", "gzip -c", "gzip -dc"},
                               {".zst", "zstd -q -c", "zstd -q -dc"}};

std::string pipeline() {
  return (source_dir() / "pipelines/lm-score.yaml").string();
}

int shell(const std::string& script) {
  const int status = std::system(("/bin/sh -c '" + script + "'").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::size_t lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

// `n` different sentences, one per line.
fs::path write_corpus(const fs::path& dir, int n) {
  const char* words[] = {"Once",  "upon", "a",  "time",  "there", "was", "a",  "little", "dog",
                         "named", "Max",  "he", "liked", "to",    "run", "in", "the",    "sun"};
  std::string text;
  for (int i = 0; i < n; ++i) {
    for (int w = 0; w < 6 + i % 11; ++w)
      text += std::string(w ? " " : "") + words[(i * 5 + w * 7) % 18];
    text += " " + std::to_string(i * 7919 % 100003) + ".\n";  // less repetitive: many blocks
  }
  write_file(dir / "corpus.txt", text);
  return dir / "corpus.txt";
}

fs::path compressed_copy(const fs::path& plain, const Format& f) {
  const fs::path out = plain.string() + f.ext;
  REQUIRE(shell(std::string(f.compress) + " < " + plain.string() + " > " + out.string()) == 0);
  return out;
}

std::string decompressed(const fs::path& file, const Format& f) {
  const fs::path back = file.string() + ".back";
  REQUIRE(shell(std::string(f.decompress) + " " + file.string() + " > " + back.string()) == 0);
  return read_file(back);
}

std::string run_to(const fs::path& in, const fs::path& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"run", pipeline(), "-i", in.string(), "-o", out.string(), "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_masque(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(!fs::exists(out.string() + ".parts"));
  return read_file(out);
}

}  // namespace

TEST_CASE("compressed corpora: .gz and .zst in and out give the plain run's records",
          "[e2e][compressed]") {
  const auto dir = scratch_dir("compressed_io");
  const auto corpus = write_corpus(dir, 300);
  const std::string plain = run_to(corpus, dir / "plain.jsonl");
  REQUIRE(lines(plain) == 300);
  for (const Format& f : kFormats) {
    INFO(f.ext);
    const auto in = compressed_copy(corpus, f);
    CHECK(run_to(in, dir / "from-compressed.jsonl") == plain);
    const fs::path out = dir / (std::string("out.jsonl") + f.ext);
    run_to(corpus, out);
    CHECK(decompressed(out, f) == plain);
    run_to(in, out, {"--threads", "2"});
    CHECK(decompressed(out, f) == plain);
    // Not resumable (stdin, --format text): the plain streaming path compresses too.
    const fs::path text_out = dir / (std::string("out.txt") + f.ext);
    const auto piped = run_masque(
        {"run", pipeline(), "-o", text_out.string(), "-q", "--format", "tsv"}, read_file(corpus));
    REQUIRE(piped.exit_code == 0);
    const auto plain_tsv =
        run_masque({"run", pipeline(), "-q", "--format", "tsv"}, read_file(corpus));
    CHECK(decompressed(text_out, f) == plain_tsv.out);
  }
}

TEST_CASE("compressed corpora: --shard parts concatenate into one stream", "[e2e][compressed]") {
  const auto dir = scratch_dir("compressed_shard");
  const auto corpus = write_corpus(dir, 200);
  const std::string plain = run_to(corpus, dir / "plain.jsonl");
  for (const Format& f : kFormats) {
    INFO(f.ext);
    const auto in = compressed_copy(corpus, f);
    std::string joined;
    for (int k = 0; k < 3; ++k) {
      const fs::path part = dir / ("part" + std::to_string(k) + ".jsonl" + f.ext);
      run_to(in, part, {"--shard", std::to_string(k) + "/3"});
      joined += read_file(part);
    }
    write_file(dir / (std::string("joined") + f.ext), joined);
    CHECK(decompressed(dir / (std::string("joined") + f.ext), f) == plain);
  }
}

TEST_CASE("compressed corpora: a SIGKILLed run resumes to the same records",
          "[e2e][compressed][resume]") {
  const auto dir = scratch_dir("compressed_resume");
  const auto corpus = write_corpus(dir, 1200);
  const std::string full = run_to(corpus, dir / "full.jsonl");
  for (const Format& f : kFormats) {
    INFO(f.ext);
    const auto in = compressed_copy(corpus, f);
    const fs::path out = dir / (std::string("out.jsonl") + f.ext);
    // --unbuffered: every record is a whole member as soon as it is written.
    const std::string cmd = binary().string() + " run " + pipeline() + " -i " + in.string() +
                            " -o " + out.string() + " -q --unbuffered --threads 1";
    const int code = shell(cmd + " & pid=$!; n=0; while [ $n -lt 3000 ]; do l=$(" + f.decompress +
                           " " + out.string() +
                           " 2>/dev/null | wc -l); [ \"$l\" -ge 100 ] && break; sleep 0.01; "
                           "n=$((n+1)); done; kill -9 $pid; wait $pid; exit $?");
    REQUIRE(code == 128 + 9);
    // A torn last member, as a kill in the middle of a write leaves it.
    write_file(dir / "member.txt", read_file(corpus).substr(0, 5000));
    const std::string member = read_file(compressed_copy(dir / "member.txt", f));
    std::ofstream(out, std::ios::app | std::ios::binary) << member.substr(0, member.size() / 2);
    const auto r =
        run_masque({"run", pipeline(), "-i", in.string(), "-o", out.string(), "--resume"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.err, Catch::Contains("resuming at record "));
    CHECK_THAT(r.err, !Catch::Contains("resuming at record 0 "));
    CHECK(decompressed(out, f) == full);
    CHECK(!fs::exists(out.string() + ".parts"));
  }
}

TEST_CASE("compressed corpora: a truncated input stops with whole records and names the byte",
          "[e2e][compressed]") {
  const auto dir = scratch_dir("compressed_truncated");
  // Past zstd's 128 KiB blocks: a frame cut at 2/3 still has whole blocks to read.
  const auto corpus = write_corpus(dir, 5000);
  for (const Format& f : kFormats) {
    INFO(f.ext);
    const std::string bytes = read_file(compressed_copy(corpus, f));
    const fs::path cut = dir / (std::string("cut.txt") + f.ext);
    write_file(cut, bytes.substr(0, bytes.size() * 2 / 3));
    const fs::path out = dir / "out.jsonl";
    const auto r = run_masque({"run", pipeline(), "-i", cut.string(), "-o", out.string(), "-q"});
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains(cut.string()) && Catch::Contains("ends inside") &&
                          Catch::Contains("at byte " + std::to_string(bytes.size() * 2 / 3)));
    // Whole records 0..k-1 of the corpus, nothing past them.
    const auto records = read_jsonl(out);
    REQUIRE(!records.empty());
    CHECK(records.size() < 5000);
    for (std::size_t i = 0; i < records.size(); ++i) CHECK(records[i].at("id") == i);
    CHECK(read_file(out).back() == '\n');
  }
}
