// Mask strategy `windowed-causal`: causal attention within a sliding window (Mistral, Qwen2):
// token i sees tokens j <= i with i - j < window. Ranks are positions, as for `causal`; the
// window is carried in the layout and evaluated by the attention kernel (no n x n mask), so
// KV-cached decoding stays valid. (`sliding-window` is the name of the out-of-tree example
// plugin in examples/custom-plugin, which builds the same pattern as a dense mask.)
#include <limits>
#include <string>

#include "masque/error.hpp"
#include "masque/mask.hpp"
#include "masque/params.hpp"

namespace {

class SlidingWindowMask final : public masque::MaskStrategy {
 public:
  explicit SlidingWindowMask(std::int32_t window) : window_(window) {}
  masque::SequenceMask build(const masque::MaskRequest& request) const override {
    masque::SequenceMask mask;
    mask.rank.resize(request.length);
    for (std::int32_t i = 0; i < request.length; ++i) mask.rank[i] = i;
    mask.role.assign(request.length, masque::TokenRole::content);
    mask.window = window_;
    return mask;
  }
  bool supports_incremental() const override { return true; }

 private:
  std::int32_t window_;
};

masque::Plugin* create(const masque::Params& params) {
  const std::int64_t window = params.get_int("window");
  if (window < 1 || window > std::numeric_limits<std::int32_t>::max())
    throw masque::ConfigError("windowed-causal: window must be a positive integer, got " +
                              std::to_string(window));
  return new SlidingWindowMask(static_cast<std::int32_t>(window));
}

const masque::ParamSpec kParams[] = {
    {.name = "window",
     .type = masque::ParamType::integer,
     .default_value = "4096",
     .help = "tokens a query sees: itself and the window - 1 before it (Mistral's and Qwen2's "
             "sliding_window). A model whose config.json has its own sliding_window applies it "
             "by itself under any mask; given both, the narrower holds",
     .min = 1,
     .max = 2147483647},
};

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::mask,
      .name = "windowed-causal",
      .version = "1.0.0",
      .license = "MIT",
      .description = "token i attends to tokens j <= i with i - j < window (sliding-window LM)",
      .params = kParams,
      .num_params = sizeof(kParams) / sizeof(kParams[0]),
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)
