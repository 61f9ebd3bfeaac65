#include "io/compression.hpp"

#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "masque/error.hpp"

namespace masque {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr int kGzipWindow = 15 + 16;  // zlib: a 32 KiB window with a gzip header and trailer

}  // namespace

Compression compression_of(std::string_view path) {
  if (path.ends_with(".gz")) return Compression::gzip;
  if (path.ends_with(".zst")) return Compression::zstd;
  return Compression::none;
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::gzip:
      return "gzip";
    case Compression::zstd:
      return "zstd";
    case Compression::none:
      break;
  }
  return "none";
}

// --- reading ---------------------------------------------------------------------------------

struct Decompressor::Codec {
  z_stream gzip{};
  ZSTD_DCtx* zstd = nullptr;
  bool pending = false;  // the last step filled the output: more may come without input
  ~Codec() {
    if (zstd) ZSTD_freeDCtx(zstd);
  }
};

Decompressor::Decompressor(const std::string& path, Compression compression)
    : path_(path), compression_(compression), codec_(std::make_unique<Codec>()) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) throw ConfigError(path + ": cannot open the input file: " + std::strerror(errno));
  const bool ok = compression == Compression::gzip
                      ? inflateInit2(&codec_->gzip, kGzipWindow) == Z_OK
                      : (codec_->zstd = ZSTD_createDCtx()) != nullptr;
  if (!ok) {
    std::fclose(file_);
    throw RuntimeError(path + ": cannot start the " + compression_name(compression) +
                       " decompressor");
  }
}

Decompressor::~Decompressor() {
  if (compression_ == Compression::gzip) inflateEnd(&codec_->gzip);
  if (file_) std::fclose(file_);
}

std::string Decompressor::describe(const std::string& why) const {
  return path_ + ": " + why + " at byte " + std::to_string(consumed_ + input_pos_) + " of the " +
         compression_name(compression_) + " file";
}

bool Decompressor::refill() {
  consumed_ += input_end_;
  input_pos_ = input_end_ = 0;
  const std::size_t n = std::fread(input_.data(), 1, input_.size(), file_);
  if (n == 0 && std::ferror(file_))
    throw RuntimeError(path_ + ": cannot read the input file: " + std::strerror(errno));
  input_end_ = n;
  return n > 0;
}

std::size_t Decompressor::read(char* buffer, std::size_t n) {
  if (!error_.empty()) throw RuntimeError(error_);
  std::size_t got = 0;
  while (got < n && !ended_ && error_.empty()) {
    if (input_pos_ == input_end_ && !codec_->pending && !refill()) {
      if (in_frame_)
        error_ = describe(std::string("the stream ends inside a ") +
                          (compression_ == Compression::gzip ? "member" : "frame") +
                          " (a truncated file?)");
      else
        ended_ = true;
      break;
    }
    const std::size_t in_before = input_pos_;
    const std::size_t out_before = got;
    bool frame_done = false;
    if (compression_ == Compression::gzip) {
      z_stream& s = codec_->gzip;
      s.next_in = input_.data() + input_pos_;
      s.avail_in = static_cast<uInt>(input_end_ - input_pos_);
      s.next_out = reinterpret_cast<Bytef*>(buffer + got);
      s.avail_out = static_cast<uInt>(std::min<std::size_t>(n - got, 1u << 30));
      const int r = inflate(&s, Z_NO_FLUSH);
      input_pos_ = input_end_ - s.avail_in;
      got = static_cast<std::size_t>(reinterpret_cast<char*>(s.next_out) - buffer);
      if (r == Z_STREAM_END) {
        frame_done = true;
        inflateReset(&s);
      } else if (r != Z_OK && r != Z_BUF_ERROR) {
        input_pos_ = in_before;
        got = out_before;
        error_ =
            describe(std::string("corrupt gzip data (zlib: ") + (s.msg ? s.msg : zError(r)) + ")");
        break;
      }
      codec_->pending = !frame_done && s.avail_out == 0;
    } else {
      ZSTD_inBuffer in{input_.data() + input_pos_, input_end_ - input_pos_, 0};
      ZSTD_outBuffer out{buffer + got, n - got, 0};
      const std::size_t r = ZSTD_decompressStream(codec_->zstd, &out, &in);
      if (ZSTD_isError(r)) {
        error_ = describe(std::string("corrupt zstd data (libzstd: ") + ZSTD_getErrorName(r) + ")");
        break;
      }
      input_pos_ += in.pos;
      got += out.pos;
      frame_done = r == 0 && (in.pos > 0 || in_frame_);
      codec_->pending = r != 0 && out.pos == out.size;
    }
    if (input_pos_ > in_before) in_frame_ = true;
    position_ += got - out_before;
    if (frame_done) {
      frames_.push_back({consumed_ + input_pos_, position_});
      in_frame_ = false;
    }
  }
  if (got == 0 && !error_.empty()) throw RuntimeError(error_);
  return got;
}

void Decompressor::skip(std::uint64_t n) {
  std::vector<char> sink(std::size_t{1} << 16);
  while (n > 0) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n, sink.size()));
    const std::size_t got = read(sink.data(), want);
    if (got == 0) break;
    n -= got;
  }
}

// --- writing ---------------------------------------------------------------------------------

struct Compressor::Codec {
  z_stream gzip{};
  ZSTD_CCtx* zstd = nullptr;
  bool any_frame = false;
  ~Codec() {
    if (zstd) ZSTD_freeCCtx(zstd);
  }
};

Compressor::Compressor(std::FILE* out, Compression compression, std::string path,
                       bool member_per_write)
    : out_(out),
      compression_(compression),
      path_(std::move(path)),
      codec_(std::make_unique<Codec>()),
      member_per_write_(member_per_write) {
  const bool ok =
      compression == Compression::gzip
          ? deflateInit2(&codec_->gzip, Z_DEFAULT_COMPRESSION, Z_DEFLATED, kGzipWindow, 8,
                         Z_DEFAULT_STRATEGY) == Z_OK
          : (codec_->zstd = ZSTD_createCCtx()) != nullptr &&
                // as zstd(1) writes: a damaged frame fails to read rather than reading wrong
                !ZSTD_isError(ZSTD_CCtx_setParameter(codec_->zstd, ZSTD_c_checksumFlag, 1));
  if (!ok)
    throw RuntimeError(path_ + ": cannot start the " + compression_name(compression) +
                       " compressor");
}

Compressor::~Compressor() {
  if (compression_ == Compression::gzip) deflateEnd(&codec_->gzip);
}

bool Compressor::compress(const char* data, std::size_t n, bool end_frame) {
  bool done = false;
  while (!done) {
    std::size_t produced = 0;
    if (compression_ == Compression::gzip) {
      z_stream& s = codec_->gzip;
      s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
      s.avail_in = static_cast<uInt>(n);
      s.next_out = reinterpret_cast<Bytef*>(output_.data());
      s.avail_out = static_cast<uInt>(output_.size());
      const int r = deflate(&s, end_frame ? Z_FINISH : Z_NO_FLUSH);
      if (r == Z_STREAM_ERROR) {
        errno = EIO;
        return false;
      }
      produced = output_.size() - s.avail_out;
      data = reinterpret_cast<const char*>(s.next_in);
      n = s.avail_in;
      done = end_frame ? r == Z_STREAM_END : (n == 0 && s.avail_out > 0);
      if (r == Z_STREAM_END) deflateReset(&s);
    } else {
      ZSTD_inBuffer in{data, n, 0};
      ZSTD_outBuffer out{output_.data(), output_.size(), 0};
      const std::size_t r =
          ZSTD_compressStream2(codec_->zstd, &out, &in, end_frame ? ZSTD_e_end : ZSTD_e_continue);
      if (ZSTD_isError(r)) {
        errno = EIO;
        return false;
      }
      produced = out.pos;
      data += in.pos;
      n -= in.pos;
      done = end_frame ? r == 0 : n == 0;
    }
    if (produced && std::fwrite(output_.data(), 1, produced, out_) != produced) return false;
  }
  if (!end_frame) return true;
  codec_->any_frame = true;
  frame_in_ = 0;
  return std::fflush(out_) == 0;  // the member is on disk: a later kill keeps it
}

bool Compressor::write(const char* data, std::size_t n) {
  const double now = now_seconds();
  while (n > 0) {
    if (frame_in_ == 0) frame_started_ = now;
    const bool due =
        member_per_write_ || frame_in_ + n >= frame_bytes || now - frame_started_ >= frame_seconds;
    const void* nl = due ? ::memrchr(data, '\n', n) : nullptr;
    if (!nl) {
      frame_in_ += n;
      return compress(data, n, false);
    }
    const std::size_t k = static_cast<std::size_t>(static_cast<const char*>(nl) - data) + 1;
    if (!compress(data, k, true)) return false;
    data += k;
    n -= k;
  }
  return true;
}

bool Compressor::finish() {
  // An output with no record is still a valid (empty) stream for gzip -d and zstd -d.
  if (frame_in_ > 0 || !codec_->any_frame) return compress(nullptr, 0, true);
  return std::fflush(out_) == 0;
}

namespace {

ssize_t cookie_write(void* cookie, const char* data, std::size_t n) {
  return static_cast<Compressor*>(cookie)->write(data, n) ? static_cast<ssize_t>(n) : 0;
}

int cookie_close(void* cookie) {
  auto* compressor = static_cast<Compressor*>(cookie);
  const bool ok = compressor->finish();
  delete compressor;
  return ok ? 0 : EOF;
}

}  // namespace

std::FILE* open_compressing_stream(std::FILE* out, Compression compression, const std::string& path,
                                   bool member_per_write) {
  auto compressor = std::make_unique<Compressor>(out, compression, path, member_per_write);
  cookie_io_functions_t io{};
  io.write = cookie_write;
  io.close = cookie_close;
  std::FILE* stream = ::fopencookie(compressor.get(), "w", io);
  if (!stream) throw RuntimeError(path + ": cannot open the output file: " + std::strerror(errno));
  static_cast<void>(compressor.release());  // the stream owns it now
  return stream;
}

WholeFrames copy_whole_frames(const std::string& path, Compression compression, std::FILE* plain) {
  Decompressor in(path, compression);
  WholeFrames whole;
  std::vector<char> buffer(std::size_t{1} << 16);
  bool written = true;
  try {
    while (const std::size_t n = in.read(buffer.data(), buffer.size()))
      if (std::fwrite(buffer.data(), 1, n, plain) != n) {
        written = false;
        break;
      }
  } catch (const RuntimeError& e) {  // the end of what a killed run wrote whole
    whole.why_dropped = e.what();
  }
  whole.frames = in.frame_ends();
  const FrameEnd last = whole.frames.empty() ? FrameEnd{} : whole.frames.back();
  if (!written || std::fflush(plain) != 0 ||
      static_cast<std::uint64_t>(std::ftell(plain)) < last.decompressed ||
      ::ftruncate(fileno(plain), static_cast<off_t>(last.decompressed)) != 0)
    throw RuntimeError("cannot write a temporary file: " + std::string(std::strerror(errno)));
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > last.compressed) whole.dropped = size - last.compressed;
  return whole;
}

}  // namespace masque
