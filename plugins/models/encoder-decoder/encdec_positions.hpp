// Position encodings added to the scaled token embeddings: a sinusoidal table computed once at
// load time, or a learned table from the checkpoint.
#pragma once

#include <cstdint>
#include <span>

#include "encdec_config.hpp"
#include "masque/tensor.hpp"

namespace masque::encdec {

class PositionTable {
 public:
  PositionTable() = default;
  // max_positions rows of the configured sinusoid, computed in float32 as CTranslate2 does.
  static PositionTable sinusoidal(const PositionConfig& config, std::int32_t dim);
  // A learned table [offset + max_positions, dim]: position t reads row t + offset.
  static PositionTable learned(Tensor table, std::int32_t offset, std::int32_t max_positions);

  std::int32_t size() const { return size_; }  // positions 0 .. size() - 1
  const float* row(std::int32_t position) const {
    return table_.f32() + (std::int64_t{position} + offset_) * table_.dim(1);
  }
  // RecordError for a position outside the table.
  void check(std::span<const std::int32_t> positions) const;
  // x[r] += encoding of positions[r] (checked before).
  void add_to(std::span<const std::int32_t> positions, Tensor& x) const;

 private:
  Tensor table_;
  std::int32_t offset_ = 0, size_ = 0;
};

}  // namespace masque::encdec
