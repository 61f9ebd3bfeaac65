// Row gathering: the rows of a batch that need outputs.
#include <cstring>
#include <string>

#include "masque/error.hpp"
#include "masque/ops.hpp"

namespace masque {

void gather_rows(const Tensor& x, std::span<const std::int32_t> rows, Tensor& out) {
  const std::int64_t width = x.dim(-1), total = width ? x.numel() / width : 0;
  out.resize({static_cast<std::int64_t>(rows.size()), width});
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= total)
      throw RuntimeError("output row " + std::to_string(rows[i]) + " of a batch of " +
                         std::to_string(total) + " tokens");
    std::memcpy(out.f32() + i * width, x.f32() + rows[i] * width, sizeof(float) * width);
  }
}

}  // namespace masque
