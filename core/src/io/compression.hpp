// gzip (zlib) and zstd (libzstd) streams for corpora: `-i FILE.gz|.zst`, `-o OUT.gz|.zst`.
//
// Written output is a sequence of whole gzip members / zstd frames (what `cat a.gz b.gz`
// makes, and what gzip and zstd read back as one stream), each ending just after a line end,
// so a killed run leaves whole records in every member but its last, unfinished one, which
// --resume drops.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace masque {

enum class Compression { none, gzip, zstd };

// By the name's ending: ".gz" is gzip, ".zst" zstd, anything else none.
Compression compression_of(std::string_view path);
const char* compression_name(Compression c);  // "gzip", "zstd", "none"

// Where a member/frame ended: bytes of the compressed file, and of the stream decompressed.
struct FrameEnd {
  std::uint64_t compressed = 0;
  std::uint64_t decompressed = 0;
};

// The decompressed bytes of a gzip or zstd file, read in order, across members/frames.
class Decompressor {
 public:
  // ConfigError naming `path` when it cannot be opened.
  Decompressor(const std::string& path, Compression compression);
  ~Decompressor();
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  // Up to `n` bytes; 0 at the end. RuntimeError naming the file and the compressed byte offset
  // when the data is not of this format, is corrupt, or ends inside a member/frame (after the
  // bytes decompressed before the damage: a call that has some returns them, the next throws).
  // Damage is found where the format finds it: a truncation at once, a changed byte at the
  // latest by the member's checksum (gzip's CRC-32, the zstd frame checksum masque writes).
  std::size_t read(char* buffer, std::size_t n);
  // Reads and drops `n` bytes (fewer at the end of the stream).
  void skip(std::uint64_t n);
  std::uint64_t position() const { return position_; }  // decompressed bytes read so far
  // The members/frames completed so far, in order.
  const std::vector<FrameEnd>& frame_ends() const { return frames_; }

 private:
  struct Codec;
  bool refill();  // more compressed input; false at the end of the file
  std::string describe(const std::string& why) const;  // why, with the file and the offset

  std::string path_;
  Compression compression_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<Codec> codec_;
  std::vector<unsigned char> input_ = std::vector<unsigned char>(1 << 16);
  std::size_t input_pos_ = 0, input_end_ = 0;
  std::uint64_t consumed_ = 0;  // compressed bytes handed to the codec
  std::uint64_t position_ = 0;
  bool in_frame_ = false;  // inside a member/frame not yet complete
  bool ended_ = false;
  std::string error_;  // found after some bytes of a read: thrown by the next
  std::vector<FrameEnd> frames_;
};

// Compresses what is written into whole members/frames written to `out`. A member ends just
// after a line end once it holds `frame_bytes` or is `frame_seconds` old (with
// `member_per_write`: after every write that holds a line end, as --unbuffered asks), and at
// finish(); each ended member is flushed to `out`.
class Compressor {
 public:
  Compressor(std::FILE* out, Compression compression, std::string path,
             bool member_per_write = false);
  ~Compressor();
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;

  // False on a write error (errno says which); the output is then unusable.
  bool write(const char* data, std::size_t n);
  // Ends the open member, if any, and flushes `out`.
  bool finish();

  static constexpr std::size_t frame_bytes = std::size_t{1} << 20;
  static constexpr double frame_seconds = 5.0;

 private:
  struct Codec;
  bool compress(const char* data, std::size_t n, bool end_frame);

  std::FILE* out_;
  Compression compression_;
  std::string path_;
  std::unique_ptr<Codec> codec_;
  std::vector<char> output_ = std::vector<char>(1 << 16);
  bool member_per_write_;
  std::size_t frame_in_ = 0;  // bytes in the open member
  double frame_started_ = 0;  // steady-clock seconds of its first byte
};

// A stream whose writes go through a Compressor into `out`; fclose() ends the last member
// and flushes `out` (which stays open: the caller owns it).
std::FILE* open_compressing_stream(std::FILE* out, Compression compression, const std::string& path,
                                   bool member_per_write = false);

// Decompresses the whole-member prefix of the compressed file `path` into `plain` (a file
// open for writing): the complete members/frames and their ends. A trailing unfinished or
// corrupt member (a killed run's) is not copied; `dropped` tells how many compressed bytes
// it held.
struct WholeFrames {
  std::vector<FrameEnd> frames;
  std::uint64_t dropped = 0;
  std::string why_dropped;  // the decompressor's message for them
};
WholeFrames copy_whole_frames(const std::string& path, Compression compression, std::FILE* plain);

}  // namespace masque
