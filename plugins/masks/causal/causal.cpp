// Mask strategy `causal`: token i sees tokens j <= i (GPT; left-to-right LM).
#include "masque/mask.hpp"
#include "masque/params.hpp"

namespace {

class CausalMask final : public masque::MaskStrategy {
 public:
  masque::SequenceMask build(const masque::MaskRequest& request) const override {
    masque::SequenceMask mask;
    mask.rank.resize(request.length);
    for (std::int32_t i = 0; i < request.length; ++i) mask.rank[i] = i;
    mask.role.assign(request.length, masque::TokenRole::content);
    return mask;
  }
  bool supports_incremental() const override { return true; }
};

masque::Plugin* create(const masque::Params&) {
  return new CausalMask();
}

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::mask,
      .name = "causal",
      .version = "1.0.0",
      .license = "MIT",
      .description = "token i attends to tokens 0..i (left-to-right language model)",
      .params = nullptr,
      .num_params = 0,
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)
