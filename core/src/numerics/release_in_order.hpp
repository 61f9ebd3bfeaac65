// A weight's source released as its rows are consumed in order (internal): quantizing a large
// memory-mapped weight then never holds the source whole beside its copy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "masque/layers.hpp"

namespace masque::numerics {

class ReleaseInOrder {
 public:
  ReleaseInOrder(const SourceRelease& release, std::size_t row_bytes)
      : release_(release), row_bytes_(row_bytes) {}

  // Rows 0..r are done.
  void row(std::int64_t r) {
    if (!release_) return;
    const std::size_t done = static_cast<std::size_t>(r + 1) * row_bytes_;
    if (done - released_ < kStep) return;  // a madvise a row would cost more than the row
    release_(done);
    released_ = done;
  }

 private:
  static constexpr std::size_t kStep = std::size_t{4} << 20;
  const SourceRelease& release_;
  std::size_t row_bytes_, released_ = 0;
};

}  // namespace masque::numerics
