// Mask strategy `sliding-window` (local causal attention, as in Longformer and Mistral): each
// token sees the `window` most recent positions, itself included. Query token i may attend key
// token j when
//
//     i - window < j <= i
//
// so window = 1 means "only itself", window = 2 "itself and the token just before it", and a
// window at least as long as the sequence is exactly the `causal` mask.
//
// A window is not expressible by ranks (token i must stop seeing token i - window although it
// ranks below i), so the strategy fills the dense n x n matrix. Dense masks are supported by
// full forward passes only, so the strategy says it cannot be used with incremental (KV-cached)
// decoding. Segments and factorization orders in the request are ignored.
#include <algorithm>
#include <cstdint>

#include "masque/mask.hpp"
#include "masque/params.hpp"

namespace {

class SlidingWindowMask final : public masque::MaskStrategy {
 public:
  explicit SlidingWindowMask(const masque::Params& params) : window_(params.get_int("window")) {}

  masque::SequenceMask build(const masque::MaskRequest& request) const override {
    const std::int32_t n = request.length;
    masque::SequenceMask mask;
    mask.role.assign(n, masque::TokenRole::content);
    // Ranks are not used by a dense mask; positions keep them meaningful for display.
    mask.rank.resize(n);
    for (std::int32_t i = 0; i < n; ++i) mask.rank[i] = i;
    mask.dense.assign(static_cast<std::size_t>(n) * n, 0);
    for (std::int32_t i = 0; i < n; ++i) fill_row(mask.dense.data() + std::size_t(i) * n, i);
    return mask;
  }

  bool supports_incremental() const override { return false; }

 private:
  // Row i: keys max(0, i - window + 1) .. i.
  void fill_row(std::uint8_t* row, std::int32_t i) const {
    const std::int64_t first = std::max<std::int64_t>(0, std::int64_t{i} - window_ + 1);
    std::fill(row + first, row + i + 1, std::uint8_t{1});
  }

  std::int64_t window_;
};

masque::Plugin* create(const masque::Params& params) {
  return new SlidingWindowMask(params);
}

const masque::ParamSpec kParams[] = {
    {.name = "window",
     .type = masque::ParamType::integer,
     .default_value = "256",
     .help = "how many positions each token sees, itself included: token i sees tokens j with "
             "i - window < j <= i (1 = only itself; >= the sequence length = causal)",
     .min = 1,
     .max = 65536},
};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::mask,
      .name = "sliding-window",
      .version = "1.0.0",
      .license = "MIT",
      .description = "token i attends to the `window` positions i - window + 1 .. i (local causal)",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)
