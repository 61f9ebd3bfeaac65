// Mask strategy `bidirectional`: every token sees every token (BERT, masked-token prediction).
#include "masque/error.hpp"
#include "masque/mask.hpp"
#include "masque/params.hpp"

namespace {

class BidirectionalMask final : public masque::MaskStrategy {
 public:
  masque::SequenceMask build(const masque::MaskRequest& request) const override {
    masque::SequenceMask mask;
    mask.rank.assign(request.length, 0);
    mask.role.assign(request.length, masque::TokenRole::content);
    return mask;
  }
  // A new token would be seen by the cached ones: their keys/values would change.
  bool supports_incremental() const override { return false; }
};

masque::Plugin* create(const masque::Params&) {
  return new BidirectionalMask();
}

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::mask,
      .name = "bidirectional",
      .version = "1.0.0",
      .license = "MIT",
      .description = "every token attends to every token (BERT encoder, fill-mask)",
      .params = nullptr,
      .num_params = 0,
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)
