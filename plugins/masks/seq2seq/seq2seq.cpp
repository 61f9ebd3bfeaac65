// Mask strategy `seq2seq` (UniLM): the source (segment 0) sees the whole source; a target token
// (segment 1) sees the source and the target tokens up to itself. rank = cumsum(segments).
#include <string>

#include "masque/error.hpp"
#include "masque/mask.hpp"
#include "masque/params.hpp"

namespace {

class Seq2SeqMask final : public masque::MaskStrategy {
 public:
  masque::SequenceMask build(const masque::MaskRequest& request) const override {
    if (request.segments.size() != static_cast<std::size_t>(request.length))
      throw masque::RecordError("the seq2seq mask needs one segment id per token (" +
                                std::to_string(request.length) + " tokens, " +
                                std::to_string(request.segments.size()) + " segment ids)");
    masque::SequenceMask mask;
    mask.rank.resize(request.length);
    std::int32_t sum = 0;
    for (std::int32_t i = 0; i < request.length; ++i) {
      std::int32_t s = request.segments[i];
      if (s != 0 && s != 1)
        throw masque::RecordError("segment ids must be 0 (source) or 1 (target), got " +
                                  std::to_string(s) + " at position " + std::to_string(i));
      sum += s;
      mask.rank[i] = sum;
    }
    mask.role.assign(request.length, masque::TokenRole::content);
    return mask;
  }
  // Target tokens are appended with increasing rank; the source never sees them.
  bool supports_incremental() const override { return true; }
};

masque::Plugin* create(const masque::Params&) {
  return new Seq2SeqMask();
}

const masque::PluginDescriptor* descriptor() {
  static const masque::PluginDescriptor d{
      .kind = masque::PluginKind::mask,
      .name = "seq2seq",
      .version = "1.0.0",
      .license = "MIT",
      .description = "UniLM: source sees source, target sees source and earlier target",
      .params = nullptr,
      .num_params = 0,
      .create = create,
  };
  return &d;
}

}  // namespace

MASQUE_PLUGIN(descriptor)
