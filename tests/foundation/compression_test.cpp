// gzip and zstd streams (io/compression.hpp): what masque writes, gzip(1) and zstd(1) read back,
// and what they write masque reads; members end only after line ends; a truncated or corrupt
// stream is an error naming the file and the byte, and the members before it stay readable.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "io/compression.hpp"
#include "masque/error.hpp"
#include "test_support.hpp"

using namespace masque;
using namespace masque::test;
namespace fs = std::filesystem;

namespace {

struct Format {
  Compression compression;
  const char* ext;
  const char* compress;    // the reference tool: stdin to stdout
  const char* decompress;  // ... and back
};
constexpr Format kFormats[] = {{Compression::gzip, ".gz", "gzip -c", "gzip -dc"},
                               {Compression::zstd, ".zst", "zstd -q -c", "zstd -q -dc"}};

int shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Lines of random words, `n` of them.
std::string corpus(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string text;
  for (int i = 0; i < n; ++i) {
    for (unsigned w = 0; w < 3 + rng() % 20; ++w) text += "w" + std::to_string(rng() % 500) + " ";
    text += "\n";
  }
  return text;
}

// `text` written through a Compressor in pieces of `piece` bytes.
void compress_to(const fs::path& path, const Format& f, const std::string& text, std::size_t piece,
                 bool member_per_write) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  REQUIRE(file);
  std::FILE* stream = open_compressing_stream(file, f.compression, path, member_per_write);
  for (std::size_t at = 0; at < text.size(); at += piece) {
    REQUIRE(std::fwrite(text.data() + at, 1, std::min(piece, text.size() - at), stream) ==
            std::min(piece, text.size() - at));
    if (member_per_write) REQUIRE(std::fflush(stream) == 0);
  }
  REQUIRE(std::fclose(stream) == 0);
  REQUIRE(std::fclose(file) == 0);
}

std::string decompress(const fs::path& path, const Format& f) {
  Decompressor in(path, f.compression);
  std::string text;
  char buffer[1000];  // small: reads end inside members
  while (const std::size_t n = in.read(buffer, sizeof buffer)) text.append(buffer, n);
  return text;
}

}  // namespace

TEST_CASE("compression: masque's streams and gzip(1)/zstd(1) read each other", "[compression]") {
  const auto dir = scratch_dir("compression_roundtrip");
  const std::string text = corpus(30000, 1);  // several 1 MiB members
  write_file(dir / "plain.txt", text);
  for (const Format& f : kFormats) {
    INFO(f.ext);
    const auto ours = dir / (std::string("ours") + f.ext);
    compress_to(ours, f, text, 4096, false);
    CHECK(shell(std::string(f.decompress) + " " + ours.string() + " > " +
                (dir / "back").string()) == 0);
    CHECK(read_file(dir / "back") == text);
    Decompressor reader(ours, f.compression);
    CHECK(decompress(ours, f) == text);
    // Members end after line ends: every member boundary is one.
    std::string all;
    char buffer[65536];
    while (const std::size_t n = reader.read(buffer, sizeof buffer)) all.append(buffer, n);
    REQUIRE(reader.frame_ends().size() >= 2);
    for (const FrameEnd& e : reader.frame_ends()) CHECK(all[e.decompressed - 1] == '\n');
    CHECK(reader.frame_ends().back().decompressed == text.size());
    CHECK(reader.frame_ends().back().compressed == fs::file_size(ours));

    // The tool's stream, and two of them concatenated (as cat a.gz b.gz makes).
    const auto theirs = dir / (std::string("theirs") + f.ext);
    REQUIRE(shell(std::string(f.compress) + " < " + (dir / "plain.txt").string() + " > " +
                  theirs.string()) == 0);
    CHECK(decompress(theirs, f) == text);
    const auto twice = dir / (std::string("twice") + f.ext);
    REQUIRE(shell("cat " + theirs.string() + " " + ours.string() + " > " + twice.string()) == 0);
    CHECK(decompress(twice, f) == text + text);

    // --unbuffered: a member after every write holding a line end.
    const auto each = dir / (std::string("each") + f.ext);
    compress_to(each, f, corpus(50, 2), 7, true);
    Decompressor per_write(each, f.compression);
    std::string small;
    while (const std::size_t n = per_write.read(buffer, sizeof buffer)) small.append(buffer, n);
    CHECK(small == corpus(50, 2));
    CHECK(per_write.frame_ends().size() >= 40);

    // Nothing written is still a stream the tools accept (and read as empty).
    const auto empty = dir / (std::string("empty") + f.ext);
    compress_to(empty, f, "", 1, false);
    CHECK(shell(std::string(f.decompress) + " " + empty.string() + " > /dev/null") == 0);
    CHECK(decompress(empty, f).empty());
  }
}

TEST_CASE("compression: a truncated or corrupt stream names the file and the byte",
          "[compression]") {
  const auto dir = scratch_dir("compression_damage");
  const std::string text = corpus(3000, 3);
  for (const Format& f : kFormats) {
    INFO(f.ext);
    const auto whole = dir / (std::string("whole") + f.ext);
    compress_to(whole, f, text, 100, true);  // a member per write of 100 bytes
    const std::string bytes = read_file(whole);
    // Cut inside the last member: an error, after every byte of the members before it.
    const auto cut = dir / (std::string("cut") + f.ext);
    write_file(cut, bytes.substr(0, bytes.size() - 5));
    {
      Decompressor in(cut, f.compression);
      std::string got;
      char buffer[4096];
      try {
        while (const std::size_t n = in.read(buffer, sizeof buffer)) got.append(buffer, n);
        FAIL("no error for a truncated stream");
      } catch (const RuntimeError& e) {
        CHECK_THAT(e.what(), Catch::Contains(cut.string()) && Catch::Contains("ends inside") &&
                                 Catch::Contains("at byte " + std::to_string(bytes.size() - 5)));
      }
      REQUIRE(!in.frame_ends().empty());
      CHECK(text.compare(0, in.frame_ends().back().decompressed, got, 0,
                         in.frame_ends().back().decompressed) == 0);
    }
    // copy_whole_frames keeps exactly the whole members.
    {
      std::FILE* plain = std::tmpfile();
      const WholeFrames w = copy_whole_frames(cut, f.compression, plain);
      CHECK(w.dropped > 0);
      CHECK_THAT(w.why_dropped, Catch::Contains("ends inside"));
      std::string kept(w.frames.back().decompressed, '\0');
      std::rewind(plain);
      CHECK(std::fread(kept.data(), 1, kept.size(), plain) == kept.size());
      CHECK(std::fgetc(plain) == EOF);
      CHECK(text.compare(0, kept.size(), kept) == 0);
      CHECK(kept.back() == '\n');
      std::fclose(plain);
    }
    // A flipped byte in the middle, and data that is not of the format at all.
    std::string damaged = bytes;
    for (std::size_t i = bytes.size() / 2; i < bytes.size() / 2 + 8; ++i) damaged[i] ^= 0x5a;
    const auto bad = dir / (std::string("bad") + f.ext);
    write_file(bad, damaged);
    CHECK_THROWS_WITH(decompress(bad, f), Catch::Contains(bad.string()) &&
                                              Catch::Contains("corrupt") &&
                                              Catch::Contains("at byte"));
    const auto not_it = dir / (std::string("plain") + f.ext);
    write_file(not_it, text);
    CHECK_THROWS_WITH(
        decompress(not_it, f),
        Catch::Contains("corrupt") &&
            Catch::Contains("at byte 0 of the " + std::string(compression_name(f.compression))));
  }
  CHECK_THROWS_AS(Decompressor(dir / "missing.gz", Compression::gzip), ConfigError);
}
