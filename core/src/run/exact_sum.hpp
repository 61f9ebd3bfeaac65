// A sum of doubles that does not depend on the order of the terms: each term is rounded once
// to a multiple of 2^-64 (exact for |x| >= 2^-12) and added as a 128-bit integer. Corpus
// figures (lm-score's total NLL) use it so that a run over any number of threads, shards or
// MPI ranks adds up to the same bits as one process.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace masque {

class ExactSum {
 public:
  void add(double x) {
    // Terms beyond the fixed-point range (|x| >= 2^62) or not finite are kept apart.
    if (!std::isfinite(x) || std::fabs(x) >= 0x1p62) {
      special_ += x;
      return;
    }
    // x = whole + a 2^-32 + b 2^-64: every step is exact in double except b's final rounding.
    const double whole = std::trunc(x);
    const double a = std::ldexp(x - whole, 32);
    const double a_whole = std::trunc(a);
    const double b = std::nearbyint(std::ldexp(a - a_whole, 32));
    constexpr __int128 k32 = __int128{1} << 32;
    fixed_ += static_cast<__int128>(static_cast<std::int64_t>(whole)) * k32 * k32 +
              static_cast<__int128>(static_cast<std::int64_t>(a_whole)) * k32 +
              static_cast<__int128>(static_cast<std::int64_t>(b));
  }

  void add(const ExactSum& other) {
    fixed_ += other.fixed_;
    special_ += other.special_;
  }

  double value() const { return static_cast<double>(fixed_) * 0x1p-64 + special_; }

  // A lossless text form, for passing partial sums between processes.
  std::string encode() const {
    const auto u = static_cast<unsigned __int128>(fixed_);
    char text[96];
    std::snprintf(text, sizeof text, "%016llx%016llx:%a", static_cast<unsigned long long>(u >> 64),
                  static_cast<unsigned long long>(u), special_);
    return text;
  }
  static ExactSum decode(const std::string& text) {
    ExactSum s;
    if (text.size() < 33 || text[32] != ':') return s;
    const unsigned long long hi = std::strtoull(text.substr(0, 16).c_str(), nullptr, 16);
    const unsigned long long lo = std::strtoull(text.substr(16, 16).c_str(), nullptr, 16);
    s.fixed_ = static_cast<__int128>((static_cast<unsigned __int128>(hi) << 64) | lo);
    s.special_ = std::strtod(text.c_str() + 33, nullptr);
    return s;
  }

 private:
  __int128 fixed_ = 0;  // the sum in units of 2^-64
  double special_ = 0.0;
};

}  // namespace masque
